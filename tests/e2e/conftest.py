"""The whole-system tests' services: an informer and a manager on the session's cluster,
either as in production (mutual TLS, RBAC: ``informer``, ``manager``) or for development
(plaintext, with its own identity: ``dev_manager``; ``dev_informer`` is the session's)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from steward.cluster import LocalCluster
from steward.manager import ManagerOptions
from steward.security import PLAINTEXT, ClientSecurity
from steward.serving.security import DEVELOPMENT, ServingSecurity
from tests.manager.conftest import FAST, RunningManager
from tests.services import running_informer


def _manager(
    kubeconfig: str, namespace: str, security: ServingSecurity, client: ClientSecurity
) -> Iterator[RunningManager]:
    options = ManagerOptions(
        security=security,
        listen="127.0.0.1:0",
        kubeconfig=kubeconfig,
        namespace=namespace,
        timing=FAST,
    )
    running = RunningManager(options, client=client)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def informer(cluster: LocalCluster) -> Iterator[str]:
    """An informer serving mutual TLS with RBAC authorization (its address)."""
    yield from running_informer(str(cluster.kubeconfig), cluster.state.serving_security())


@pytest.fixture
def manager(cluster: LocalCluster, namespace: str) -> Iterator[RunningManager]:
    """A manager serving mutual TLS with RBAC authorization, its leases in ``namespace``."""
    yield from _manager(
        str(cluster.kubeconfig),
        namespace,
        cluster.state.serving_security(),
        cluster.client_security(),
    )


@pytest.fixture
def dev_manager(cluster: LocalCluster, namespace: str) -> Iterator[RunningManager]:
    """A plaintext manager (development security) with the manager's own identity."""
    yield from _manager(
        str(cluster.component_kubeconfig("manager")), namespace, DEVELOPMENT, PLAINTEXT
    )
