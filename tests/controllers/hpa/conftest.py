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

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from steward.cluster import LocalCluster
from steward.controllers.hpa.controller import CONTROLLER
from steward.kube import ConflictError, KubeClient, NotFoundError, load_access
from tests.conftest import local_cluster
from tests.services import ControllerHost, new_namespace

_T = TypeVar("_T")

IDENTITY = "controller-horizontalpodautoscaling"
SYNC_SECONDS = 5
"""Both sides sync every HPA every 5 s (kube-controller-manager's
--horizontal-pod-autoscaler-sync-period and Steward's flag of that name), a third of the
default, so the scenarios take fewer minutes."""
WORKERS = 5
"""Workers on both sides (kube-controller-manager's
--concurrent-horizontal-pod-autoscaler-syncs)."""


@pytest.fixture(scope="package")
def steward_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from local_cluster(
        tmp_path_factory,
        "hpa",
        nodes=2,
        controllers="*,-horizontalpodautoscaling",
        metrics=True,
        kcm_flags=(f"--horizontal-pod-autoscaler-sync-period={SYNC_SECONDS}s",),
    )


@pytest.fixture(scope="package")
def upstream_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from local_cluster(
        tmp_path_factory,
        "hpaup",
        nodes=2,
        metrics=True,
        kcm_flags=(f"--horizontal-pod-autoscaler-sync-period={SYNC_SECONDS}s",),
    )


@pytest.fixture(scope="package")
def steward_host(steward_plane: LocalCluster) -> Iterator[ControllerHost]:
    host = ControllerHost(
        steward_plane,
        CONTROLLER,
        IDENTITY,
        workers=WORKERS,
        flags=("--horizontal-pod-autoscaler-sync-period", str(SYNC_SECONDS)),
    )
    try:
        yield host
    finally:
        host.close()


# A side: one control plane, its admin client and the test's namespace -----------------
@dataclass
class Side:
    """One side of a scenario: its control plane's admin client and the test's
    namespace."""

    name: str
    kube: KubeClient
    ns: str
    plane: LocalCluster

    @property
    def hpas(self) -> str:
        return f"/apis/autoscaling/v2/namespaces/{self.ns}/horizontalpodautoscalers"

    @property
    def deployments(self) -> str:
        return f"/apis/apps/v1/namespaces/{self.ns}/deployments"

    @property
    def pods_path(self) -> str:
        return f"/api/v1/namespaces/{self.ns}/pods"

    def hpa(self, name: str) -> dict[str, Any]:
        return self.kube.request("GET", f"{self.hpas}/{name}")

    def scale(self, name: str) -> int:
        found = self.kube.request("GET", f"{self.deployments}/{name}/scale")
        return int((found.get("spec") or {}).get("replicas") or 0)

    def set_scale(self, name: str, replicas: int) -> None:
        for _ in range(20):
            found = self.kube.request("GET", f"{self.deployments}/{name}/scale")
            found["spec"]["replicas"] = replicas
            try:
                self.kube.request("PUT", f"{self.deployments}/{name}/scale", found)
                return
            except ConflictError:
                continue
        raise AssertionError(f"{self.name}: could not scale {name}")

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


@contextlib.contextmanager
def _side(name: str, plane: LocalCluster, request: pytest.FixtureRequest) -> Iterator[Side]:
    kube = KubeClient(load_access(str(plane.kubeconfig)), user_agent=f"hpa-test-{name}")
    ns = new_namespace(kube, request)
    try:
        yield Side(name, kube, ns, plane)
    finally:
        try:
            with contextlib.suppress(NotFoundError, ConflictError):
                kube.request("DELETE", f"/api/v1/namespaces/{ns}")
        finally:
            kube.close()


@pytest.fixture
def steward(
    steward_plane: LocalCluster, steward_host: ControllerHost, request: pytest.FixtureRequest
) -> Iterator[Side]:
    """The Steward side: a fresh namespace, Steward's controller watching it."""
    with _side("steward", steward_plane, request) as side:
        steward_host.start(side.ns)
        try:
            yield side
        finally:
            steward_host.stop_controller()


@pytest.fixture
def upstream(upstream_plane: LocalCluster, request: pytest.FixtureRequest) -> Iterator[Side]:
    """The upstream side: a fresh namespace of the plane where kube-controller-manager's
    HPA controller runs."""
    with _side("upstream", upstream_plane, request) as side:
        yield side
