"""Steward's taint eviction controller against upstream's, one scenario on both sides at
once: on the session's ``cluster`` (kube-controller-manager's taint-eviction-controller)
and on ``nodes_cluster`` (Steward's), the same pods on a node of the test's own, the same
NoExecute taint added and later removed, and one pod deleted by the test meanwhile.
Compared: which pods were deleted, the ``DisruptionTarget`` condition each had when it was
marked for deletion (its time left out), and the ``TaintManagerEviction`` Events (type,
the pod, message, source, count; the namespace masked)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from steward.kube import KubeClient
from tests.controllers.harness import Running, eventually, upstream_kube, upstream_namespace
from tests.controllers.nodes.eviction import (
    WITHIN,
    cancelling,
    disruption,
    eviction_events,
    evictor,
    make_pods,
    marking,
    messages,
    no_execute,
    own_node,
    pod_watch,
    present,
    set_taints,
    tolerate,
)

__all__ = ["evictor", "upstream_kube", "upstream_namespace"]

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

PODS: dict[str, list[dict[str, Any]]] = {
    "untolerated": [],
    "other-value": [tolerate("no")],
    "for-a-while": [tolerate(seconds=3)],
    "forever": [tolerate("yes")],
    "long": [tolerate(seconds=60)],
    "removed": [tolerate(seconds=60)],
}
DELETED = ("untolerated", "other-value", "for-a-while")


@dataclass
class Outcome:
    """What one side's controller did."""

    deleted: list[str]
    conditions: dict[str, dict[str, Any] | None]
    events: list[tuple[str, ...]]
    kept: list[str]


async def scenario(kube: KubeClient, ns: str) -> Outcome:
    """The pods of :data:`PODS` on a node of their own; a NoExecute taint added until the
    pods to be deleted are gone; then ``removed`` deleted by the test and the taint
    removed (the evictions of ``removed`` and ``long`` are cancelled)."""
    with own_node(kube) as node, pod_watch(kube, ns) as watch:
        await asyncio.to_thread(make_pods, kube, ns, node, PODS)
        await asyncio.to_thread(set_taints, kube, node, no_execute("yes"))
        await eventually(lambda: all(watch.gone(n) for n in DELETED), "pods deleted", WITHIN)
        await asyncio.to_thread(kube.request, "DELETE", f"/api/v1/namespaces/{ns}/pods/removed")
        await eventually(lambda: watch.gone("removed"), "pod removed", WITHIN)
        await asyncio.to_thread(set_taints, kube, node)
        cancelled = [cancelling("long"), cancelling("removed")]
        await eventually(
            lambda: messages(kube, ns) == sorted([*map(marking, DELETED), *cancelled]),
            "the Events",
            WITHIN,
        )
        pods = await asyncio.to_thread(lambda: [name for name in PODS if present(kube, ns, name)])
        return Outcome(
            deleted=sorted(name for name in PODS if watch.gone(name)),
            conditions={name: disruption(watch.marked(name)) for name in DELETED},
            events=await asyncio.to_thread(eviction_events, kube, ns),
            kept=pods,
        )


async def test_the_same_pods_go_with_the_same_condition_and_events(
    evictor: Running,
    nodes_kube: KubeClient,
    nodes_namespace: str,
    upstream_kube: KubeClient,
    upstream_namespace: str,
) -> None:
    ours, theirs = await asyncio.gather(
        scenario(nodes_kube, nodes_namespace), scenario(upstream_kube, upstream_namespace)
    )
    assert theirs.deleted == sorted([*DELETED, "removed"])
    assert theirs.kept == ["forever", "long"]
    assert ours == theirs
