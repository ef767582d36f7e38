"""Fixtures and helpers of the node lifecycle controller's tests.

Steward's controller runs in this process against ``nodes_cluster`` (where
kube-controller-manager runs no nodelifecycle), as its own identity with only its RBAC of
``deploy/rbac/`` (:func:`lifecycle`), with short periods (:data:`FLAGS`). The nodes a test
makes carry no kwok annotation, so nothing heartbeats for them but the test
(:class:`FakeKubelet`: the node's Lease and its status conditions), and a NoSchedule
taint of their own (:data:`OWN_TAINT`) so that nothing is scheduled onto them; they are
deleted at the end (:func:`test_nodes`).
"""

from __future__ import annotations

import contextlib
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import pytest_asyncio

from steward.cluster import LocalCluster
from steward.controllers.nodelifecycle.controller import CONTROLLER
from steward.kube import ConflictError, KubeClient, NotFoundError
from tests.controllers.harness import (
    Starter,
    controllers,
    in_loop_informer,
    renewing,
    scoped_namespace,
)

GRACE = 8.0
"""Seconds of ``--node-monitor-grace-period`` (and the startup grace) in the tests."""
FLAGS = (
    f"--node-monitor-grace-period={GRACE:g}s",
    f"--node-startup-grace-period={GRACE:g}s",
    "--node-monitor-period=1s",
    "--node-eviction-rate=10",
)
"""The controller's flags in the tests: short grace periods and passes, and a fast
NoExecute rate (the rate limiting itself is the unit tests')."""
OWN_TAINT = {"key": "steward.test/lifecycle", "effect": "NoSchedule"}
"""Every test node's own taint: nothing is scheduled there."""
LEASE_NS = "kube-node-lease"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
WITHIN = 40.0
"""Seconds a node may take to reach a state (a deadline, not a measurement)."""
MANAGED_KEYS = ("node.kubernetes.io/",)


def micro_now() -> str:
    """Now as a Lease's MicroTime."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def sec_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest_asyncio.fixture
async def lifecycle(nodes_cluster: LocalCluster, nodes_kube: KubeClient) -> AsyncIterator[Starter]:
    """A starter of Steward's nodelifecycle on ``nodes_cluster`` (every namespace,
    :data:`FLAGS`), as its own identity; whatever was started is stopped at the end.

    kwok renews its nodes' Leases about every ten seconds, longer than the tests' grace
    period: while the controller may run, the kwok nodes' Leases are renewed every second
    here too, so that they stay Ready (and their pods, which kwok never readies again,
    are left alone)."""
    keeper = FakeKubelet(nodes_kube)
    keeper.alive.update(
        n["metadata"]["name"]
        for n in nodes_kube.request("GET", "/api/v1/nodes")["items"]
        if (n["metadata"].get("annotations") or {}).get(KWOK_ANNOTATION) == "fake"
    )
    assert keeper.alive, "no kwok node in the cluster"
    with keeper.running("kwok-leases"):
        async with (
            in_loop_informer(nodes_cluster) as informer,
            controllers(
                CONTROLLER,
                nodes_cluster.component_kubeconfig("controller-nodelifecycle"),
                informer,
                workers=8,
                flags=FLAGS,
            ) as starter,
        ):
            yield starter


@pytest.fixture
def pods_namespace(nodes_kube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace of ``nodes_cluster`` once pods may be made in it (its default
    ServiceAccount there), dropped afterwards."""
    yield from scoped_namespace(nodes_kube, request)


@pytest.fixture
def test_nodes(nodes_kube: KubeClient) -> Iterator[list[tuple[KubeClient, str]]]:
    """Nodes a test made (client, name), deleted at the end with their Leases."""
    made: list[tuple[KubeClient, str]] = []
    yield made
    for kube, name in made:
        with contextlib.suppress(NotFoundError):
            kube.request("DELETE", f"/api/v1/nodes/{name}")
        with contextlib.suppress(NotFoundError):
            kube.request(
                "DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/{name}"
            )


def ready_condition(status: str = "True", heartbeat: str | None = None) -> dict[str, Any]:
    stamp = heartbeat or sec_now()
    return {
        "type": "Ready",
        "status": status,
        "reason": "KubeletReady" if status == "True" else "KubeletNotReady",
        "message": "test kubelet",
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }


