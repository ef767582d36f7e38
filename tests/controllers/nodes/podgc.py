"""Fixtures and scenarios of the pod garbage collector's tests.

Steward's collector runs in this process against ``nodes_cluster`` (where
kube-controller-manager runs no podgc) as its own identity, with only its RBAC of
``deploy/rbac/``, watching the pods of the test's namespace alone (the nodes are
cluster-scoped and all read) and sweeping every :data:`PERIOD` with a quarantine of
:data:`QUARANTINE`, so that a scenario takes seconds there; the session's ``cluster`` runs
upstream's (20 s and 40 s). Upstream's threshold of terminated pods (12500 there) counts
them cluster-wide, so its side of :func:`over_threshold` runs in a control plane of its
own (``threshold_cluster``, one per test module) whose kube-controller-manager runs only
the collector, with a threshold of :data:`THRESHOLD`, and the ServiceAccount controller.

# Scenarios
Each scenario takes a :class:`GCSide` (a cluster's admin client, the test's namespace
there) and makes what the collector must act on: nodes of its own (no kwok annotation,
so nothing keeps them Ready; the test's own NoSchedule taint, so nothing else lands on
them; deleted at the end) and pods bound to them or to none, held by the test's
finalizer so that what the collector wrote can be read before the pod goes. It returns a
snapshot of that (:func:`gc_view`), asserting upstream's semantics on the way, so it runs
on either side and the differential test compares the two sides' snapshots.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio

from steward.cluster import LocalCluster
from steward.controllers.podgc.controller import CONTROLLER as PODGC
from steward.kube import KubeClient, NotFoundError
from tests.conftest import local_cluster
from tests.controllers.harness import (
    Starter,
    admin_kube,
    controllers,
    eventually,
    in_loop_informer,
    scoped_namespace,
    stays,
)

PERIOD = "300ms"
"""Steward's sweep period in these tests (upstream's 20 s)."""
QUARANTINE = "2s"
"""Steward's quarantine in these tests (upstream's 40 s)."""
WITHIN_STEWARD = 30.0
WITHIN_UPSTREAM = 120.0
"""Seconds a side may take to collect (deadlines, not measurements): upstream's orphans
wait a quarantine of 40 s and up to two sweeps of 20 s."""
HOLD = "steward.test/hold"
"""The test's finalizer: a collected pod stays readable until the test lets it go."""
TEST_TAINT = {"key": "steward.test/podgc", "effect": "NoSchedule"}
"""The taint of every node the tests make: nothing else is scheduled there."""
OUT_OF_SERVICE = {"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}
NOBODY = "steward-test-no-scheduler"
"""A scheduler name no scheduler answers to: the pod stays unscheduled."""
THRESHOLD = 2
"""The ``--terminated-pod-gc-threshold`` of :func:`over_threshold`, on either side."""


@pytest_asyncio.fixture
async def podgc(nodes_cluster: LocalCluster, gc_namespace: str) -> AsyncIterator[Starter]:
    """An informer of ``nodes_cluster`` and a starter of Steward's collector as its own
    identity (one worker, as upstream) for the pods of ``gc_namespace``, stopped at the
    end."""
    async with (
        in_loop_informer(nodes_cluster) as informer,
        controllers(
            PODGC,
            nodes_cluster.component_kubeconfig("controller-podgc"),
            informer,
            gc_namespace,
            workers=1,
            flags=[f"--pod-gc-check-period={PERIOD}", f"--pod-gc-quarantine-time={QUARANTINE}"],
        ) as starter,
    ):
        yield starter


@pytest.fixture
def gc_namespace(nodes_kube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace of ``nodes_cluster`` once pods may be made in it; dropped after
    with the test's finalizers released."""
    yield from scoped_namespace(nodes_kube, request)


@pytest.fixture(scope="module")
def threshold_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The upstream side of :func:`over_threshold`: a local control plane whose
    kube-controller-manager runs upstream's collector with a threshold of
    :data:`THRESHOLD` and the ``serviceaccount`` controller (pods are refused until their
    namespace's ``default`` ServiceAccount exists; their tokens are projected, so the
    ``serviceaccount-token`` controller is not needed), nothing else. The threshold
    counts terminated pods cluster-wide: nothing here makes pods but the test."""
    yield from local_cluster(
        tmp_path_factory,
        "podgc-threshold",
        nodes=1,
        controllers="podgc,serviceaccount",
        kcm_flags=(f"--terminated-pod-gc-threshold={THRESHOLD}",),
    )


@pytest.fixture
def threshold_kube(threshold_cluster: LocalCluster) -> Iterator[KubeClient]:
    """Admin client of ``threshold_cluster``."""
    yield from admin_kube(threshold_cluster)


@pytest.fixture
def threshold_namespace(
    threshold_kube: KubeClient, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A fresh namespace of ``threshold_cluster`` once pods may be made in it; dropped
    after with the test's finalizers released."""
    yield from scoped_namespace(threshold_kube, request)


@dataclass
class GCSide:
    """One side of a scenario: a cluster's admin client, the namespace, how long its
    collector may take, and the nodes made there (deleted by :meth:`cleanup`)."""

    name: str
    kube: KubeClient
    ns: str
    within: float
    nodes: list[str] = field(default_factory=list)

    async def call(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        return await self.kube.arequest(method, path, body, **kw)

    def pod_path(self, name: str = "") -> str:
        base = f"/api/v1/namespaces/{self.ns}/pods"
        return f"{base}/{name}" if name else base

    async def make_node(self, stem: str, *taints: dict[str, str]) -> str:
        """A bare node (no kwok annotation, no status: not Ready), with the test's taint
        and ``taints``."""
        name = f"podgc-{stem}-{uuid.uuid4().hex[:6]}"
        self.nodes.append(name)
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"steward.test/podgc": "true"}},
            "spec": {"taints": [TEST_TAINT, *taints]},
        }
        await self.call("POST", "/api/v1/nodes", body)
        return name

    async def make_pod(self, name: str, *, node: str = "", held: bool = True) -> dict[str, Any]:
        """A pod bound to ``node`` (or to none, and no scheduler's), tolerating every
        taint, held by the test's finalizer when ``held``."""
        spec: dict[str, Any] = {
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            "tolerations": [{"operator": "Exists"}],
        }
        if node:
            spec["nodeName"] = node
        else:
            spec["schedulerName"] = NOBODY
        meta: dict[str, Any] = {"name": name}
        if held:
            meta["finalizers"] = [HOLD]
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
        pod: dict[str, Any] = await self.call("POST", self.pod_path(), body)
        return pod

    async def get_pod(self, name: str) -> dict[str, Any] | None:
        try:
            pod: dict[str, Any] = await self.call("GET", self.pod_path(name))
            return pod
        except NotFoundError:
            return None

    async def wait_pod(self, name: str, check: Any, what: str) -> dict[str, Any]:
        """The pod once ``check(pod)`` holds (within the side's deadline)."""

        def poll() -> dict[str, Any] | None:
            try:
                pod = self.kube.request("GET", self.pod_path(name))
            except NotFoundError:
                return None
            return pod if check(pod) else None

        found: dict[str, Any] = await eventually(
            poll, f"{self.name}: {what}", within=self.within, interval=0.5
        )
        return found

    async def wait_gone(self, name: str) -> None:
        def gone() -> bool:
            try:
                self.kube.request("GET", self.pod_path(name))
            except NotFoundError:
                return True
            return False

        await eventually(gone, f"{self.name}: pod {name} gone", within=self.within)

    async def release(self, name: str) -> None:
        """Take the test's finalizer off the pod."""
        with contextlib.suppress(NotFoundError):
            await self.call(
                "PATCH",
                self.pod_path(name),
                {"metadata": {"finalizers": None}},
                content_type="application/merge-patch+json",
            )

    async def delete_node(self, name: str) -> None:
        with contextlib.suppress(NotFoundError):
            await self.call("DELETE", f"/api/v1/nodes/{name}")

    def cleanup(self) -> None:
        """Delete the nodes made (the namespace goes with its fixture)."""
        for name in self.nodes:
            with contextlib.suppress(NotFoundError):
                self.kube.request("DELETE", f"/api/v1/nodes/{name}")


