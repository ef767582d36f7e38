"""The Job controller's sync decisions, table by table (no I/O)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from steward import format_time
from steward.controllers.job import indexes
from steward.controllers.job.pods import TRACKING_FINALIZER
from steward.controllers.job.sync import MAX_UNCOUNTED, BackoffRecord, JobSync, Plan

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
T = format_time(NOW)


def job(**spec: Any) -> dict[str, Any]:
    status = spec.pop("status", {})
    base: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "pi", "namespace": "ns", "uid": "job-uid"},
        "spec": {
            "parallelism": 1,
            "backoffLimit": 6,
            "completionMode": "NonIndexed",
            "template": {
                "metadata": {"labels": {"batch.kubernetes.io/job-name": "pi"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]},
            },
        },
        "status": status,
    }
    base["spec"].update(spec)
    return base


_counter = 0


def pod(
    phase: str = "Running",
    *,
    ready: bool = False,
    index: int | None = None,
    finalizer: bool = True,
    deleting: bool = False,
    node: str = "n1",
    created: int = 0,
    uid: str | None = None,
) -> dict[str, Any]:
    global _counter
    _counter += 1
    meta: dict[str, Any] = {
        "name": f"pod-{_counter}",
        "uid": uid or f"uid-{_counter}",
        "creationTimestamp": format_time(NOW - timedelta(seconds=100 - created)),
        "finalizers": [TRACKING_FINALIZER] if finalizer else [],
    }
    if index is not None:
        meta["annotations"] = {indexes.INDEX_KEY: str(index)}
    if deleting:
        meta["deletionTimestamp"] = T
    status: dict[str, Any] = {"phase": phase}
    if ready:
        status["conditions"] = [{"type": "Ready", "status": "True", "lastTransitionTime": T}]
    return {"metadata": meta, "spec": {"nodeName": node}, "status": status}


@dataclass
class Outcome:
    plan: Plan
    status: dict[str, Any]
    flushed_first: bool
    removed: list[str]
    events: list[tuple[str, str, str]]


def run(
    j: dict[str, Any],
    pod_list: list[dict[str, Any]],
    now: datetime = NOW,
    **kwargs: Any,
) -> Outcome:
    """One sync in which every write succeeds."""
    sync = JobSync(j, pod_list, now, **kwargs)
    plan = sync.plan()
    tracking = sync.track(len(plan.create), plan=plan)
    final = sync.finish(tracking=tracking)
    return Outcome(
        plan,
        final.status,
        tracking.flush_first,
        [p["metadata"]["uid"] for p in tracking.remove_finalizers],
        final.events,
    )


def ctypes(status: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["type"], c["status"], c["reason"]) for c in status.get("conditions", [])]


@pytest.mark.parametrize(
    ("spec", "pods_", "creates", "active"),
    [
        ({"parallelism": 2, "completions": 3}, [], 2, 2),
        ({"parallelism": 5, "completions": 3}, [], 3, 3),
        ({"parallelism": 2, "completions": 3}, [pod("Running")], 1, 2),
        ({"parallelism": 3}, [], 3, 3),  # work queue: no completions
        ({"parallelism": 0, "completions": 3}, [], 0, 0),
        ({"parallelism": 600, "completions": 1000}, [], 500, 500),
    ],
)
def test_creations(
    spec: dict[str, Any], pods_: list[dict[str, Any]], creates: int, active: int
) -> None:
    out = run(job(**spec), pods_)
    assert len(out.plan.create) == creates
    assert out.status["active"] == active
    assert out.status["startTime"] == T


def test_created_pod_carries_owner_finalizer_and_template() -> None:
    out = run(job(parallelism=1, completions=1), [])
    (body,) = out.plan.create
    meta = body["metadata"]
    assert meta["generateName"] == "pi-"
    assert meta["finalizers"] == [TRACKING_FINALIZER]
    assert meta["labels"] == {"batch.kubernetes.io/job-name": "pi"}
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "pi",
            "uid": "job-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert body["spec"]["containers"][0]["name"] == "c"


def test_unsatisfied_expectations_create_nothing() -> None:
    out = run(job(parallelism=2, completions=2), [], expectations_satisfied=False)
    assert out.plan.create == []
    assert out.status["active"] == 0


def test_completion_goes_through_success_criteria_met() -> None:
    done = [pod("Succeeded") for _ in range(3)]
    out = run(job(parallelism=2, completions=3, status={"startTime": T}), done)
    assert out.flushed_first  # the uncounted UIDs are written before finalizers go
    assert sorted(out.removed) == sorted(p["metadata"]["uid"] for p in done)
    assert out.status["succeeded"] == 3
    assert out.status["uncountedTerminatedPods"] == {"succeeded": [], "failed": []}
    assert ctypes(out.status) == [
        ("SuccessCriteriaMet", "True", "CompletionsReached"),
        ("Complete", "True", "CompletionsReached"),
    ]
    assert out.status["completionTime"] == T
    assert ("Normal", "Completed", "Job completed") in out.events


def test_work_queue_job_completes_after_one_success_and_no_active() -> None:
    out = run(job(parallelism=2, status={"startTime": T}), [pod("Succeeded"), pod("Running")])
    assert out.plan.create == []
    assert "conditions" not in out.status or not ctypes(out.status)
    out = run(job(parallelism=2, status={"startTime": T}), [pod("Succeeded")])
    assert ("Complete", "True", "CompletionsReached") in ctypes(out.status)


def test_uncounted_pods_without_finalizer_are_counted() -> None:
    status = {
        "startTime": T,
        "succeeded": 1,
        "failed": 0,
        "uncountedTerminatedPods": {"succeeded": ["gone", "kept"], "failed": ["f1"]},
    }
    kept = pod("Succeeded", uid="kept")
    out = run(job(parallelism=1, completions=5, status=status), [kept])
    # "gone" and "f1" have no pod with a finalizer: counted; "kept" counted once removed.
    assert out.status["succeeded"] == 3
    assert out.status["failed"] == 1
    assert out.status["uncountedTerminatedPods"] == {"succeeded": [], "failed": []}


def test_expected_removal_is_not_counted_twice() -> None:
    p = pod("Succeeded", uid="u1")
    status = {"startTime": T, "succeeded": 1, "uncountedTerminatedPods": {}}
    out = run(job(completions=2, status=status), [p], expected_removals={"u1"})
    assert out.removed == []
    assert out.status["succeeded"] == 1


def test_at_most_500_uncounted_per_sync_and_no_completion_yet() -> None:
    done = [pod("Succeeded") for _ in range(MAX_UNCOUNTED + 100)]
    sync = JobSync(job(parallelism=1, completions=600, status={"startTime": T}), done, NOW)
    plan = sync.plan()
    tracking = sync.track(plan=plan)
    assert len(tracking.remove_finalizers) == MAX_UNCOUNTED
    assert len(tracking.status["uncountedTerminatedPods"]["succeeded"]) == MAX_UNCOUNTED
    final = sync.finish(tracking=tracking)
    assert final.status["succeeded"] == MAX_UNCOUNTED
    assert final.finished is None


@pytest.mark.parametrize(
    ("limit", "failed", "terminal"),
    [(0, 1, True), (1, 1, False), (1, 2, True), (6, 6, False), (6, 7, True)],
)
def test_backoff_limit(limit: int, failed: int, terminal: bool) -> None:
    running = pod("Running")
    pods_ = [pod("Failed") for _ in range(failed)] + [running]
    out = run(job(backoffLimit=limit, completions=10, status={"startTime": T}), pods_)
    if not terminal:
        assert ctypes(out.status) == []
        assert out.plan.delete == []
        return
    # The running pod is deleted; it is terminating, so only the target is set.
    assert ctypes(out.status) == [("FailureTarget", "True", "BackoffLimitExceeded")]
    assert out.plan.delete == [running]
    # As upstream: once the Job is failing, the pods it deletes count as failed too.
    assert out.status["failed"] == failed + 1
    assert out.status["terminating"] == 1
    # Once it is gone: Failed, with the target's reason, and a Warning event.
    out = run(job(backoffLimit=limit, completions=10, status=out.status), [])
    assert ctypes(out.status) == [
        ("FailureTarget", "True", "BackoffLimitExceeded"),
        ("Failed", "True", "BackoffLimitExceeded"),
    ]
    assert out.status["failed"] == failed + 1
    assert "completionTime" not in out.status
    warning = ("Warning", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
    assert warning in out.events


def test_failed_waits_for_terminating_pods() -> None:
    pods_ = [pod("Failed"), pod("Running", deleting=True)]
    out = run(job(backoffLimit=0, completions=1, status={"startTime": T}), pods_)
    assert ctypes(out.status) == [("FailureTarget", "True", "BackoffLimitExceeded")]
    # Next sync, once the terminating pod is gone: Failed, taking the target's reason.
    out2 = run(job(backoffLimit=0, completions=1, status=out.status), [])
    assert ctypes(out2.status)[-1] == ("Failed", "True", "BackoffLimitExceeded")
    assert out2.status["failed"] == 2  # the deleted pod with a finalizer counted failed


def test_active_deadline() -> None:
    start = format_time(NOW - timedelta(seconds=30))
    out = run(job(activeDeadlineSeconds=60, completions=1, status={"startTime": start}), [pod()])
    assert out.plan.requeue_after == pytest.approx(30.0)
    assert ctypes(out.status) == []
    out = run(job(activeDeadlineSeconds=20, completions=1, status={"startTime": start}), [pod()])
    assert ctypes(out.status)[0] == ("FailureTarget", "True", "DeadlineExceeded")


@pytest.mark.parametrize(
    ("failures", "ago", "wait"),
    [
        (0, 0, 0.0),
        (1, 0, 10.0),
        (1, 4, 6.0),
        (2, 0, 20.0),
        (3, 0, 40.0),
        (10, 0, 600.0),
        (1, 11, 0.0),
    ],
)
def test_pod_recreation_backoff(failures: int, ago: int, wait: float) -> None:
    record = BackoffRecord(failures, NOW - timedelta(seconds=ago) if failures else None)
    assert record.remaining(NOW) == pytest.approx(wait)
    out = run(job(completions=1, status={"startTime": T}), [], backoff=record)
    assert len(out.plan.create) == (0 if wait else 1)
    assert out.plan.requeue_after == (pytest.approx(wait) if wait else None)


def test_a_shorter_first_backoff_doubles_from_there() -> None:
    """``--pod-failure-backoff``: the first delay and the doubling start from it."""
    record = BackoffRecord(3, NOW - timedelta(seconds=1))
    assert record.remaining(NOW, base=0.5) == pytest.approx(1.0)
    sync = JobSync(
        job(completions=1, status={"startTime": T}), [pod("Failed")], NOW, backoff_base=2.0
    )
    assert sync.plan().requeue_after == pytest.approx(2.0)


def test_new_failure_starts_backoff() -> None:
    sync = JobSync(job(completions=1, status={"startTime": T}), [pod("Failed")], NOW)
    plan = sync.plan()
    assert plan.create == []
    assert plan.requeue_after == pytest.approx(10.0)
    assert sync.new_backoff.failures == 1


def test_suspend_deletes_and_sets_condition() -> None:
    running = [pod("Running", ready=True), pod("Pending", node="")]
    out = run(job(parallelism=2, completions=2, suspend=True, status={"startTime": T}), running)
    assert [p["metadata"]["name"] for p in out.plan.delete] == [
        running[1]["metadata"]["name"],
        running[0]["metadata"]["name"],
    ]
    assert ctypes(out.status) == [("Suspended", "True", "JobSuspended")]
    assert ("Normal", "Suspended", "Job suspended") in out.events
    assert out.removed == []  # deleted pods are not counted as failures


def test_created_suspended_has_no_start_time_and_resume_sets_it() -> None:
    out = run(job(completions=1, suspend=True), [])
    assert "startTime" not in out.status
    assert ctypes(out.status) == [("Suspended", "True", "JobSuspended")]
    later = NOW + timedelta(seconds=50)
    resumed = run(job(completions=1, status=out.status), [], later)
    assert ctypes(resumed.status) == [("Suspended", "False", "JobResumed")]
    assert resumed.status["startTime"] == format_time(later)
    assert len(resumed.plan.create) == 1
    assert ("Normal", "Resumed", "Job resumed") in resumed.events


def test_removal_order() -> None:
    a = pod("Running", ready=True, created=1)
    b = pod("Running", ready=True, created=5)  # newer
    c = pod("Running", ready=False)
    d = pod("Pending")
    e = pod("Pending", node="")
    pods_ = [a, b, c, d, e]
    out = run(job(parallelism=1, completions=10, status={"startTime": T}), pods_)
    assert out.plan.delete == [e, d, c, b]


def test_indexed_creation() -> None:
    out = run(job(parallelism=3, completions=3, completionMode="Indexed"), [])
    assert [p["metadata"]["annotations"][indexes.INDEX_KEY] for p in out.plan.create] == [
        "0",
        "1",
        "2",
    ]
    first = out.plan.create[0]
    assert first["metadata"]["labels"][indexes.INDEX_KEY] == "0"
    assert first["metadata"]["generateName"] == "pi-0-"
    assert first["spec"]["hostname"] == "pi-0"
    assert first["spec"]["containers"][0]["env"] == [
        {
            "name": "JOB_COMPLETION_INDEX",
            "valueFrom": {
                "fieldRef": {"fieldPath": f"metadata.annotations['{indexes.INDEX_KEY}']"}
            },
        }
    ]


def test_indexed_skips_succeeded_and_active_indexes() -> None:
    j = job(
        parallelism=3,
        completions=5,
        completionMode="Indexed",
        status={"startTime": T, "completedIndexes": "0"},
    )
    out = run(j, [pod("Succeeded", index=2), pod("Running", index=1)])
    assert [p["metadata"]["annotations"][indexes.INDEX_KEY] for p in out.plan.create] == ["3", "4"]
    assert out.status["completedIndexes"] == "0,2"
    assert out.status["succeeded"] == 2


def test_indexed_completes_with_interval_notation() -> None:
    done = [pod("Succeeded", index=i) for i in (2, 0, 1)]
    j = job(parallelism=3, completions=3, completionMode="Indexed", status={"startTime": T})
    out = run(j, done)
    assert out.status["completedIndexes"] == "0-2"
    assert out.status["succeeded"] == 3
    assert ctypes(out.status)[-1] == ("Complete", "True", "CompletionsReached")


def test_indexed_duplicate_and_out_of_range_pods_removed() -> None:
    keep = pod("Running", index=0, ready=True)
    dup = pod("Running", index=0)
    bad = pod("Running", index=7)
    noindex = pod("Running")
    j = job(parallelism=3, completions=3, completionMode="Indexed", status={"startTime": T})
    out = run(j, [keep, dup, bad, noindex])
    removed = {p["metadata"]["name"] for p in out.plan.delete}
    assert removed == {
        dup["metadata"]["name"],
        bad["metadata"]["name"],
        noindex["metadata"]["name"],
    }
    assert out.plan.create == []  # deletion and creation never in the same sync


@pytest.mark.parametrize(
    ("text", "completions", "parsed", "formatted"),
    [
        ("", 3, [], ""),
        ("0-2", 3, [(0, 2)], "0-2"),
        ("1,2", 5, [(1, 2)], "1,2"),
        ("0,2-4,9", 5, [(0, 0), (2, 4)], "0,2-4"),
        ("x,3", 5, [(3, 3)], "3"),
    ],
)
def test_intervals(
    text: str, completions: int, parsed: list[tuple[int, int]], formatted: str
) -> None:
    got = indexes.parse_intervals(text, completions)
    assert got == parsed
    assert indexes.format_intervals(got) == formatted


def test_merge_intervals() -> None:
    assert indexes.merge([(0, 1)], [2, 5, 4]) == [(0, 2), (4, 5)]


def test_finished_job_input_is_not_modified() -> None:
    j = job(completions=1)
    before = copy.deepcopy(j)
    run(j, [pod("Succeeded")])
    assert j == before