def make_node(
    kube: KubeClient,
    made: list[tuple[KubeClient, str]],
    prefix: str,
    *,
    conditions: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    lease: bool = True,
) -> str:
    """A node (not kwok's) with :data:`OWN_TAINT`, ``labels``, these status
    ``conditions`` (none: a node never ready) and, with ``lease``, a Lease renewed now."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    kube.request(
        "POST",
        "/api/v1/nodes",
        {
            "metadata": {"name": name, "labels": {"steward.test/lifecycle": "", **(labels or {})}},
            "spec": {"taints": [OWN_TAINT]},
        },
    )
    made.append((kube, name))
    if conditions:
        set_conditions(kube, name, conditions)
    if lease:
        kube.request(
            "POST",
            f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases",
            {
                "metadata": {"name": name},
                "spec": {
                    "holderIdentity": name,
                    "leaseDurationSeconds": 40,
                    "renewTime": micro_now(),
                },
            },
        )
    return name


def set_conditions(kube: KubeClient, name: str, conditions: list[dict[str, Any]]) -> None:
    """Replace the node's conditions of these types (as a kubelet posts its status)."""
    for _ in range(20):
        node = kube.request("GET", f"/api/v1/nodes/{name}")
        status = node.setdefault("status", {})
        types = {c["type"] for c in conditions}
        status["conditions"] = [
            *(c for c in status.get("conditions") or () if c["type"] not in types),
            *conditions,
        ]
        try:
            kube.request("PUT", f"/api/v1/nodes/{name}/status", node)
            return
        except ConflictError:
            continue
    raise AssertionError(f"node {name}: conditions not set")


def renew(kube: KubeClient, name: str) -> None:
    kube.request(
        "PATCH",
        f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/{name}",
        {"spec": {"renewTime": micro_now()}},
        content_type="application/merge-patch+json",
    )


class FakeKubelet:
    """Renews the Leases of the nodes :attr:`alive` holds, every second while it runs
    (:meth:`running`); a node's Lease gone is skipped."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        self.alive: set[str] = set()

    def beat(self) -> None:
        """Renew each live node's Lease once."""
        for name in list(self.alive):
            with contextlib.suppress(NotFoundError):
                renew(self.kube, name)

    def running(self, name: str = "fake-kubelet") -> contextlib.AbstractContextManager[None]:
        """Beat at once and then every second on a thread named ``name`` while the block
        runs (:func:`tests.controllers.harness.renewing`)."""
        return renewing(1.0, self.beat, name)


@pytest.fixture
def kubelet(nodes_kube: KubeClient) -> Iterator[FakeKubelet]:
    """A :class:`FakeKubelet` of ``nodes_cluster``, stopped at the end."""
    fake = FakeKubelet(nodes_kube)
    with fake.running():
        yield fake


def node_of(kube: KubeClient, name: str) -> dict[str, Any]:
    return kube.request("GET", f"/api/v1/nodes/{name}")


def conditions_of(node: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (node.get("status") or {}).get("conditions") or ()}


def managed_taints(node: dict[str, Any]) -> set[tuple[str, str]]:
    """The node's taints of ``node.kubernetes.io/`` keys, as (key, effect)."""
    return {
        (t["key"], t["effect"])
        for t in (node.get("spec") or {}).get("taints") or ()
        if t["key"].startswith(MANAGED_KEYS)
    }


def make_ready_pod(kube: KubeClient, ns: str, node: str | None) -> str:
    """A pod whose status says Running and Ready (as a kubelet would), bound to
    ``node``; with None, unbound and left to a scheduler that does not exist (see
    :func:`bind`)."""
    name = f"pod-{uuid.uuid4().hex[:6]}"
    placement = {"nodeName": node} if node else {"schedulerName": "steward-test-nobody"}
    kube.request(
        "POST",
        f"/api/v1/namespaces/{ns}/pods",
        {
            "metadata": {"name": name},
            "spec": {
                **placement,
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                "tolerations": [{"operator": "Exists"}],
            },
        },
    )
    path = f"/api/v1/namespaces/{ns}/pods/{name}"
    for _ in range(20):
        pod = kube.request("GET", path)
        pod["status"] = {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": sec_now()},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": sec_now()},
            ],
        }
        try:
            kube.request("PUT", f"{path}/status", pod)
            return name
        except ConflictError:
            continue
    raise AssertionError(f"pod {name}: status not set")


def bind(kube: KubeClient, ns: str, pod: str, node: str) -> None:
    """Bind the pod to the node, as a scheduler does (the binding subresource)."""
    kube.request(
        "POST",
        f"/api/v1/namespaces/{ns}/pods/{pod}/binding",
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        },
    )


def pod_ready(kube: KubeClient, ns: str, name: str) -> str | None:
    pod = kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond["type"] == "Ready":
            return str(cond["status"])
    return None


def event_reasons(kube: KubeClient, ns: str, kind: str, name: str) -> set[tuple[str, str]]:
    """(reason, type) of the Events in ``ns`` about the object ``kind``/``name``."""
    selector = urllib.parse.quote(f"involvedObject.kind={kind},involvedObject.name={name}")
    events = kube.request("GET", f"/api/v1/namespaces/{ns}/events?fieldSelector={selector}")
    return {(e["reason"], e["type"]) for e in events.get("items") or ()}
