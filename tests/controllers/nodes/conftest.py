"""The control plane shared by the tests of Steward's node and pod controllers:
``nodelifecycle``, ``taint-eviction-controller``, ``podgc`` and ``ttl``.

``nodes_cluster`` (one per test package) runs kube-controller-manager without the
upstream controllers these tests replace (:data:`UPSTREAM_OFF`), so that only Steward's
controller acts on what a test makes there; the session's ``cluster`` (every upstream
controller on) is the reference side of the differential tests. Each controller's tests
live in modules of their own here (``test_<controller>*.py``), with their fixtures in a
module of their own.

Nodes whose health a test controls are made by the test without kwok's annotation
(kwok manages only the nodes annotated ``kwok.x-k8s.io/node=fake``), so nothing renews
their Lease or status but the test itself.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from steward.cluster import LocalCluster
from steward.kube import KubeClient
from tests.conftest import local_cluster
from tests.controllers.harness import admin_kube, scoped_namespace

UPSTREAM_OFF = ("nodelifecycle", "taint-eviction-controller", "podgc", "ttl")
"""kube-controller-manager's controllers that ``nodes_cluster`` runs without."""


@pytest.fixture(scope="package")
def nodes_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local control plane without upstream's node lifecycle, taint eviction, pod GC
    and TTL controllers (two kwok nodes)."""
    controllers = ",".join(["*", *(f"-{name}" for name in UPSTREAM_OFF)])
    yield from local_cluster(tmp_path_factory, "nodes", nodes=2, controllers=controllers)


@pytest.fixture
def nodes_kube(nodes_cluster: LocalCluster) -> Iterator[KubeClient]:
    """Admin client of ``nodes_cluster`` (the tests' own reads and writes)."""
    yield from admin_kube(nodes_cluster, workers=8)


@pytest.fixture
def nodes_namespace(nodes_kube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace of ``nodes_cluster`` for one test, once pods may be made in it
    (its ``default`` ServiceAccount exists); deleted afterwards."""
    yield from scoped_namespace(nodes_kube, request)
