"""The pod garbage collector's decisions (no cluster): which pods each pass takes and in
which order, the quarantine of missing nodes, the status patch before a delete, the flags
and the declaration."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from steward.controllers.podgc.collection import (
    Quarantine,
    failed_status_patch,
    is_terminated,
    missing_nodes,
    orphaned_condition,
    out_of_service,
    terminated_over_threshold,
    terminating_out_of_service,
    unscheduled_terminating,
)
from steward.controllers.podgc.controller import CONTROLLER, SWEEP

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 7, 4, 0, 0, tzinfo=UTC)


def pod(
    name: str,
    phase: str = "Running",
    *,
    node: str = "",
    created: int = 0,
    ns: str = "ns",
    deleting: bool = False,
    reason: str = "",
    generation: int = 1,
    observed: int | None = None,
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": ns,
        "uid": f"uid-{name}",
        "generation": generation,
        "creationTimestamp": (NOW + timedelta(seconds=created)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-12-07T05:00:00Z"
    status: dict[str, Any] = {"phase": phase} if phase else {}
    if reason:
        status["reason"] = reason
    if observed is not None:
        status["observedGeneration"] = observed
    if conditions is not None:
        status["conditions"] = conditions
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}, "status": status}


def node(ready: str | None = "True", taints: tuple[str, ...] = ()) -> dict[str, Any]:
    conditions = [{"type": "MemoryPressure", "status": "False"}]
    if ready is not None:
        conditions.append({"type": "Ready", "status": ready})
    return {
        "metadata": {"name": "n"},
        "spec": {"taints": [{"key": k, "effect": "NoExecute"} for k in taints]},
        "status": {"conditions": conditions},
    }


def names(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


# Pass 1 ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("phase", "terminated"),
    [("Pending", False), ("Running", False), ("Unknown", False), ("Succeeded", True),
     ("Failed", True), ("", True)],
)  # fmt: skip
def test_terminated_is_any_phase_but_pending_running_unknown(phase: str, terminated: bool) -> None:
    assert is_terminated(pod("p", phase)) is terminated


def test_terminated_beyond_the_threshold_oldest_first_evicted_before_all() -> None:
    pods = [
        pod("young", "Succeeded", created=30),
        pod("running", "Running", created=-100),
        pod("old", "Failed", created=10),
        pod("b-tie", "Succeeded", created=20, ns="a"),
        pod("a-tie", "Succeeded", created=20, ns="z"),
        pod("evicted", "Failed", created=40, reason="Evicted"),
    ]
    # Five terminated, threshold 2: three go, the evicted one first, then by creation,
    # then by name (not namespace).
    assert names(terminated_over_threshold(pods, 2)) == ["evicted", "old", "a-tie"]
    assert names(terminated_over_threshold(pods, 4)) == ["evicted"]
    assert terminated_over_threshold(pods, 5) == []
    assert terminated_over_threshold(pods, 0) == []
    assert terminated_over_threshold(pods, -1) == []


# Pass 2 ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ready", "taints", "oos"),
    [("False", ("node.kubernetes.io/out-of-service",), True),
     ("Unknown", ("node.kubernetes.io/out-of-service",), True),
     (None, ("node.kubernetes.io/out-of-service",), True),
     ("True", ("node.kubernetes.io/out-of-service",), False),
     ("False", ("node.kubernetes.io/unreachable",), False),
     ("False", (), False)],
)  # fmt: skip
def test_out_of_service_is_not_ready_and_tainted(
    ready: str | None, taints: tuple[str, ...], oos: bool
) -> None:
    assert out_of_service(node(ready, taints)) is oos


def test_terminating_pods_on_out_of_service_nodes() -> None:
    nodes = {
        "oos": node("False", ("node.kubernetes.io/out-of-service",)),
        "ready": node("True", ("node.kubernetes.io/out-of-service",)),
    }
    pods = [
        pod("t-oos-late", node="oos", deleting=True, created=5),
        pod("t-oos", node="oos", deleting=True),
        pod("live-oos", node="oos"),
        pod("t-ready", node="ready", deleting=True),
        pod("t-gone", node="gone", deleting=True),
        pod("t-unscheduled", deleting=True),
    ]
    assert names(terminating_out_of_service(pods, nodes.get)) == ["t-oos", "t-oos-late"]


# Pass 3 ----------------------------------------------------------------------------------
def test_missing_nodes_are_those_pods_name_that_do_not_exist() -> None:
    pods = [pod("a", node="n1"), pod("b", node="gone"), pod("c"), pod("d", node="gone2")]
    assert missing_nodes(pods, {"n1"}) == {"gone", "gone2"}


def test_quarantine_waits_its_period_and_keeps_the_earlier_time() -> None:
    now = [100.0]
    q = Quarantine(40.0, lambda: now[0])
    q.add(["a"])
    now[0] = 130.0
    q.add(["a", "b"])  # a keeps 140, b gets 170
    assert q.due() == []
    now[0] = 140.0
    assert q.due() == ["a"]
    assert q.due() == []  # taken out
    assert len(q) == 1
    now[0] = 170.0
    q.add(["a"])  # back in, for a full period
    assert q.due() == ["b"]
    now[0] = 210.0
    assert q.due() == ["a"]


# Pass 4 ----------------------------------------------------------------------------------
def test_unscheduled_terminating() -> None:
    pods = [pod("a", deleting=True), pod("b"), pod("c", node="n", deleting=True)]
    assert names(unscheduled_terminating(pods)) == ["a"]


# Marking Failed --------------------------------------------------------------------------
def test_a_finished_pod_is_not_patched() -> None:
    assert failed_status_patch(pod("p", "Succeeded"), NOW) is None
    assert failed_status_patch(pod("p", "Failed"), NOW, orphaned_condition()) is None


def test_a_running_pod_is_marked_failed_with_its_uid_as_precondition() -> None:
    assert failed_status_patch(pod("p", generation=3, observed=3), NOW) == {
        "metadata": {"uid": "uid-p"},
        "status": {"phase": "Failed"},
    }
    # observedGeneration follows the pod's generation when it differs.
    assert failed_status_patch(pod("p", "Pending", generation=2), NOW) == {
        "metadata": {"uid": "uid-p"},
        "status": {"phase": "Failed", "observedGeneration": 2},
    }


def test_an_orphan_gets_the_disruption_target_condition() -> None:
    patch = failed_status_patch(pod("p", generation=2, observed=2), NOW, orphaned_condition())
    assert patch == {
        "metadata": {"uid": "uid-p"},
        "status": {
            "phase": "Failed",
            "conditions": [
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "DeletionByPodGC",
                    "message": "PodGC: node no longer exists",
                    "observedGeneration": 2,
                    "lastTransitionTime": "2026-12-07T04:00:00Z",
                }
            ],
        },
    }


def test_the_transition_time_is_kept_when_the_status_is_the_same() -> None:
    earlier = "2026-12-01T00:00:00Z"
    same = pod(
        "p",
        observed=1,
        conditions=[{"type": "DisruptionTarget", "status": "True", "lastTransitionTime": earlier}],
    )
    other = pod(
        "p",
        observed=1,
        conditions=[{"type": "DisruptionTarget", "status": "False", "lastTransitionTime": earlier}],
    )
    kept = failed_status_patch(same, NOW, orphaned_condition())
    moved = failed_status_patch(other, NOW, orphaned_condition())
    assert kept is not None and moved is not None
    assert kept["status"]["conditions"][0]["lastTransitionTime"] == earlier
    assert moved["status"]["conditions"][0]["lastTransitionTime"] == "2026-12-07T04:00:00Z"


# Flags and declaration -------------------------------------------------------------------
def parse(*args: str) -> argparse.Namespace:
    parser = CONTROLLER.flag_parser(argparse.ArgumentParser(exit_on_error=False))
    parsed: argparse.Namespace = parser.parse_args(list(args))
    return parsed


def test_flags_default_to_upstreams_values() -> None:
    flags = parse()
    assert flags.terminated_pod_gc_threshold == 12500
    assert flags.pod_gc_check_period == timedelta(seconds=20)
    assert flags.pod_gc_quarantine_time == timedelta(seconds=40)
    flags = parse(
        "--terminated-pod-gc-threshold=0",
        "--pod-gc-check-period=500ms",
        "--pod-gc-quarantine-time=1m",
    )
    assert flags.terminated_pod_gc_threshold == 0
    assert flags.pod_gc_check_period == timedelta(milliseconds=500)
    assert flags.pod_gc_quarantine_time == timedelta(minutes=1)


@pytest.mark.parametrize("bad", ["0", "-1s", "soon"])
def test_periods_must_be_positive_durations(bad: str) -> None:
    with pytest.raises(argparse.ArgumentError):
        parse(f"--pod-gc-check-period={bad}")


def test_the_declaration() -> None:
    # KCM's alias, one worker, never beside upstream's; nodes (primary, whose changes
    # queue nothing) and pods projected to what the passes read.
    assert CONTROLLER.name == "podgc"
    assert CONTROLLER.options.max_concurrent_reconciles == 1
    assert CONTROLLER.beside_upstream is None
    subs = {r.plural: s for r, s in CONTROLLER.subscriptions().items()}
    assert subs["nodes"].metadata_only
    assert set(subs["nodes"].fields) == {
        "spec.taints.key",
        "status.conditions.type",
        "status.conditions.status",
    }
    assert subs["pods"].metadata_only
    assert set(subs["pods"].fields) == {
        "spec.nodeName",
        "status.phase",
        "status.reason",
        "status.conditions",
        "status.observedGeneration",
    }
    assert SWEEP.namespace == "*"
