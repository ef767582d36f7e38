"""Fixtures of the disruption controller's integration tests: a control plane of the
package's own for Steward's side, the session's for upstream's.

- ``steward_plane``: kube-controller-manager without its disruption controller, two kwok
  nodes (which make scheduled pods Running and Ready); Steward's controller runs in this
  process (an informer and the controller on a loop of their own, as the identity
  ``steward:controller:disruption`` with only the RBAC of ``deploy/rbac/``), watching the
  test's namespace.
- ``upstream_plane``: the session's ``cluster``, where kube-controller-manager runs its
  disruption controller (and, on both planes, its workload controllers).

:class:`Side` holds the reads and writes of the scenarios (:mod:`.scenarios`); the
``steward`` and ``upstream`` fixtures (the harness's) give one each, in a fresh namespace.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from steward.cluster import LocalCluster
from steward.controllers.disruption.controller import CONTROLLER
from steward.kube import NotFoundError
from tests.conftest import local_cluster
from tests.controllers.disruption.scenarios import GROUP, Side
from tests.controllers.harness import ControllerHost, admin_kube, hosted, steward, upstream

__all__ = ["steward", "upstream"]

IDENTITY = "controller-disruption"
CRD = f"scalables.{GROUP}"


@pytest.fixture(scope="package")
def steward_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from local_cluster(tmp_path_factory, "disruption", nodes=2, controllers="*,-disruption")


@pytest.fixture(scope="package")
def steward_host(steward_plane: LocalCluster) -> Iterator[ControllerHost]:
    yield from hosted(steward_plane, CONTROLLER, IDENTITY, workers=2)


@pytest.fixture
def upstream_plane(cluster: LocalCluster) -> LocalCluster:
    return cluster


@pytest.fixture(scope="package", autouse=True)
def scalable_crd(steward_plane: LocalCluster, cluster: LocalCluster) -> Iterator[None]:
    """The CRD of ``Scalable`` on both planes from the package's start (upstream's REST
    mapper learns a new kind only at its next reset, every 30 s); deleted from the
    session's cluster at the end (the package's plane goes)."""
    for plane in (steward_plane, cluster):
        for kube in admin_kube(plane):
            Side("setup", kube, "", plane).ensure_crd()
    yield
    for kube in admin_kube(cluster):
        with contextlib.suppress(NotFoundError):
            kube.request("DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD}")


@pytest.fixture(scope="package")
def side_kind() -> type[Side]:
    """The sides of this package's scenarios (the harness's ``steward`` and ``upstream``)."""
    return Side
