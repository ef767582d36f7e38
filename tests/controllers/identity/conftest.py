"""The control plane shared by the tests of Steward's identity and certificate controllers.

``id_cluster`` (one per test package, so one for all of them) runs kube-controller-manager
without the upstream controllers these tests replace (:data:`UPSTREAM_OFF`), so that only
Steward's controller acts on what a test makes there; the session's ``cluster`` (every
upstream controller on) is the reference side of the differential tests. Each
controller's tests live in modules of their own here (``test_<controller>*.py``), with
their fixtures in a module of their own.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import pytest

from steward.cluster import LocalCluster
from steward.kube import ConflictError, KubeClient
from tests.conftest import local_cluster
from tests.controllers.harness import admin_kube, drop_namespace

UPSTREAM_OFF = (
    "serviceaccount",
    "serviceaccount-token",
    "legacy-service-account-token-cleaner",
    "root-ca-cert-publisher",
    "clusterrole-aggregation",
    "csrapproving",
    "csrsigning",
    "csrcleaner",
)
"""kube-controller-manager's controllers that ``id_cluster`` runs without (its
``bootstrapsigner`` and ``tokencleaner`` are off by default)."""


@pytest.fixture(scope="package")
def id_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local control plane without upstream's identity and certificate controllers
    (one kwok node)."""
    controllers = ",".join(["*", *(f"-{name}" for name in UPSTREAM_OFF)])
    yield from local_cluster(tmp_path_factory, "identity", nodes=1, controllers=controllers)


@pytest.fixture
def id_kube(id_cluster: LocalCluster) -> Iterator[KubeClient]:
    """Admin client of ``id_cluster`` (the tests' own reads and writes)."""
    yield from admin_kube(id_cluster, workers=8)


@pytest.fixture
def id_namespace(id_kube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace of ``id_cluster`` for one test (deleted afterwards if the test
    has not), with its ``default`` ServiceAccount made by the test, since no
    serviceaccount controller runs there unless a test starts Steward's."""
    base = request.node.name.lower().replace("_", "-")
    name = "".join(c for c in base if c.isalnum() or c == "-")[:40].strip("-")
    name = f"{name}-{uuid.uuid4().hex[:6]}"
    id_kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    with contextlib.suppress(ConflictError):
        id_kube.request(
            "POST", f"/api/v1/namespaces/{name}/serviceaccounts", {"metadata": {"name": "default"}}
        )
    try:
        yield name
    finally:
        drop_namespace(id_kube, name)
