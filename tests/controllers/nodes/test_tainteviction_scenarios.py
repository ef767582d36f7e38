"""Steward's taint eviction controller on ``nodes_cluster`` (no upstream taint eviction
there): pods on a node of the test's own, run by kwok, and the node's taints changed by
the test; what was deleted is read from a watch of the namespace's pods (see
:mod:`tests.controllers.nodes.eviction`)."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from steward.kube import KubeClient
from tests.controllers.harness import Running, eventually, stays
from tests.controllers.nodes.eviction import (
    EVICT,
    WITHIN,
    cancelling,
    disruption,
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

__all__ = ["evictor"]

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

CONDITION = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "DeletionByTaintManager",
    "message": "Taint manager: deleting due to NoExecute taint",
    "observedGeneration": 1,
}


def deleted_count() -> float:
    """``taint_eviction_controller_pod_deletions_total`` of this process, and as many
    observations of the deletion latency (they must agree)."""
    total = REGISTRY.get_sample_value("taint_eviction_controller_pod_deletions_total") or 0.0
    observed = REGISTRY.get_sample_value(
        "taint_eviction_controller_pod_deletion_duration_seconds_count"
    )
    assert (observed or 0.0) == total
    return total


def condition_of(condition: dict[str, object] | None) -> dict[str, object] | None:
    return None if condition is None else {k: condition.get(k) for k in CONDITION}


async def test_untolerating_pods_go_at_once_and_tolerating_ones_after_their_seconds(
    evictor: Running, nodes_kube: KubeClient, nodes_namespace: str
) -> None:
    kube, ns = nodes_kube, nodes_namespace
    at_once = ("untolerated", "other-value", "no-schedule-only")
    with own_node(kube) as node, pod_watch(kube, ns) as watch:
        make_pods(
            kube,
            ns,
            node,
            {
                "untolerated": [],
                "other-value": [tolerate("no")],
                "no-schedule-only": [tolerate(effect="NoSchedule")],
                "for-a-while": [tolerate(seconds=6)],
                "forever": [tolerate("yes")],
            },
        )
        set_taints(kube, node, no_execute("yes"))
        await eventually(
            lambda: all(watch.gone(name) for name in at_once), "untolerating pods deleted", WITHIN
        )
        for name in at_once:
            assert condition_of(disruption(watch.marked(name))) == CONDITION, name
        # Counted from when the controller saw the taint, less than a second ago as a rule:
        # the margin is for a loaded machine.
        await stays(lambda: present(kube, ns, "for-a-while"), "pod tolerating 6 s kept", 2.5)
        await eventually(lambda: watch.gone("for-a-while"), "pod tolerating 6 s deleted", WITHIN)
        assert condition_of(disruption(watch.marked("for-a-while"))) == CONDITION
        assert present(kube, ns, "forever")
        assert not watch.gone("forever")
        expected = sorted(marking(name) for name in (*at_once, "for-a-while"))
        await eventually(lambda: messages(kube, ns) == expected, "Marking Events", WITHIN)


async def test_an_eviction_is_cancelled_when_the_taint_or_the_pod_goes_first(
    evictor: Running, nodes_kube: KubeClient, nodes_namespace: str
) -> None:
    kube, ns = nodes_kube, nodes_namespace
    with own_node(kube) as node, pod_watch(kube, ns) as watch:
        make_pods(
            kube,
            ns,
            node,
            {"signal": [], "for-a-while": [tolerate(seconds=6)], "removed": [tolerate(seconds=60)]},
        )
        set_taints(kube, node, no_execute())
        # "signal" tolerates nothing: once it is gone, the controller has seen the taint.
        await eventually(lambda: watch.gone("signal"), "untolerating pod deleted", WITHIN)
        kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods/removed")
        await eventually(
            lambda: cancelling("removed") in messages(kube, ns), "Cancelling Event", WITHIN
        )
        set_taints(kube, node)
        await eventually(
            lambda: cancelling("for-a-while") in messages(kube, ns), "Cancelling Event", WITHIN
        )
        await stays(lambda: present(kube, ns, "for-a-while"), "pod kept past its 6 s", 6.5)
        assert messages(kube, ns) == sorted(
            [marking("signal"), cancelling("removed"), cancelling("for-a-while")]
        )


async def test_a_no_schedule_taint_evicts_nothing(
    evictor: Running, nodes_kube: KubeClient, nodes_namespace: str
) -> None:
    kube, ns = nodes_kube, nodes_namespace
    with own_node(kube) as node, pod_watch(kube, ns) as watch:
        make_pods(kube, ns, node, {"untolerated": []})
        set_taints(kube, node, {"key": EVICT, "value": "yes", "effect": "NoSchedule"})
        await stays(lambda: present(kube, ns, "untolerated"), "pod kept", 2.0)
        assert messages(kube, ns) == []
        # The same taint as NoExecute: the pod goes (the controller was there all along).
        set_taints(kube, node, no_execute())
        await eventually(lambda: watch.gone("untolerated"), "pod deleted", WITHIN)


async def test_a_pod_bound_to_a_tainted_node_goes(
    evictor: Running, nodes_kube: KubeClient, nodes_namespace: str
) -> None:
    kube, ns = nodes_kube, nodes_namespace
    deletions = deleted_count()
    with own_node(kube) as node, pod_watch(kube, ns) as watch:
        set_taints(kube, node, no_execute())
        make_pods(kube, ns, node, {"tolerating": [tolerate()], "late": []})
        await eventually(lambda: watch.gone("late"), "pod deleted", WITHIN)
        # Counted in upstream's metrics (the controller runs in this process).
        await eventually(lambda: deleted_count() == deletions + 1, "the deletion counted", WITHIN)
        assert condition_of(disruption(watch.marked("late"))) == CONDITION
        assert present(kube, ns, "tolerating")
        await eventually(lambda: messages(kube, ns) == [marking("late")], "Marking Event", WITHIN)
