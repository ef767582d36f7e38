"""Fixtures of the HPA controller's tests: two control planes of the package's own, one
per side, each with the resource metrics pipeline (kwok's simulated usage scraped by
metrics-server and served as ``metrics.k8s.io`` through the aggregation layer).

- ``steward_plane``: kube-controller-manager without its horizontalpodautoscaling
  controller; Steward's runs in this process (an informer and the controller on a loop of
  their own, as the identities ``informer`` and
  ``steward:controller:horizontalpodautoscaling`` with only the RBAC of ``deploy/rbac/``),
  watching the test's namespace.
- ``upstream_plane``: kube-controller-manager with every controller, its HPA controller
  included.

Both sync every HPA every :data:`SYNC_SECONDS` and use the same tolerance, stabilization
and readiness settings (their defaults). The targets
are Deployments, rolled out by upstream's Deployment and ReplicaSet controllers on both
sides, their pods run by kwok on two simulated nodes; a test sets what a pod uses with
:mod:`steward.cluster.usage` (pod annotations kwok reads).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from steward.cluster import LocalCluster
from steward.controllers.hpa.controller import CONTROLLER
from tests.conftest import local_cluster
from tests.controllers import harness
from tests.controllers.harness import ControllerHost, hosted, steward, update, upstream

__all__ = ["steward", "upstream"]

IDENTITY = "controller-horizontalpodautoscaling"
SYNC_SECONDS = 5
"""Both sides sync every HPA every 5 s (kube-controller-manager's
--horizontal-pod-autoscaler-sync-period and Steward's flag of that name), a third of the
default, so the scenarios take fewer minutes."""
WORKERS = 5
"""Workers on both sides (kube-controller-manager's
--concurrent-horizontal-pod-autoscaler-syncs)."""


def _plane(
    tmp_path_factory: pytest.TempPathFactory, name: str, **cfg: Any
) -> Iterator[LocalCluster]:
    """A plane with two kwok nodes and the metrics pipeline, syncing every HPA every
    :data:`SYNC_SECONDS`."""
    kcm_flags = (f"--horizontal-pod-autoscaler-sync-period={SYNC_SECONDS}s",)
    yield from local_cluster(
        tmp_path_factory, name, nodes=2, metrics=True, kcm_flags=kcm_flags, **cfg
    )


@pytest.fixture(scope="package")
def steward_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from _plane(tmp_path_factory, "hpa", controllers="*,-horizontalpodautoscaling")


@pytest.fixture(scope="package")
def upstream_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from _plane(tmp_path_factory, "hpaup")


@pytest.fixture(scope="package")
def steward_host(steward_plane: LocalCluster) -> Iterator[ControllerHost]:
    yield from hosted(
        steward_plane,
        CONTROLLER,
        IDENTITY,
        workers=WORKERS,
        flags=("--horizontal-pod-autoscaler-sync-period", str(SYNC_SECONDS)),
    )


@pytest.fixture(scope="package")
def side_kind() -> type[Side]:
    """The sides of this package's scenarios (the harness's ``steward`` and ``upstream``)."""
    return Side


# A side: one control plane, its admin client and the test's namespace -----------------
@dataclass
class Side(harness.Side):
    """One side of a scenario (see :class:`tests.controllers.harness.Side`)."""

    @property
    def hpas(self) -> str:
        return f"/apis/autoscaling/v2/namespaces/{self.ns}/horizontalpodautoscalers"

    @property
    def deployments(self) -> str:
        return f"/apis/apps/v1/namespaces/{self.ns}/deployments"

    def hpa(self, name: str) -> dict[str, Any]:
        return self.kube.request("GET", f"{self.hpas}/{name}")

    def scale(self, name: str) -> int:
        found = self.kube.request("GET", f"{self.deployments}/{name}/scale")
        return int((found.get("spec") or {}).get("replicas") or 0)

    def set_scale(self, name: str, replicas: int) -> None:
        def change(scale: dict[str, Any]) -> None:
            scale["spec"]["replicas"] = replicas

        failure = f"{self.name}: could not scale {name}"
        update(self.kube, f"{self.deployments}/{name}/scale", change, failure)

    def pods(self, app: str) -> list[dict[str, Any]]:
        found = self.kube.request("GET", f"{self.pods_path}?labelSelector=app%3D{app}")
        return [
            p
            for p in found.get("items") or ()
            if not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") in ("Pending", "Running")
        ]

    def events(self, name: str) -> list[dict[str, Any]]:
        found = self.kube.request(
            "GET",
            f"/api/v1/namespaces/{self.ns}/events"
            f"?fieldSelector=involvedObject.kind%3DHorizontalPodAutoscaler,involvedObject.name%3D{name}",
        )
        return list(found.get("items") or ())
