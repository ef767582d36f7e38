"""Steward's node lifecycle controller on a real API server (``nodes_cluster``, where
kube-controller-manager runs no nodelifecycle): a node whose Lease is renewed stays
Ready; left alone it goes Unknown, is tainted unreachable (NoSchedule and NoExecute) and
its pods are marked not ready; heartbeating again it loses the taints; a node reporting
NotReady or memory pressure, or made unschedulable, gets the matching taints; and when
every zone is down, no node is tainted NoExecute."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from steward.kube import KubeClient
from tests.controllers.harness import Starter, eventually, stays, update
from tests.controllers.nodes.lifecycle import (
    GRACE,
    WITHIN,
    FakeKubelet,
    bind,
    conditions_of,
    event_reasons,
    kubelet,
    lifecycle,
    make_node,
    make_ready_pod,
    managed_taints,
    node_of,
    pod_ready,
    pods_namespace,
    ready_condition,
    renew,
    set_conditions,
    test_nodes,
)

__all__ = ["kubelet", "lifecycle", "pods_namespace", "test_nodes"]

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"
EXCLUDE = "node.kubernetes.io/exclude-disruption"


async def test_dead_node_goes_unknown_tainted_and_comes_back(
    nodes_kube: KubeClient,
    pods_namespace: str,
    lifecycle: Starter,
    kubelet: FakeKubelet,
    test_nodes: list[tuple[KubeClient, str]],
) -> None:
    """Lease renewed → Ready for longer than the grace period; Lease left → Ready and
    the pressure conditions Unknown (upstream's reasons), unreachable NoSchedule and
    NoExecute, the pod not ready with Events; Lease and status again → taints gone."""
    kube = nodes_kube
    name = make_node(kube, test_nodes, "nl-dead", conditions=[ready_condition()])
    pod = make_ready_pod(kube, pods_namespace, name)
    kubelet.alive.add(name)
    lifecycle.start()

    def healthy() -> bool:
        node = node_of(kube, name)
        return conditions_of(node)["Ready"]["status"] == "True" and not managed_taints(node)

    # The API server's admission taints a new node not-ready:NoSchedule; a Ready one loses it.
    await eventually(healthy, "the admission's not-ready taint removed", WITHIN)
    await stays(healthy, "the node Ready and untainted while its Lease is renewed", GRACE + 3)
    kubelet.alive.discard(name)

    def dead() -> dict[str, object] | None:
        node = node_of(kube, name)
        taints = managed_taints(node)
        if (UNREACHABLE, "NoExecute") in taints and (UNREACHABLE, "NoSchedule") in taints:
            return node
        return None

    node = await eventually(dead, "the unreachable taints", WITHIN)
    conditions = conditions_of(node)
    ready = conditions["Ready"]
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "Unknown",
        "NodeStatusUnknown",
        "Kubelet stopped posting node status.",
    )
    assert ready["lastTransitionTime"] != ready["lastHeartbeatTime"]
    for ctype in ("MemoryPressure", "DiskPressure", "PIDPressure"):
        assert (conditions[ctype]["status"], conditions[ctype]["reason"]) == (
            "Unknown",
            "NodeStatusNeverUpdated",
        ), ctype
    no_execute = next(t for t in node["spec"]["taints"] if t["effect"] == "NoExecute")
    assert no_execute.get("timeAdded")
    assert managed_taints(node) == {(UNREACHABLE, "NoExecute"), (UNREACHABLE, "NoSchedule")}
    assert {"key": "steward.test/lifecycle", "effect": "NoSchedule"} in node["spec"]["taints"]

    await eventually(
        lambda: pod_ready(kube, pods_namespace, pod) == "False", "the pod not ready", WITHIN
    )
    await eventually(
        lambda: ("NodeNotReady", "Warning") in event_reasons(kube, pods_namespace, "Pod", pod),
        "the pod's NodeNotReady Event",
        WITHIN,
    )
    await eventually(
        lambda: (
            {("RegisteredNode", "Normal"), ("NodeNotReady", "Normal")}
            <= event_reasons(kube, "default", "Node", name)
        ),
        "the node's RegisteredNode and NodeNotReady Events",
        WITHIN,
    )

    # A pod bound to the node now is marked at once (not at a pass: its Ready condition
    # did not change).
    late = make_ready_pod(kube, pods_namespace, None)
    bind(kube, pods_namespace, late, name)
    await eventually(
        lambda: pod_ready(kube, pods_namespace, late) == "False",
        "the pod bound later not ready",
        WITHIN,
    )

    renew(kube, name)
    kubelet.alive.add(name)
    set_conditions(kube, name, [ready_condition()])
    await eventually(lambda: not managed_taints(node_of(kube, name)), "the taints removed", WITHIN)
    status = lifecycle.running[-1].controller.status()
    assert status.reconciles.get("error", 0) == 0, status


async def test_conditions_and_unschedulable_set_their_taints(
    nodes_kube: KubeClient,
    lifecycle: Starter,
    kubelet: FakeKubelet,
    test_nodes: list[tuple[KubeClient, str]],
) -> None:
    """Ready=False → not-ready NoSchedule and NoExecute; MemoryPressure → memory-pressure
    NoSchedule; spec.unschedulable → unschedulable NoSchedule; all healthy → none; the
    node deleted → a RemovingNode Event."""
    kube = nodes_kube
    memory = {
        "type": "MemoryPressure",
        "status": "True",
        "reason": "KubeletHasInsufficientMemory",
        "message": "test",
        "lastHeartbeatTime": ready_condition()["lastHeartbeatTime"],
        "lastTransitionTime": ready_condition()["lastTransitionTime"],
    }
    name = make_node(kube, test_nodes, "nl-cond", conditions=[ready_condition("False"), memory])
    kubelet.alive.add(name)
    lifecycle.start()
    want = {
        (NOT_READY, "NoSchedule"),
        (NOT_READY, "NoExecute"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    }
    await eventually(
        lambda: managed_taints(node_of(kube, name)) == want,
        "the not-ready and memory-pressure taints",
        WITHIN,
        failure=lambda _: f"taints: {managed_taints(node_of(kube, name))}",
    )
    update(
        kube,
        f"/api/v1/nodes/{name}",
        lambda n: n["spec"].__setitem__("unschedulable", True),
        "unschedulable not set",
    )
    await eventually(
        lambda: (
            ("node.kubernetes.io/unschedulable", "NoSchedule")
            in managed_taints(node_of(kube, name))
        ),
        "the unschedulable taint",
        WITHIN,
    )
    set_conditions(kube, name, [ready_condition(), {**memory, "status": "False"}])
    update(
        kube,
        f"/api/v1/nodes/{name}",
        lambda n: n["spec"].__setitem__("unschedulable", False),
        "unschedulable not cleared",
    )
    await eventually(
        lambda: not managed_taints(node_of(kube, name)),
        "every managed taint removed",
        WITHIN,
        failure=lambda _: f"taints: {managed_taints(node_of(kube, name))}",
    )
    kube.request("DELETE", f"/api/v1/nodes/{name}")
    await eventually(
        lambda: ("RemovingNode", "Normal") in event_reasons(kube, "default", "Node", name),
        "the node's RemovingNode Event",
        WITHIN,
    )


async def test_every_zone_down_taints_no_execute_nowhere(
    nodes_kube: KubeClient,
    lifecycle: Starter,
    test_nodes: list[tuple[KubeClient, str]],
) -> None:
    """With kwok's nodes out of the disruption checks (their exclusion label), the test's
    two nodes are every zone: once both are Unknown the controller is in full
    disruption and puts no NoExecute taint on either (the NoSchedule one it does)."""
    kube = nodes_kube
    kwok = [
        n["metadata"]["name"]
        for n in kube.request("GET", "/api/v1/nodes")["items"]
        if "steward.test/lifecycle" not in (n["metadata"].get("labels") or {})
    ]
    label = {"metadata": {"labels": {EXCLUDE: ""}}}
    for node in kwok:
        kube.request(
            "PATCH", f"/api/v1/nodes/{node}", label, content_type="application/merge-patch+json"
        )
    try:
        names = [
            make_node(kube, test_nodes, "nl-full", conditions=[ready_condition()], lease=False)
            for _ in range(2)
        ]
        lifecycle.start()

        def all_unknown() -> bool:
            nodes = [node_of(kube, n) for n in names]
            return all(
                conditions_of(n)["Ready"]["status"] == "Unknown"
                and (UNREACHABLE, "NoSchedule") in managed_taints(n)
                for n in nodes
            )

        await eventually(all_unknown, "both nodes Unknown", WITHIN)
        await stays(
            lambda: all(
                (UNREACHABLE, "NoExecute") not in managed_taints(node_of(kube, n)) for n in names
            ),
            "no NoExecute taint in full disruption",
            4.0,
        )
        # The zone's gauges (kwok's nodes excluded): two nodes, none healthy.
        zone = {"zone": ""}
        assert REGISTRY.get_sample_value("node_collector_zone_size", zone) == 2
        assert REGISTRY.get_sample_value("node_collector_unhealthy_nodes_in_zone", zone) == 2
        assert REGISTRY.get_sample_value("node_collector_zone_health", zone) == 0
    finally:
        unlabel = {"metadata": {"labels": {EXCLUDE: None}}}
        for node in kwok:
            kube.request(
                "PATCH",
                f"/api/v1/nodes/{node}",
                unlabel,
                content_type="application/merge-patch+json",
            )
