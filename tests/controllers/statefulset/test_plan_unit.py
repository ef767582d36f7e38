"""One StatefulSet sync as a decision: which pods are created, deleted or updated, in
which order, under OrderedReady and Parallel, partitions, maxUnavailable, OnDelete, and
the status written (upstream's stateful_set_control.go, v1.37 default gates)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from steward.controllers.statefulset import plan
from tests.controllers.statefulset.builders import (
    NEW,
    NOW,
    OLD,
    pod,
    statefulset,
    sync,
    verbs,
)

pytestmark = pytest.mark.unit


# Scaling up.


def test_ordered_ready_creates_one_pod_and_waits() -> None:
    result = sync(statefulset(3), [])
    assert verbs(result) == [("create", "web-0")]
    assert result.waiting_for == "web-0"


def test_ordered_ready_creates_the_next_once_predecessors_are_ready() -> None:
    result = sync(statefulset(3), [pod(0, revision=NEW)])
    assert verbs(result) == [("create", "web-1")]


def test_ordered_ready_waits_for_an_unready_predecessor() -> None:
    result = sync(statefulset(3), [pod(0, ready=False, revision=NEW)])
    assert verbs(result) == []
    assert result.waiting_for == "web-0"


def test_ordered_ready_waits_for_min_ready_seconds_inclusive() -> None:
    sts = statefulset(3, min_ready=10)
    young = [pod(0, revision=NEW, ready_for=9)]
    assert verbs(sync(sts, young)) == []
    # lastTransitionTime + minReadySeconds == now: available (v1.37 compares with <=).
    exact = [pod(0, revision=NEW, ready_for=10)]
    assert verbs(sync(sts, exact)) == [("create", "web-1")]


def test_parallel_creates_every_missing_pod() -> None:
    result = sync(statefulset(3, policy="Parallel"), [pod(1, ready=False, revision=NEW)])
    assert verbs(result) == [("create", "web-0"), ("create", "web-2")]
    assert result.waiting_for is None


def test_ordinals_start_names_and_condemns() -> None:
    sts = statefulset(2, start=5, policy="Parallel")
    result = sync(sts, [pod(4, revision=NEW), pod(5, revision=NEW), pod(7, revision=NEW)])
    assert verbs(result) == [("create", "web-6"), ("delete", "web-7"), ("delete", "web-4")]


def test_new_pod_has_identity_storage_and_revision() -> None:
    result = sync(statefulset(1, claims=("data",)), [])
    created = result.actions[0].pod
    assert created["metadata"]["name"] == "web-0"
    assert created["metadata"]["labels"] == {
        "app": "web",
        "statefulset.kubernetes.io/pod-name": "web-0",
        "apps.kubernetes.io/pod-index": "0",
        "controller-revision-hash": NEW,  # partition 0: every new pod is of the update
    }
    assert created["spec"]["hostname"] == "web-0"
    assert created["spec"]["subdomain"] == "web"
    assert created["spec"]["volumes"] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}}
    ]
    assert created["metadata"]["ownerReferences"][0]["uid"] == "set-uid"


def test_missing_pod_below_the_partition_gets_the_current_revision() -> None:
    sts = statefulset(3, partition=2, policy="Parallel")
    result = sync(sts, [])
    revisions = {
        a.name: (
            a.pod["metadata"]["labels"]["controller-revision-hash"],
            a.pod["spec"]["containers"][0]["image"],
        )
        for a in result.actions
    }
    assert revisions == {"web-0": (OLD, "v1"), "web-1": (OLD, "v1"), "web-2": (NEW, "v2")}


def test_partition_counts_from_the_start_ordinal() -> None:
    sts = statefulset(3, partition=1, start=10, policy="Parallel")
    result = sync(sts, [])
    revisions = [a.pod["metadata"]["labels"]["controller-revision-hash"] for a in result.actions]
    assert [a.name for a in result.actions] == ["web-10", "web-11", "web-12"]
    assert revisions == [OLD, NEW, NEW]


def test_stale_claim_blocks_creation() -> None:
    result = sync(statefulset(2), [], stale_claims=frozenset({"web-0"}))
    assert verbs(result) == []
    assert result.waiting_for == "web-0"


def test_pending_pod_gets_its_claims_then_blocks() -> None:
    result = sync(statefulset(2), [pod(0, phase="Pending", ready=False)])
    assert verbs(result) == [("create-claims", "web-0")]
    assert result.waiting_for == "web-0"


def test_failed_pod_is_deleted_and_blocks() -> None:
    result = sync(statefulset(2), [pod(0, phase="Failed", ready=False)])
    assert verbs(result) == [("delete", "web-0")]
    assert result.waiting_for == "web-0"


def test_identity_and_storage_repaired_in_place() -> None:
    broken = pod(0, revision=NEW)
    del broken["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"]
    result = sync(statefulset(1, claims=("data",)), [broken])
    assert verbs(result) == [("update", "web-0")]
    fixed = result.actions[0].pod
    assert fixed["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] == "web-0"
    assert fixed["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "data-web-0"


# Scaling down.


def test_ordered_ready_deletes_the_highest_condemned_only() -> None:
    pods = [pod(n, revision=NEW) for n in range(5)]
    assert verbs(sync(statefulset(3), pods)) == [("delete", "web-4")]


def test_parallel_deletes_every_condemned_highest_first() -> None:
    pods = [pod(n, revision=NEW) for n in range(5)]
    result = sync(statefulset(3, policy="Parallel"), pods)
    assert verbs(result) == [("delete", "web-4"), ("delete", "web-3")]


def test_ordered_ready_scale_down_waits_for_the_first_unavailable() -> None:
    pods = [pod(0, revision=NEW), pod(1, revision=NEW, ready=False), pod(2, ready=False)]
    result = sync(statefulset(1), pods)
    assert verbs(result) == []
    assert result.waiting_for == "web-1"


def test_ordered_ready_scale_down_may_delete_the_first_unavailable() -> None:
    pods = [pod(0, revision=NEW), pod(1, revision=NEW), pod(2, ready=False)]
    assert verbs(sync(statefulset(1), pods)) == [("delete", "web-2")]


def test_ordered_ready_scale_down_waits_for_a_terminating_pod() -> None:
    pods = [pod(0, revision=NEW), pod(1, revision=NEW), pod(2, deleting=True)]
    result = sync(statefulset(1), pods)
    assert verbs(result) == []
    assert result.waiting_for == "web-2"


# Rolling updates.


def test_rolling_update_deletes_the_highest_old_pod() -> None:
    result = sync(statefulset(3), [pod(n) for n in range(3)])
    assert verbs(result) == [("delete", "web-2")]
    assert result.status is not None
    assert result.status["currentReplicas"] == 2


def test_rolling_update_goes_down_past_updated_pods() -> None:
    pods = [pod(0), pod(1), pod(2, revision=NEW)]
    assert verbs(sync(statefulset(3), pods)) == [("delete", "web-1")]


def test_partition_keeps_lower_ordinals() -> None:
    sts = statefulset(3, partition=2)
    assert verbs(sync(sts, [pod(0), pod(1), pod(2, revision=NEW)])) == []
    assert verbs(sync(sts, [pod(0), pod(1), pod(2)])) == [("delete", "web-2")]


@pytest.mark.parametrize(
    ("replicas", "value", "deleted"),
    [(4, 2, 2), (4, "50%", 2), (4, "10%", 1), (4, "100%", 4), (3, "50%", 1)],
)
def test_max_unavailable_ordered(replicas: int, value: int | str, deleted: int) -> None:
    sts = statefulset(replicas, max_unavailable=value)
    result = sync(sts, [pod(n) for n in range(replicas)])
    expected = [("delete", f"web-{n}") for n in range(replicas - 1, replicas - 1 - deleted, -1)]
    assert verbs(result) == expected


def test_parallel_deletes_unavailable_old_pods_first_then_within_budget() -> None:
    sts = statefulset(4, policy="Parallel", max_unavailable=2)
    pods = [pod(0, ready=False), pod(1), pod(2), pod(3)]
    result = sync(sts, pods)
    assert verbs(result) == [("delete", "web-0"), ("delete", "web-3")]
    assert result.status is not None and result.status["currentReplicas"] == 2


def test_parallel_budget_spent_waits() -> None:
    sts = statefulset(3, policy="Parallel", max_unavailable=1)
    pods = [pod(0), pod(1), pod(2, revision=NEW, ready=False)]
    assert verbs(sync(sts, pods)) == []


def test_on_delete_never_deletes_for_an_update() -> None:
    sts = statefulset(3, strategy="OnDelete", partition=None)
    assert verbs(sync(sts, [pod(n) for n in range(3)])) == []


def test_recreate_is_refused_with_the_gate_off() -> None:
    result = sync(statefulset(3, strategy="Recreate", partition=None), [])
    assert result.error is not None and result.status is None and result.actions == ()


def test_set_being_deleted_only_reports_status() -> None:
    sts = statefulset(3)
    sts["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    result = sync(sts, [pod(0)])
    assert result.actions == ()
    assert result.status is not None and result.status["replicas"] == 1


# Status.


def test_status_counts() -> None:
    sts = statefulset(3, min_ready=30)
    pods = [
        pod(0, revision=NEW),
        pod(1, revision=NEW, ready_for=5),
        pod(2, phase="Pending", ready=False),
        pod(3, deleting=True),
    ]
    status = sync(sts, pods).status
    assert status is not None
    assert {k: status[k] for k in plan._COMPARED} == {
        "replicas": 4,
        "readyReplicas": 3,
        "availableReplicas": 2,
        "currentReplicas": 1,  # web-2 (web-3 is being deleted)
        "updatedReplicas": 2,
    }
    assert status["observedGeneration"] == 4
    assert (status["currentRevision"], status["updateRevision"]) == (OLD, NEW)


def test_complete_update_and_write_decision() -> None:
    sts = statefulset(2)
    status = sync(sts, [pod(0, revision=NEW), pod(1, revision=NEW)]).status
    assert status is not None
    done = plan.complete_update(sts, status)
    assert (done["currentRevision"], done["currentReplicas"]) == (NEW, 2)
    assert plan.needs_write(sts, done)
    written = {**sts, "status": done}
    assert not plan.needs_write(written, done)
    half = sync(sts, [pod(0, revision=NEW), pod(1)]).status
    assert half is not None
    assert plan.complete_update(sts, half)["currentRevision"] == OLD


def test_now_moves_availability() -> None:
    sts = statefulset(2, min_ready=60)
    pods = [pod(0, revision=NEW, ready_for=30)]
    assert verbs(sync(sts, pods)) == []
    assert verbs(sync(sts, pods, now=NOW + timedelta(seconds=30))) == [("create", "web-1")]


def test_requeue_for_the_soonest_pod_to_become_available() -> None:
    sts = statefulset(3, min_ready=60)
    pods = [
        pod(0, revision=NEW, ready_for=600),  # available already: no wait
        pod(1, revision=NEW, ready_for=50),
        pod(2, revision=NEW, ready_for=20),
    ]
    status = sync(sts, pods).status
    assert plan.requeue_after(sts, status, pods, NOW) == 10
    # All available, or no minReadySeconds: no requeue.
    done = [pod(0, revision=NEW, ready_for=600)]
    assert plan.requeue_after(sts, sync(sts, done).status, done, NOW) is None
    no_wait = statefulset(3)
    assert plan.requeue_after(no_wait, sync(no_wait, pods).status, pods, NOW) is None


def test_requeue_falls_back_to_min_ready_seconds() -> None:
    sts = statefulset(1, min_ready=60)
    status = {"readyReplicas": 1, "availableReplicas": 0}
    unstamped = pod(0)
    del unstamped["status"]["conditions"][0]["lastTransitionTime"]
    assert plan.requeue_after(sts, status, [unstamped], NOW) == 60


def test_set_being_deleted_counts_every_pod_given() -> None:
    # Upstream reports the status of all the set's pods here, even one whose ordinal
    # overflows 32 bits (ignored by every other path).
    sts = statefulset(1)
    sts["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    overflow = pod(0)
    overflow["metadata"]["name"] = "web-2147483648"
    status = sync(sts, [pod(0), overflow]).status
    assert status is not None and status["replicas"] == 2
    sts["metadata"].pop("deletionTimestamp")
    status = sync(sts, [pod(0), overflow]).status
    assert status is not None and status["replicas"] == 1
