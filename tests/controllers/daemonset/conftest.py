"""Fixtures of the DaemonSet controller's tests: two control planes of the package's own,
one per side, set up as upstream's integration tests set up theirs.

- ``steward_plane``: kube-controller-manager without its daemonset controller; Steward's
  runs in this process (an informer and the controller on a loop of their own, as the
  identities ``informer`` and ``steward:controller:daemonset`` with only the RBAC of
  ``deploy/rbac/``), two workers, watching the test's namespace.
- ``upstream_plane``: kube-controller-manager with its daemonset controller (two workers,
  its default ``--concurrent-daemonset-syncs``).

Both have no kwok node and run kube-scheduler, which binds the daemon pods. As in
upstream's tests, the nodes are plain Node objects the test creates (Ready, room for 100
pods) that nothing else manages: kube-controller-manager runs without its node lifecycle
controller (upstream's tests run none), and the ``node.kubernetes.io/not-ready`` taint
that the TaintNodesByCondition admission puts on every new node (upstream's tests turn
that plugin off) is taken off right after the create. Pods on those nodes stay Pending
until the test writes their status, as upstream's ``validateDaemonSetPodsAndMarkReady``.

Nodes are cluster-wide: every test deletes the nodes it made, and the tests of a side run
one after the other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from steward.cluster import LocalCluster
from steward.controllers.daemonset.controller import CONTROLLER
from steward.kube import ConflictError, NotFoundError
from tests.conftest import local_cluster
from tests.controllers import harness
from tests.controllers.harness import ControllerHost, hosted, steward, update, upstream

__all__ = ["steward", "upstream"]

IDENTITY = "controller-daemonset"
WORKERS = 2
"""Workers on both sides (upstream's tests and kube-controller-manager's default)."""
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


@pytest.fixture(scope="package")
def steward_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from local_cluster(
        tmp_path_factory, "ds", nodes=0, controllers="*,-daemonset,-nodelifecycle"
    )


@pytest.fixture(scope="package")
def upstream_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from local_cluster(tmp_path_factory, "dsup", nodes=0, controllers="*,-nodelifecycle")


@pytest.fixture(scope="package")
def steward_host(steward_plane: LocalCluster) -> Iterator[ControllerHost]:
    yield from hosted(steward_plane, CONTROLLER, IDENTITY, workers=WORKERS)


@pytest.fixture(scope="package")
def side_kind() -> type[Side]:
    """The sides of this package's scenarios (the harness's ``steward`` and ``upstream``)."""
    return Side


# A side: one control plane, its admin client and the test's namespace -----------------
@dataclass
class Side(harness.Side):
    """One side of a scenario (see :class:`tests.controllers.harness.Side`), with the
    nodes the test made there."""

    nodes: list[str] = field(default_factory=list)

    # Paths
    @property
    def daemonsets(self) -> str:
        return f"/apis/apps/v1/namespaces/{self.ns}/daemonsets"

    @property
    def revisions_path(self) -> str:
        return f"/apis/apps/v1/namespaces/{self.ns}/controllerrevisions"

    # Reads
    def ds(self, name: str) -> dict[str, Any]:
        return self.kube.request("GET", f"{self.daemonsets}/{name}")

    def pods(self) -> list[dict[str, Any]]:
        return list(self.kube.request("GET", self.pods_path).get("items") or ())

    def revisions(self) -> list[dict[str, Any]]:
        return list(self.kube.request("GET", self.revisions_path).get("items") or ())

    # Writes
    def create_ds(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.kube.request("POST", self.daemonsets, body)

    def update_ds(self, name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """Read, change and PUT the DaemonSet, again on a conflict (``updateDS``)."""
        failure = f"{self.name}: could not update DaemonSet {name}"
        return update(self.kube, f"{self.daemonsets}/{name}", change, failure)

    def add_node(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        *,
        taints: list[dict[str, Any]] | None = None,
        unschedulable: bool = False,
        conditions: list[dict[str, Any]] | None = None,
        allocatable: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Upstream's ``newNode``: Ready, room for 100 pods; then the taints the test
        asked for and no other (the admission's not-ready taint taken off)."""
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": dict(labels or {})},
            "spec": {"unschedulable": unschedulable} if unschedulable else {},
            "status": {
                "conditions": conditions or [{"type": "Ready", "status": "True"}],
                "allocatable": allocatable or {"pods": "100"},
                "capacity": allocatable or {"pods": "100"},
            },
        }
        if taints:
            body["spec"]["taints"] = taints
        self.kube.request("POST", "/api/v1/nodes", body)
        self.nodes.append(name)
        return self.set_taints(name, taints or [])

    def set_taints(self, name: str, taints: list[dict[str, Any]]) -> dict[str, Any]:
        def change(node: dict[str, Any]) -> None:
            node["spec"]["taints"] = taints or None

        failure = f"{self.name}: could not set the taints of node {name}"
        return update(self.kube, f"/api/v1/nodes/{name}", change, failure)

    def set_pod_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        """Replace the pod's status (``UpdateStatus``); a pod gone or changed meanwhile
        is left alone (the caller polls again)."""
        body = {**pod, "status": status}
        meta = pod["metadata"]
        with contextlib.suppress(NotFoundError, ConflictError):
            self.kube.request("PUT", f"{self.pods_path}/{meta['name']}/status", body)

    def cleanup(self) -> None:
        """Delete the nodes the test made (the namespace goes with its fixture)."""
        for name in self.nodes:
            with contextlib.suppress(NotFoundError):
                self.kube.request("DELETE", f"/api/v1/nodes/{name}")
