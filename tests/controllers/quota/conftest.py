"""The control plane of the tests of Steward's ``resourcequota`` controller.

``quota_cluster`` (one per test package) runs kube-controller-manager without its
resourcequota-controller, so that only Steward's controller writes a quota's status
there; the session's ``cluster`` (every upstream controller on) is the reference side of
the differential tests. A quota without a status restricts nothing: admission matches
what a quota counts by its ``status.hard``, so it enforces a quota only once the
controller has written its status.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from steward.cluster import LocalCluster
from steward.kube import KubeClient
from tests.conftest import local_cluster
from tests.controllers.harness import admin_kube, drop_namespace


@pytest.fixture(scope="package")
def quota_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local control plane without upstream's resourcequota controller (one kwok node)."""
    yield from local_cluster(tmp_path_factory, "quota", nodes=1, controllers="*,-resourcequota")


@pytest.fixture
def quota_kube(quota_cluster: LocalCluster) -> Iterator[KubeClient]:
    """Admin client of ``quota_cluster`` (the tests' own reads and writes)."""
    yield from admin_kube(quota_cluster, workers=8)


@pytest.fixture
def quota_namespace(quota_kube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace of ``quota_cluster`` for one test (deleted afterwards)."""
    base = request.node.name.lower().replace("_", "-")
    name = "".join(c for c in base if c.isalnum() or c == "-")[:40].strip("-")
    name = f"{name}-{uuid.uuid4().hex[:6]}"
    quota_kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    try:
        yield name
    finally:
        drop_namespace(quota_kube, name)
