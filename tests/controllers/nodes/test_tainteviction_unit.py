"""The taint eviction controller's decisions, without a cluster: toleration matching
(upstream's ``ToleratesTaint`` and ``GetMatchingTolerations``), how long tolerations let a
pod stay, the schedule of evictions (``processPodOnNode``), the ``DisruptionTarget``
condition, and which changes queue what."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from steward.controllers.tainteviction.controller import CONTROLLER, TaintEviction, by_node
from steward.controllers.tainteviction.disruption import disruption_condition, status_patch
from steward.controllers.tainteviction.evictions import Evictions
from steward.controllers.tainteviction.tolerations import (
    matching_tolerations,
    min_toleration_seconds,
    no_execute_taints,
    tolerates,
)
from steward.runtime.meta import Meta
from steward.runtime.mirror import Change, ChangeKind, MirrorObject
from steward.runtime.reconcile import Request
from steward.runtime.resources import NODES, PODS

pytestmark = pytest.mark.unit

TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoExecute"}


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        ({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute"}, True),
        ({"key": "dedicated", "value": "gpu", "effect": "NoExecute"}, True),  # "" is Equal
        ({"key": "dedicated", "operator": "Equal", "value": "cpu", "effect": "NoExecute"}, False),
        ({"key": "dedicated", "operator": "Equal", "effect": "NoExecute"}, False),  # "" != gpu
        ({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, True),
        ({"key": "dedicated", "operator": "Exists"}, True),  # empty effect: every effect
        ({"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}, False),
        ({"key": "other", "operator": "Exists"}, False),
        ({"operator": "Exists"}, True),  # empty key with Exists: every taint
        ({"operator": "Exists", "effect": "NoSchedule"}, False),
        ({"key": "", "operator": "Equal", "value": "gpu"}, True),  # empty key matches any key
        ({"key": "dedicated", "operator": "Lt", "value": "9"}, False),  # the gate is off
        ({"key": "dedicated", "operator": "Gt", "value": "0"}, False),
        ({"key": "dedicated", "operator": "Bogus", "value": "gpu"}, False),
    ],
)
def test_toleration_matching(toleration: dict[str, Any], expected: bool) -> None:
    assert tolerates(toleration, TAINT) is expected


def test_equal_with_empty_values_matches_a_taint_without_value() -> None:
    assert tolerates({"key": "k", "operator": "Equal"}, {"key": "k", "effect": "NoExecute"})
    assert not tolerates({"key": "k", "value": "v"}, {"key": "k", "effect": "NoExecute"})


def test_the_first_toleration_of_each_taint_is_the_one_used() -> None:
    taints = [TAINT, {"key": "b", "effect": "NoExecute"}]
    first = {"operator": "Exists", "tolerationSeconds": 60}
    second = {"key": "dedicated", "operator": "Exists", "tolerationSeconds": 5}
    assert matching_tolerations(taints, [first, second]) == [first, first]
    assert matching_tolerations(taints, [second, first]) == [second, first]
    assert matching_tolerations(taints, [second]) is None  # "b" tolerated by none
    assert matching_tolerations(taints, None) is None
    assert matching_tolerations([], None) == []


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        ([None], None),
        ([None, None], None),
        ([30, None], 30.0),
        ([30, 5, 60], 5.0),
        ([30, 0], 0.0),
        ([30, -1], 0.0),
        ([], 0.0),
    ],
)
def test_min_toleration_seconds(seconds: list[int | None], expected: float | None) -> None:
    used = [
        {"operator": "Exists"} | ({} if s is None else {"tolerationSeconds": s}) for s in seconds
    ]
    assert min_toleration_seconds(used) == expected


def test_only_no_execute_taints_count() -> None:
    taints = [
        {"key": "a", "effect": "NoSchedule"},
        TAINT,
        {"key": "c", "effect": "PreferNoSchedule"},
    ]
    assert no_execute_taints(taints) == [TAINT]
    assert no_execute_taints(None) == []


# The schedule ------------------------------------------------------------------------------
KEY = ("ns", "pod")
FOR_A_WHILE = [{"key": "dedicated", "operator": "Exists", "tolerationSeconds": 5}]
FOREVER = [{"key": "dedicated", "operator": "Exists"}]


def test_an_untolerated_taint_makes_the_pod_due_at_once() -> None:
    evictions = Evictions()
    assert evictions.process(KEY, None, [TAINT], 100.0) is False
    due = evictions.get(KEY)
    assert due is not None and due.fire_at == 100.0 and not due.timed
    # Seen again later, the eviction due at once is kept (its Event is recorded once).
    due.marked = True
    assert evictions.process(KEY, None, [TAINT], 101.0) is False
    assert evictions.get(KEY) is due
    # Cancelled silently: nothing waited.
    assert evictions.process(KEY, None, [], 102.0) is False
    assert evictions.get(KEY) is None


def test_a_toleration_with_seconds_schedules_and_keeps_the_start() -> None:
    evictions = Evictions()
    evictions.process(KEY, FOR_A_WHILE, [TAINT], 100.0)
    scheduled = evictions.get(KEY)
    assert scheduled is not None and scheduled.fire_at == 105.0 and scheduled.timed
    assert scheduled.remaining(103.0) == 2.0 and scheduled.remaining(106.0) == 0.0
    # Seen again, even with a shorter toleration now: kept as scheduled (upstream's
    # processPodOnNode never moves a pending eviction).
    evictions.process(KEY, FOR_A_WHILE, [TAINT], 104.0)
    shorter = [{"key": "dedicated", "operator": "Exists", "tolerationSeconds": 1}]
    evictions.process(KEY, shorter, [TAINT], 104.0)
    assert evictions.get(KEY) is scheduled and scheduled.fire_at == 105.0


def test_an_untolerated_taint_replaces_a_timed_eviction_with_an_event() -> None:
    evictions = Evictions()
    evictions.process(KEY, FOR_A_WHILE, [TAINT], 100.0)
    other = {"key": "x", "effect": "NoExecute"}
    assert evictions.process(KEY, FOR_A_WHILE, [TAINT, other], 101.0) is True
    due = evictions.get(KEY)
    assert due is not None and due.fire_at == 101.0


@pytest.mark.parametrize(
    ("tolerations", "taints"),
    [(FOREVER, [TAINT]), (FOR_A_WHILE, [])],
    ids=["tolerated-forever", "taints-gone"],
)
def test_a_timed_eviction_is_cancelled_with_an_event(
    tolerations: list[dict[str, Any]], taints: list[dict[str, Any]]
) -> None:
    evictions = Evictions()
    evictions.process(KEY, FOR_A_WHILE, [TAINT], 100.0)
    assert evictions.process(KEY, tolerations, taints, 101.0) is True
    assert evictions.get(KEY) is None
    assert evictions.process(KEY, tolerations, taints, 102.0) is False  # nothing left


def test_tolerated_forever_schedules_nothing() -> None:
    evictions = Evictions()
    assert evictions.process(KEY, FOREVER, [TAINT], 100.0) is False
    assert evictions.get(KEY) is None and len(evictions) == 0


def test_zero_seconds_is_due_at_once_and_cancelled_silently() -> None:
    evictions = Evictions()
    evictions.process(KEY, [{"operator": "Exists", "tolerationSeconds": 0}], [TAINT], 100.0)
    due = evictions.get(KEY)
    assert due is not None and due.fire_at == 100.0 and not due.timed
    assert evictions.cancel(KEY) is False


def test_done_forgets_silently() -> None:
    evictions = Evictions()
    evictions.process(KEY, FOR_A_WHILE, [TAINT], 100.0)
    evictions.done(KEY)
    assert evictions.get(KEY) is None and evictions.cancel(KEY) is False


# The condition -----------------------------------------------------------------------------
def test_the_condition_is_added_with_now_and_the_generation() -> None:
    pod = {"metadata": {"uid": "u1", "generation": 3}, "status": {"conditions": []}}
    condition = disruption_condition(pod, "2026-01-01T00:00:00Z")
    assert condition == {
        "type": "DisruptionTarget",
        "status": "True",
        "observedGeneration": 3,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        "reason": "DeletionByTaintManager",
        "message": "Taint manager: deleting due to NoExecute taint",
    }
    assert status_patch(pod, condition) == {
        "metadata": {"uid": "u1"},
        "status": {"conditions": [condition]},
    }


def test_the_same_condition_is_not_written_again() -> None:
    same = {
        "type": "DisruptionTarget",
        "status": "True",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
        "reason": "DeletionByTaintManager",
        "message": "Taint manager: deleting due to NoExecute taint",
        "observedGeneration": 1,  # not compared, as upstream's
    }
    pod = {"metadata": {"generation": 2}, "status": {"conditions": [same]}}
    assert disruption_condition(pod, "2026-01-01T00:00:00Z") is None


def test_another_disruption_keeps_its_transition_time_when_true() -> None:
    other = {
        "type": "DisruptionTarget",
        "status": "True",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
        "reason": "PreemptionByScheduler",
    }
    pod = {"metadata": {}, "status": {"conditions": [other]}}
    condition = disruption_condition(pod, "2026-01-01T00:00:00Z")
    assert condition is not None
    assert condition["reason"] == "DeletionByTaintManager"
    assert condition["lastTransitionTime"] == "2025-01-01T00:00:00Z"
    assert "observedGeneration" not in condition
    was_false = {**other, "status": "False"}
    pod = {"metadata": {}, "status": {"conditions": [was_false]}}
    assert disruption_condition(pod, "2026-01-01T00:00:00Z")["lastTransitionTime"] == (  # type: ignore[index]
        "2026-01-01T00:00:00Z"
    )


# What queues what --------------------------------------------------------------------------
def _obj(rtype: Any, namespace: str, name: str, body: dict[str, Any]) -> MirrorObject:
    meta = Meta(namespace, name, "u", "1")
    return MirrorObject(rtype, meta, orjson.dumps({"metadata": {}, **body}))


def _node(taints: list[dict[str, Any]]) -> MirrorObject:
    return _obj(NODES, "", "n1", {"spec": {"taints": taints}})


def _pod(spec: dict[str, Any]) -> MirrorObject:
    return _obj(PODS, "ns", "p1", {"spec": spec})


def _modified(old: MirrorObject, new: MirrorObject) -> Change:
    return Change(ChangeKind.MODIFIED, new, old, None)


def test_a_node_is_queued_when_its_no_execute_taints_change() -> None:
    (node_source,) = [s for s in CONTROLLER.sources if s.kind == "object"]
    (changed,) = node_source.predicates
    no_schedule = {"key": "a", "effect": "NoSchedule"}
    assert changed(_modified(_node([]), _node([TAINT])))
    assert changed(_modified(_node([TAINT]), _node([])))
    assert not changed(_modified(_node([no_schedule]), _node([])))
    assert not changed(_modified(_node([TAINT]), _node([TAINT, no_schedule])))
    assert changed(Change(ChangeKind.ADDED, _node([]), None, None))
    assert changed(Change(ChangeKind.DELETED, _node([]), None, None))


def test_a_pod_is_queued_when_its_tolerations_or_node_change() -> None:
    mapper = TaintEviction.pod_changed
    this = [Request("ns", "p1")]
    bound = {"nodeName": "n1", "tolerations": FOREVER}
    assert mapper(None, _modified(_pod(bound), _pod(bound))) == []  # type: ignore[arg-type]
    assert mapper(None, _modified(_pod({}), _pod(bound))) == this  # type: ignore[arg-type]
    more = {**bound, "tolerations": [*FOREVER, *FOR_A_WHILE]}
    assert mapper(None, _modified(_pod(bound), _pod(more))) == this  # type: ignore[arg-type]
    assert mapper(None, Change(ChangeKind.DELETED, _pod(bound), None, None)) == this  # type: ignore[arg-type]
    assert mapper(None, Change(ChangeKind.ADDED, _pod({}), None, None)) == this  # type: ignore[arg-type]


def test_pods_are_indexed_by_their_node() -> None:
    assert list(by_node(_pod({"nodeName": "n1"}))) == ["n1"]
    assert list(by_node(_pod({}))) == []


def test_the_declaration() -> None:
    assert CONTROLLER.name == "taint-eviction-controller"
    assert CONTROLLER.primary == NODES
    assert CONTROLLER.options.queue_name == "noexec_taint_pod"
    assert CONTROLLER.options.max_concurrent_reconciles == 8
    assert CONTROLLER.beside_upstream is None
