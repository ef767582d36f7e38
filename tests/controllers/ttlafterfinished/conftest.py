"""The control plane of the TTL-after-finished controller's tests: ``ttlaf_cluster`` (one
per test package) runs kube-controller-manager with only the garbage collector (which
carries out a foreground deletion: the Job's pods first) and the ServiceAccount
controller (pods are refused until their namespace's ``default`` account exists), so
that only Steward's controller deletes Jobs there; the session's ``cluster`` (every
upstream controller on) is the reference side of the differential test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from steward.cluster import LocalCluster
from steward.controllers.ttlafterfinished.controller import CONTROLLER as TTLAF
from steward.kube import KubeClient
from tests.conftest import local_cluster
from tests.controllers.harness import (
    Starter,
    admin_kube,
    controllers,
    in_loop_informer,
    scoped_namespace,
)

UPSTREAM_ON = "garbagecollector,serviceaccount"
"""kube-controller-manager's controllers in ``ttlaf_cluster``."""


@pytest.fixture(scope="package")
def ttlaf_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local control plane without upstream's ttl-after-finished (nor Job) controller,
    one kwok node (nothing is scheduled: the tests' pods name no scheduler there is)."""
    yield from local_cluster(tmp_path_factory, "ttlaf", nodes=1, controllers=UPSTREAM_ON)


@pytest.fixture
def ttlaf_kube(ttlaf_cluster: LocalCluster) -> Iterator[KubeClient]:
    """Admin client of ``ttlaf_cluster`` (the tests' own reads and writes)."""
    yield from admin_kube(ttlaf_cluster)


@pytest.fixture
def ttlaf_namespace(ttlaf_kube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace of ``ttlaf_cluster`` for one test; dropped afterwards with the
    test's finalizers released."""
    yield from scoped_namespace(ttlaf_kube, request)


@pytest_asyncio.fixture
async def ttlaf(ttlaf_cluster: LocalCluster, ttlaf_namespace: str) -> AsyncIterator[Starter]:
    """An informer of ``ttlaf_cluster`` and a starter of Steward's controller as its own
    identity (five workers, as upstream) for the Jobs of ``ttlaf_namespace``, stopped at
    the end."""
    async with (
        in_loop_informer(ttlaf_cluster) as informer,
        controllers(
            TTLAF,
            ttlaf_cluster.component_kubeconfig("controller-ttl-after-finished"),
            informer,
            ttlaf_namespace,
            workers=5,
        ) as starter,
    ):
        yield starter
