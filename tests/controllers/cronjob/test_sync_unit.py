"""The CronJob controller's decisions without I/O (:mod:`steward.controllers.cronjob.sync`):
the Job made from the template, the history limits' victims, the active list against
the Jobs, and what the schedule asks for at a given time, with upstream's Events
(pkg/controller/cronjob/cronjob_controllerv2_test.go's cases, as far as they are decisions)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from steward.controllers.cronjob import sync
from steward.controllers.cronjob.sync import Status

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 7, 10, 30, 20, tzinfo=UTC)
CREATED = "2026-12-01T00:00:00Z"


def cronjob(status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "cj",
            "namespace": "ns",
            "uid": "cj-uid",
            "creationTimestamp": CREATED,
        },
        "spec": {
            "schedule": "* * * * *",
            "jobTemplate": {
                "metadata": {"labels": {"a": "b"}, "annotations": {"x": "y"}},
                "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}},
            },
            **spec,
        },
        "status": status or {},
    }


def job(name: str, cond: str | None = None, **status: Any) -> dict[str, Any]:
    st: dict[str, Any] = dict(status)
    if cond:
        st["conditions"] = [{"type": cond, "status": "True"}]
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"{name}-uid"}, "status": st}


def ref(name: str) -> dict[str, Any]:
    return {"kind": "Job", "namespace": "ns", "name": name, "uid": f"{name}-uid"}


def reasons(status: Status) -> list[str]:
    return [reason for _, reason, _ in status.events]


# -- the Job ---------------------------------------------------------------------------


def test_job_from_template_names_annotates_and_owns() -> None:
    when = datetime(2026, 12, 7, 10, 30, tzinfo=UTC)
    body = sync.job_from_template(cronjob(), when)
    meta = body["metadata"]
    assert meta["name"] == f"cj-{int(when.timestamp()) // 60}"
    assert meta["labels"] == {"a": "b"}
    assert meta["annotations"] == {"x": "y", sync.SCHEDULED_TIMESTAMP: "2026-12-07T10:30:00Z"}
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "name": "cj",
            "uid": "cj-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert body["spec"] == {"template": {"spec": {"containers": [{"name": "c"}]}}}


def test_scheduled_timestamp_is_in_the_time_zone() -> None:
    when = datetime(2026, 12, 7, 10, 30, tzinfo=UTC)
    body = sync.job_from_template(cronjob(timeZone="America/New_York"), when)
    assert body["metadata"]["annotations"][sync.SCHEDULED_TIMESTAMP] == "2026-12-07T05:30:00-05:00"
    # A zone at offset zero is written Z, as Go's RFC 3339.
    london = sync.job_from_template(cronjob(timeZone="Europe/London"), when)
    assert london["metadata"]["annotations"][sync.SCHEDULED_TIMESTAMP] == "2026-12-07T10:30:00Z"


# -- history ---------------------------------------------------------------------------


def test_history_victims_oldest_first_never_started_last() -> None:
    jobs = [
        job("c3", "Complete", startTime="2026-12-07T03:00:00Z"),
        job("c1", "Complete", startTime="2026-12-07T01:00:00Z"),
        job("c0", "Complete"),
        job("c2", "Complete", startTime="2026-12-07T02:00:00Z"),
        job("f1", "Failed", startTime="2026-12-07T01:00:00Z"),
        job("f2", "Failed", startTime="2026-12-07T02:00:00Z"),
        job("running"),
    ]
    victims = sync.history_victims(
        cronjob(successfulJobsHistoryLimit=1, failedJobsHistoryLimit=0), jobs
    )
    assert [v["metadata"]["name"] for v in victims] == ["c1", "c2", "c3", "f1", "f2"]
    assert sync.history_victims(cronjob(), jobs) == []


# -- the active list -------------------------------------------------------------------


def test_completed_jobs_leave_the_active_list() -> None:
    cj = cronjob({"active": [ref("done"), ref("failed"), ref("running")]})
    status = Status.of(cj)
    jobs = [
        job("done", "Complete", completionTime="2026-12-07T10:00:00Z"),
        job("failed", "Failed"),
        job("running"),
        job("stray"),
        job("older", "Complete", completionTime="2026-12-07T09:00:00Z"),
    ]
    strays = sync.reconcile_jobs(status, jobs)
    assert [s["metadata"]["name"] for s in strays] == ["stray"]
    assert [r["name"] for r in status.active] == ["running"]
    assert status.status["lastSuccessfulTime"] == "2026-12-07T10:00:00Z"
    assert status.changed
    assert status.events == [
        ("Normal", "SawCompletedJob", "Saw completed job: done, condition: Complete"),
        ("Normal", "SawCompletedJob", "Saw completed job: failed, condition: Failed"),
    ]


def test_missing_refs_and_their_event() -> None:
    status = Status.of(cronjob({"active": [ref("here"), ref("gone")]}))
    missing = sync.missing_refs(status, [job("here")])
    assert [m["name"] for m in missing] == ["gone"]
    sync.went_missing(status, missing[0])
    assert [r["name"] for r in status.active] == ["here"]
    assert status.events == [("Normal", "MissingJob", "Active job went missing: gone")]


# -- the schedule ----------------------------------------------------------------------


def last(minutes: int) -> dict[str, Any]:
    return {"lastScheduleTime": (NOW - timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:00Z")}


def test_due_now_runs_the_most_recent_time() -> None:
    status = Status.of(cronjob(last(5)))
    decision = sync.decide(cronjob(last(5)), status, NOW)
    assert decision.run == datetime(2026, 12, 7, 10, 30, tzinfo=UTC)
    assert status.events == []


def test_nothing_due_requeues_at_the_next_time() -> None:
    cj = cronjob({"lastScheduleTime": "2026-12-07T10:30:00Z"})
    decision = sync.decide(cj, Status.of(cj), NOW)
    assert decision.run is None
    assert decision.requeue_after == pytest.approx(40.1)


def test_suspended_unknown_zone_deleting_and_unparseable_start_nothing() -> None:
    cases = [
        (cronjob(last(5), suspend=True), []),
        (cronjob(last(5), timeZone="Mars/Olympus"), ["UnknownTimeZone"]),
        (cronjob(last(5), schedule="61 * * * *"), ["UnparseableSchedule"]),
        (cronjob(last(5), schedule="59 23 31 2 *"), ["InvalidSchedule"]),
    ]
    deleting = cronjob(last(5))
    deleting["metadata"]["deletionTimestamp"] = "2026-12-07T10:00:00Z"
    cases.append((deleting, []))
    for cj, events in cases:
        status = Status.of(cj)
        decision = sync.decide(cj, status, NOW)
        assert decision == sync.Decision(), cj["spec"]
        assert reasons(status) == events
    status = Status.of(cases[1][0])
    sync.decide(cases[1][0], status, NOW)
    assert status.events[0][2] == 'invalid timeZone: "Mars/Olympus": unknown time zone Mars/Olympus'


def test_the_time_zone_places_the_schedule() -> None:
    """``0 16 * * *`` in Asia/Kolkata (UTC+05:30) is 10:30 UTC: due at NOW; read in UTC
    it would be 16:00 the day before."""
    cj = cronjob({"lastScheduleTime": "2026-12-05T00:00:00Z"}, schedule="0 16 * * *")
    cj["spec"]["timeZone"] = "Asia/Kolkata"
    assert sync.decide(cj, Status.of(cj), NOW).run == datetime(2026, 12, 7, 10, 30, tzinfo=UTC)
    del cj["spec"]["timeZone"]
    assert sync.decide(cj, Status.of(cj), NOW).run == datetime(2026, 12, 6, 16, 0, tzinfo=UTC)


def test_the_starting_deadline_bounds_the_search() -> None:
    """``startingDeadlineSeconds`` moves the search's start up to now minus it: the 10:30
    time is 20 s old, so a deadline of 10 s finds nothing to run (nor reports a miss: the
    search cannot find a time older than the deadline, so upstream's ``MissSchedule``
    does not arise this way) and waits for 10:31; one of 30 s runs it."""
    cj = cronjob(last(5), startingDeadlineSeconds=10)
    status = Status.of(cj)
    decision = sync.decide(cj, status, NOW)
    assert decision.run is None
    assert decision.requeue_after == pytest.approx(40.1)
    assert status.events == []
    within = cronjob(last(5), startingDeadlineSeconds=30)
    assert sync.decide(within, Status.of(within), NOW).run is not None


def test_too_many_missed_times_still_run_the_last() -> None:
    cj = cronjob(last(200))
    status = Status.of(cj)
    assert sync.decide(cj, status, NOW).run == datetime(2026, 12, 7, 10, 30, tzinfo=UTC)
    assert reasons(status) == ["TooManyMissedTimes"]


def test_an_already_started_time_is_not_started_again() -> None:
    cj = cronjob({"lastScheduleTime": "2026-12-07T10:29:00Z", "active": [ref("x")]})
    name = sync.job_name("cj", datetime(2026, 12, 7, 10, 30, tzinfo=UTC))
    cj["status"]["active"] = [ref(name)]
    decision = sync.decide(cj, Status.of(cj), NOW)
    assert decision.run is None


def test_concurrency_policies() -> None:
    active = {**last(5), "active": [ref("old")]}
    allow = cronjob(active)
    assert sync.decide(allow, Status.of(allow), NOW).replace == ()
    forbid = cronjob(active, concurrencyPolicy="Forbid")
    status = Status.of(forbid)
    assert sync.decide(forbid, status, NOW).run is None
    assert status.events == [
        (
            "Normal",
            "JobAlreadyActive",
            "Not starting job because prior execution is running and concurrency policy is Forbid",
        )
    ]
    replace = cronjob(active, concurrencyPolicy="Replace")
    decision = sync.decide(replace, Status.of(replace), NOW)
    assert decision.run is not None
    assert [r["name"] for r in decision.replace] == ["old"]


def test_legacy_tz_prefix_is_reported_and_used() -> None:
    cj = cronjob(last(5), schedule="TZ=UTC * * * * *", timeZone="Asia/Tokyo")
    status = Status.of(cj)
    assert sync.decide(cj, status, NOW).run is not None
    assert reasons(status) == ["UnsupportedSchedule"]
