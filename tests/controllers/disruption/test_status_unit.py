"""A PodDisruptionBudget's status, rule by rule as upstream's ``countHealthyPods``,
``buildDisruptedPodMap``, ``updatePdbStatus`` and ``failSafe`` decide it (disruption.go; the
cases of disruption_test.go's TestUpdateDisruptedPods, TestTwoControllers,
TestKeepExistingPDBConditionDuringSync, TestNakedPod)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from steward import format_time
from steward.controllers.disruption.expected import (
    NOT_FOUND,
    ExpectedCount,
    ExpectedCountError,
    OwnerRef,
    Workloads,
    expected_count,
)
from steward.controllers.disruption.status import (
    DELETION_TIMEOUT,
    count_healthy,
    disrupted_pods,
    disruptions_allowed,
    fail_safe,
    new_status,
    sync,
)
from tests.controllers.disruption.builders import NOW, budget, pod, ref

pytestmark = pytest.mark.unit

EARLIER = NOW - timedelta(minutes=5)


def at(delta: timedelta) -> str:
    return format_time(NOW + delta)


def condition(status: dict[str, Any]) -> dict[str, Any]:
    found: list[dict[str, Any]] = [
        c for c in status["conditions"] if c["type"] == "DisruptionAllowed"
    ]
    assert len(found) == 1
    return found[0]


# --- healthy pods -----------------------------------------------------------------------------


def test_healthy_is_ready_and_not_deleting() -> None:
    pods = [pod("a"), pod("b", ready=False), pod("c", deleting=True), pod("d")]
    pods.append({"metadata": {"name": "e"}, "status": {}})  # no Ready condition yet
    assert count_healthy(pods, {}, NOW) == 2


def test_recently_disrupted_pods_are_not_healthy_until_the_timeout() -> None:
    pods = [pod("a"), pod("b"), pod("c")]
    disrupted = {
        "a": at(-timedelta(minutes=1)),  # still expected to go
        "b": at(-DELETION_TIMEOUT),  # expires exactly now: healthy again (After, strictly)
        "c": at(-timedelta(minutes=3)),  # long expired
    }
    assert count_healthy(pods, disrupted, NOW) == 2


# --- the disrupted-pods map -------------------------------------------------------------------


def test_disrupted_pods_pruned_as_upstream() -> None:
    # TestUpdateDisruptedPods, plus the recheck time and the NotDeleted pods.
    status = {
        "disruptedPods": {
            "p1": at(timedelta(0)),  # the pod is being deleted: dropped
            "p2": at(-timedelta(minutes=3)),  # expired, pod still there: dropped, NotDeleted
            "p3": at(-timedelta(minutes=1)),  # kept, expires in 1 min
            "p4": at(-timedelta(seconds=90)),  # kept, expires in 30 s: the recheck
            "gone": at(timedelta(0)),  # no such pod: dropped
        }
    }
    pods = [pod("p1", deleting=True), pod("p2"), pod("p3"), pod("p4"), pod("p5")]
    got = disrupted_pods(budget(min_available=1, status=status), pods, NOW)
    assert dict(got.kept) == {"p3": at(-timedelta(minutes=1)), "p4": at(-timedelta(seconds=90))}
    assert got.recheck_at == NOW + timedelta(seconds=30)
    assert got.not_deleted == ("p2",)


def test_disrupted_entry_expiring_now_is_kept_and_rechecked_now() -> None:
    status = {"disruptedPods": {"p": at(-DELETION_TIMEOUT)}}
    got = disrupted_pods(budget(min_available=1, status=status), [pod("p")], NOW)
    assert dict(got.kept) == {"p": at(-DELETION_TIMEOUT)}
    assert got.recheck_at == NOW


def test_unparsable_disruption_time_counts_as_expired() -> None:
    status = {"disruptedPods": {"p": "yesterday"}}
    got = disrupted_pods(budget(min_available=1, status=status), [pod("p")], NOW)
    assert (dict(got.kept), got.recheck_at, got.not_deleted) == ({}, None, ("p",))


def test_no_disrupted_pods_no_recheck() -> None:
    got = disrupted_pods(budget(min_available=1), [pod("p")], NOW)
    assert (dict(got.kept), got.recheck_at, got.not_deleted) == ({}, None, ())


# --- disruptions allowed ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("healthy", "desired", "expected", "allowed"),
    [(5, 3, 5, 2), (3, 3, 5, 0), (2, 3, 5, 0), (4, 0, 0, 0), (4, 2, -1, 0), (1, 0, 1, 1)],
)
def test_disruptions_allowed(healthy: int, desired: int, expected: int, allowed: int) -> None:
    # A budget expecting nothing allows nothing, whatever is healthy (TestNakedPod).
    assert disruptions_allowed(healthy, desired, expected) == allowed


# --- the status -------------------------------------------------------------------------------


def test_new_status_fields_and_sufficient_condition() -> None:
    got = new_status(budget(min_available=2, generation=4), 3, 2, 3, {}, NOW)
    assert got is not None
    assert {k: v for k, v in got.items() if k != "conditions"} == {
        "observedGeneration": 4,
        "disruptionsAllowed": 1,
        "currentHealthy": 3,
        "desiredHealthy": 2,
        "expectedPods": 3,
    }
    assert got["conditions"] == [
        {
            "type": "DisruptionAllowed",
            "status": "True",
            "reason": "SufficientPods",
            "message": "",
            "observedGeneration": 4,
            "lastTransitionTime": format_time(NOW),
        }
    ]


def test_new_status_insufficient_condition_and_disrupted_pods() -> None:
    disrupted = {"p": at(-timedelta(seconds=10))}
    got = new_status(budget(min_available=2), 2, 2, 3, disrupted, NOW)
    assert got is not None
    assert got["disruptionsAllowed"] == 0
    assert got["disruptedPods"] == disrupted
    assert {k: condition(got)[k] for k in ("status", "reason")} == {
        "status": "False",
        "reason": "InsufficientPods",
    }


def up_to_date(**overrides: Any) -> dict[str, Any]:
    status: dict[str, Any] = {
        "observedGeneration": 2,
        "disruptionsAllowed": 1,
        "currentHealthy": 3,
        "desiredHealthy": 2,
        "expectedPods": 3,
        "conditions": [
            {
                "type": "DisruptionAllowed",
                "status": "True",
                "reason": "SufficientPods",
                "message": "",
                "observedGeneration": 2,
                "lastTransitionTime": format_time(EARLIER),
            }
        ],
    }
    status.update(overrides)
    return status


def test_up_to_date_status_is_not_written() -> None:
    assert (
        new_status(budget(min_available=2, generation=2, status=up_to_date()), 3, 2, 3, {}, NOW)
        is None
    )


@pytest.mark.parametrize(
    "stale",
    [
        {"currentHealthy": 4},
        {"desiredHealthy": 1},
        {"expectedPods": 4},
        {"disruptionsAllowed": 2},
        {"observedGeneration": 1},
        {"disruptedPods": {"p": format_time(EARLIER)}},
        {"conditions": []},
        {
            "conditions": [
                {
                    "type": "DisruptionAllowed",
                    "status": "False",
                    "reason": "SyncFailed",
                    "message": "x",
                }
            ]
        },
        {"conditions": [{"type": "DisruptionAllowed", "status": "True", "reason": "Other"}]},
    ],
)
def test_any_stale_field_rewrites_the_status(stale: dict[str, Any]) -> None:
    got = new_status(
        budget(min_available=2, generation=2, status=up_to_date(**stale)), 3, 2, 3, {}, NOW
    )
    assert got is not None
    assert (got["currentHealthy"], got["disruptionsAllowed"], got["observedGeneration"]) == (
        3,
        1,
        2,
    )
    assert "disruptedPods" not in got
    assert {k: condition(got)[k] for k in ("status", "reason", "message")} == {
        "status": "True",
        "reason": "SufficientPods",
        "message": "",
    }


def test_condition_transition_time_moves_only_on_a_status_flip() -> None:
    # Same status (True), other reason/generation: the transition time stays.
    status = up_to_date(observedGeneration=1)
    got = new_status(budget(min_available=2, generation=2, status=status), 3, 2, 3, {}, NOW)
    assert got is not None
    assert condition(got)["lastTransitionTime"] == format_time(EARLIER)
    assert condition(got)["observedGeneration"] == 2
    # True -> False: it moves to now.
    got = new_status(budget(min_available=3, generation=2, status=up_to_date()), 3, 3, 3, {}, NOW)
    assert got is not None
    assert (condition(got)["status"], condition(got)["lastTransitionTime"]) == (
        "False",
        format_time(NOW),
    )


def test_other_conditions_are_kept() -> None:
    # TestKeepExistingPDBConditionDuringSync.
    other = {
        "type": "Other",
        "status": "True",
        "reason": "R",
        "message": "m",
        "lastTransitionTime": format_time(EARLIER),
    }
    got = new_status(
        budget(min_available=1, status=up_to_date(conditions=[other])), 3, 1, 3, {}, NOW
    )
    assert got is not None
    assert got["conditions"][0] == other
    assert [c["type"] for c in got["conditions"]] == ["Other", "DisruptionAllowed"]


@pytest.mark.parametrize("policy", [None, "IfHealthyBudget", "AlwaysAllow"])
def test_unhealthy_pod_eviction_policy_does_not_change_the_status(policy: str | None) -> None:
    pods = [pod("a"), pod("b"), pod("c", ready=False)]
    got = sync(budget(min_available=1, policy=policy), pods, ExpectedCount(3, 1), NOW)
    assert got.status is not None
    assert (got.status["currentHealthy"], got.status["disruptionsAllowed"]) == (2, 1)


# --- the fail-safe ----------------------------------------------------------------------------


def test_fail_safe_zeroes_disruptions_and_keeps_the_rest() -> None:
    status = up_to_date(observedGeneration=1, disruptedPods={"p": format_time(EARLIER)})
    got = fail_safe(
        budget(min_available=2, generation=2, status=status),
        'found no controllers for pod "x"',
        NOW,
    )
    assert got["disruptionsAllowed"] == 0
    # everything else as it was, observedGeneration included (the condition takes it too)
    assert {k: v for k, v in got.items() if k not in ("disruptionsAllowed", "conditions")} == {
        k: v for k, v in status.items() if k not in ("disruptionsAllowed", "conditions")
    }
    assert condition(got) == {
        "type": "DisruptionAllowed",
        "status": "False",
        "reason": "SyncFailed",
        "message": 'found no controllers for pod "x"',
        "observedGeneration": 1,
        "lastTransitionTime": format_time(NOW),
    }


def test_a_pod_without_its_controller_fails_safe() -> None:
    # TestUnsupportedControllerPod end to end: a budget that allowed a disruption, then a pod
    # whose controller exists nowhere: the sync error goes into the SyncFailed condition and
    # nothing may be disrupted.
    owner = ref("TestWorkload", "w", "w-uid", "apps.test.io/v1")
    pdb = budget(min_available="28%", generation=2, status=up_to_date())
    with pytest.raises(ExpectedCountError) as caught:
        expected_count(
            pdb, [pod("naked", owner=owner)], Workloads(), {OwnerRef.of(owner): NOT_FOUND}
        )
    got = fail_safe(pdb, str(caught.value), NOW)
    assert got["disruptionsAllowed"] == 0
    assert {k: condition(got)[k] for k in ("status", "reason", "message")} == {
        "status": "False",
        "reason": "SyncFailed",
        "message": 'found no controllers for pod "naked"',
    }


def test_fail_safe_on_an_empty_status_adds_the_condition() -> None:
    got = fail_safe(budget(max_unavailable=1), "boom", NOW)
    assert got["disruptionsAllowed"] == 0
    assert {
        k: condition(got)[k] for k in ("status", "reason", "message", "observedGeneration")
    } == {
        "status": "False",
        "reason": "SyncFailed",
        "message": "boom",
        "observedGeneration": 0,
    }


def test_fail_safe_does_not_touch_the_budget() -> None:
    pdb = budget(min_available=2, status=up_to_date())
    before = repr(pdb)
    fail_safe(pdb, "boom", NOW)
    new_status(pdb, 0, 2, 3, {}, NOW)
    assert repr(pdb) == before


# --- one sync ---------------------------------------------------------------------------------


def test_sync_prunes_counts_and_rechecks() -> None:
    # TestUpdateDisruptedPods end to end: minAvailable 1, three pods, p1 being deleted, p2's
    # entry expired, p3 disrupted a minute ago: 1 healthy (p2), recheck in a minute.
    status = {
        "disruptedPods": {
            "p1": at(timedelta(0)),
            "p2": at(-timedelta(minutes=3)),
            "p3": at(-timedelta(minutes=1)),
            "notthere": at(timedelta(0)),
        }
    }
    pods = [pod("p1", deleting=True), pod("p2"), pod("p3")]
    got = sync(budget(min_available=1, status=status), pods, ExpectedCount(3, 1), NOW)
    assert got.status is not None
    assert (got.status["disruptionsAllowed"], got.status["currentHealthy"]) == (0, 1)
    assert (got.status["desiredHealthy"], got.status["expectedPods"]) == (1, 3)
    assert got.status["disruptedPods"] == {"p3": at(-timedelta(minutes=1))}
    assert got.recheck_after == timedelta(minutes=1)
    assert got.not_deleted == ("p2",)


def test_sync_with_nothing_to_change_still_rechecks() -> None:
    entry = at(-timedelta(minutes=1))
    status = up_to_date(disruptedPods={"p": entry}, currentHealthy=2, disruptionsAllowed=0)
    status["conditions"] = [
        {
            "type": "DisruptionAllowed",
            "status": "False",
            "reason": "InsufficientPods",
            "message": "",
            "observedGeneration": 2,
        }
    ]
    pods = [pod("p"), pod("q"), pod("r")]
    got = sync(budget(min_available=2, generation=2, status=status), pods, ExpectedCount(3, 2), NOW)
    assert got.status is None
    assert got.recheck_after == timedelta(minutes=1)
