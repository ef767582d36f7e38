"""Differential scenario of the node lifecycle controller: a node that never posts a
status nor a Lease, made at once under upstream's controller (the session's
``cluster``) and under Steward's (``nodes_cluster``), compared once each side has
declared it dead: its conditions (type, status, reason, message), its taints (key,
effect, whether stamped), its labels and the reasons of its Events. Only names and
times are masked; upstream's startup grace period is its default (60 s), Steward's the
tests' short one."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from steward.cluster import LocalCluster
from steward.kube import KubeClient
from tests.controllers.harness import Starter, eventually, upstream_kube
from tests.controllers.nodes.lifecycle import (
    conditions_of,
    event_reasons,
    lifecycle,
    make_node,
    node_of,
    test_nodes,
)

__all__ = ["lifecycle", "test_nodes", "upstream_kube"]

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.asyncio]
"""Slow: upstream's side waits out its default 60 s startup grace period (the session's
kube-controller-manager keeps it)."""

UPSTREAM_WITHIN = 120.0
"""Seconds upstream may take: its 60 s startup grace, a 5 s pass and the taint queue."""
LABELS = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}


def snapshot(kube: KubeClient, name: str) -> dict[str, Any] | None:
    """What the controller made of the node, once it settled on its verdict: both
    unreachable taints there and the admission's not-ready one gone (None before; the
    two taints come from two passes, on either side, in either order)."""
    node = node_of(kube, name)
    taints = (node.get("spec") or {}).get("taints") or []
    keys = {(t["key"], t["effect"]) for t in taints}
    settled = {
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoSchedule"),
    } <= keys and ("node.kubernetes.io/not-ready", "NoSchedule") not in keys
    if not settled:
        return None
    return {
        "conditions": sorted(
            (c["type"], c["status"], c.get("reason"), c.get("message"))
            for c in conditions_of(node).values()
        ),
        "taints": sorted((t["key"], t["effect"], bool(t.get("timeAdded"))) for t in taints),
        "labels": {
            k: v for k, v in node["metadata"]["labels"].items() if k != "steward.test/lifecycle"
        },
        "events": sorted(event_reasons(kube, "default", "Node", name)),
    }


async def test_never_ready_node_as_upstream(
    cluster: LocalCluster,
    upstream_kube: KubeClient,
    nodes_kube: KubeClient,
    lifecycle: Starter,
    test_nodes: list[tuple[KubeClient, str]],
) -> None:
    up = make_node(upstream_kube, test_nodes, "nl-diff", labels=LABELS, lease=False)
    mine = make_node(nodes_kube, test_nodes, "nl-diff", labels=LABELS, lease=False)
    lifecycle.start()
    shots = await asyncio.gather(
        eventually(lambda: snapshot(upstream_kube, up), "upstream's verdict", UPSTREAM_WITHIN),
        eventually(lambda: snapshot(nodes_kube, mine), "Steward's verdict", UPSTREAM_WITHIN),
    )
    # Events are posted in the background: wait for each side's to settle as the other's.
    upstream_shot, steward_shot = shots

    def steward_events() -> list[tuple[str, str]]:
        return sorted(event_reasons(nodes_kube, "default", "Node", mine))

    await eventually(
        lambda: steward_events() == upstream_shot["events"],
        "Steward's Events as upstream's",
        10.0,
        failure=lambda _: f"{steward_events()} against upstream's {upstream_shot['events']}",
    )
    steward_shot["events"] = steward_events()
    assert steward_shot == upstream_shot
    # Spelled out, so that both sides cannot agree on something else.
    never = ("Unknown", "NodeStatusNeverUpdated", "Kubelet never posted node status.")
    assert steward_shot["conditions"] == [
        (ctype, *never) for ctype in ("DiskPressure", "MemoryPressure", "PIDPressure", "Ready")
    ]
    assert {(k, e) for k, e, _ in steward_shot["taints"]} >= {
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoSchedule"),
    }
    assert steward_shot["labels"]["beta.kubernetes.io/os"] == "linux"
    assert ("RegisteredNode", "Normal") in steward_shot["events"]