def deleting(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def forced(pod: dict[str, Any]) -> bool:
    """Deleted with a grace period of 0 (a force deletion)."""
    return deleting(pod) and pod["metadata"].get("deletionGracePeriodSeconds") == 0


def failed(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Failed"


def gc_view(pod: dict[str, Any]) -> dict[str, Any]:
    """What the collector decides of a pod: its phase, whether and with which grace it
    is being deleted, and its DisruptionTarget condition without its time."""
    status = pod.get("status") or {}
    meta = pod["metadata"]
    target = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"}
        for c in status.get("conditions") or ()
        if c.get("type") == "DisruptionTarget"
    ]
    return {
        "phase": status.get("phase"),
        "observed_generation": status.get("observedGeneration"),
        "deleting": bool(meta.get("deletionTimestamp")),
        "grace": meta.get("deletionGracePeriodSeconds"),
        "disruption_target": target,
        "finalizers": meta.get("finalizers"),
    }


# Scenarios ---------------------------------------------------------------------------------
async def orphaned(side: GCSide) -> dict[str, Any]:
    """A running pod on a node that is then deleted: once the quarantine is over it is
    marked Failed with DisruptionTarget (DeletionByPodGC) and force-deleted."""
    node = await side.make_node("orphan")
    await side.make_pod("orphan", node=node)
    await side.call(
        "PATCH",
        side.pod_path("orphan") + "/status",
        {"status": {"phase": "Running"}},
        content_type="application/merge-patch+json",
    )
    await side.delete_node(node)
    pod = await side.wait_pod("orphan", forced, "the orphan force-deleted")
    view = gc_view(pod)
    await side.release("orphan")
    await side.wait_gone("orphan")
    return view


async def unscheduled(side: GCSide) -> dict[str, Any]:
    """An unscheduled pod the test deletes (held by its finalizer): marked Failed and
    deleted again with a grace period of 0; gone once let go."""
    await side.make_pod("unscheduled")
    await side.call("DELETE", side.pod_path("unscheduled"))
    pod = await side.wait_pod("unscheduled", failed, "the unscheduled pod marked Failed")
    view = gc_view(pod)
    await side.release("unscheduled")
    await side.wait_gone("unscheduled")
    return view


async def out_of_service(side: GCSide) -> dict[str, Any]:
    """A pod on a node out of service (not Ready, the out-of-service taint) that the test
    deletes with the default grace: marked Failed and force-deleted. A terminating pod on
    a node with the taint's key missing (only the test's taint) is left alone."""
    node = await side.make_node("oos", OUT_OF_SERVICE)
    control = await side.make_node("not-oos")
    await side.make_pod("oos", node=node)
    await side.make_pod("control", node=control)
    await side.call("DELETE", side.pod_path("oos"))
    await side.call("DELETE", side.pod_path("control"))
    pod = await side.wait_pod("oos", forced, "the pod on the out-of-service node force-deleted")
    view = gc_view(pod)
    left = await side.get_pod("control")
    assert left is not None
    view["control"] = gc_view(left)
    await side.release("oos")
    await side.wait_gone("oos")
    return view


async def all_cases(side: GCSide) -> dict[str, Any]:
    """The three scenarios at once on one side."""
    try:
        views = await asyncio.gather(orphaned(side), unscheduled(side), out_of_service(side))
    finally:
        await asyncio.to_thread(side.cleanup)
    return dict(zip(("orphaned", "unscheduled", "out-of-service"), views, strict=True))


THRESHOLD_PODS = (
    ("z-oldest", {"phase": "Succeeded"}),
    ("y-middle", {"phase": "Succeeded"}),
    ("x-newest", {"phase": "Failed"}),
    ("w-evicted", {"phase": "Failed", "reason": "Evicted"}),
    ("v-running", {"phase": "Running"}),
)
"""The pods of :func:`over_threshold` in their order of creation, with the status each
is given: names in the opposite order."""


async def over_threshold(
    side: GCSide, begin: Callable[[], object] = lambda: None
) -> dict[str, Any]:
    """Four terminated pods and a running one, unscheduled and held, given their statuses
    in order of creation (the first three created a second apart at least, creation
    times being whole seconds); then ``begin()`` (Steward's side starts its collector
    there). With a threshold of :data:`THRESHOLD` the evicted pod and the oldest are
    force-deleted (not the first two by name, nor the two oldest) and the three others
    stay. A sweep between two of the statuses (upstream's collector runs all along)
    comes to the same: what it deletes stays held, terminated, counted and first in the
    order. Returns each pod's :func:`gc_view` once the two are deleted and the others
    have stayed a while, and the names of the pods left once the two are let go."""
    for name, _ in THRESHOLD_PODS[:3]:
        await side.make_pod(name)
        await asyncio.sleep(1.1)
    for name, _ in THRESHOLD_PODS[3:]:
        await side.make_pod(name)
    for name, status in THRESHOLD_PODS:
        await side.call(
            "PATCH",
            side.pod_path(name) + "/status",
            {"status": status},
            content_type="application/merge-patch+json",
        )
    begin()
    collected = ("z-oldest", "w-evicted")
    for name in collected:
        await side.wait_pod(name, forced, f"{name} force-deleted")

    def pods() -> dict[str, dict[str, Any]]:
        items = side.kube.request("GET", side.pod_path()).get("items") or ()
        return {p["metadata"]["name"]: p for p in items}

    def others_stay() -> bool:
        found = pods()
        return len(found) == len(THRESHOLD_PODS) and not any(
            deleting(pod) for name, pod in found.items() if name not in collected
        )

    await stays(others_stay, f"{side.name}: the three other pods", 1.5)
    seen = {name: gc_view(pod) for name, pod in sorted(pods().items())}
    for name in collected:
        await side.release(name)
    for name in collected:
        await side.wait_gone(name)
    return {"pods": seen, "left": sorted(pods())}
