"""Steward's CronJob controller against upstream's, scenario by scenario: each runs at once
on both sides (:mod:`tests.controllers.cronjob.conftest`), checks what it expects on
Steward's, then compares the two field by field: the Jobs made (name, labels,
annotations with the scheduled timestamp, owner), the CronJob's status (the active
Jobs, ``lastScheduleTime``, ``lastSuccessfulTime``) and the Events (type, reason,
message).

Masked: UIDs (the ``controller-uid`` labels the API server gives a Job without labels of
its own too), namespaces and times that differ by construction, and the ``traceparent``
and ``tracestate`` annotations (Steward's trace, only when traced).

Every schedule here is hourly at the minute half an hour ago (a daily one in a time
zone), its ``lastScheduleTime`` two hours before that: the time due is the same on both
sides whenever they sync in the next half hour, so the Jobs' names agree.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from steward.controllers.cronjob.sync import SCHEDULED_TIMESTAMP, job_name
from tests.controllers.cronjob.conftest import Side
from tests.controllers.harness import eventually

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

WITHIN = 60.0
"""Seconds a side may take to act (a deadline, not a measurement)."""
MASKED_ANNOTATIONS = ("traceparent", "tracestate")


def stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def due() -> datetime:
    """The time due in every scenario: the whole minute half an hour ago."""
    return (datetime.now(UTC) - timedelta(minutes=30)).replace(second=0, microsecond=0)


def hourly(at: datetime) -> str:
    return f"{at.minute} * * * *"


def before(at: datetime) -> dict[str, Any]:
    """A status whose last schedule time is two hours before ``at``."""
    return {"lastScheduleTime": stamp(at - timedelta(hours=2))}


def missing_ref(side: Side, name: str) -> dict[str, Any]:
    """An active entry of a Job that does not exist: the sync says ``MissingJob``."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "namespace": side.ns,
        "name": name,
        "uid": "00000000-0000-0000-0000-000000000000",
    }


def ref_of(job: dict[str, Any]) -> dict[str, Any]:
    meta = job["metadata"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "namespace": meta["namespace"],
        "name": meta["name"],
        "uid": meta["uid"],
    }


def adopt_later(side: Side, name: str, owner: dict[str, Any]) -> dict[str, Any]:
    """A Job created without owner (so no sync sees it before the test is ready); the
    controller reference is added by :func:`own`."""
    return side.create_job(name, owner, owned=False)


def own(side: Side, job: dict[str, Any]) -> None:
    path = f"{side.batch}/jobs/{job['metadata']['name']}"
    fresh = side.kube.request("GET", path)
    fresh["metadata"]["ownerReferences"] = job["metadata"]["ownerReferences"]
    side.kube.request("PUT", path, fresh)


# What is compared -------------------------------------------------------------------------
def jobs_view(side: Side) -> list[dict[str, Any]]:
    out = []
    for job in side.jobs():
        meta = job["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        annotations = {
            k: v for k, v in (meta.get("annotations") or {}).items() if k not in MASKED_ANNOTATIONS
        }
        owners = [
            {k: v for k, v in ref.items() if k != "uid"}
            for ref in meta.get("ownerReferences") or ()
        ]
        out.append(
            {
                "name": meta["name"],
                "labels": {
                    k: v for k, v in (meta.get("labels") or {}).items() if "controller-uid" not in k
                },
                "annotations": annotations,
                "owners": owners,
                "managedBy": job["spec"].get("managedBy"),
            }
        )
    return out


def status_view(side: Side, name: str) -> dict[str, Any]:
    status = side.cronjob(name).get("status") or {}
    return {
        "active": sorted(r.get("name") for r in status.get("active") or ()),
        "lastScheduleTime": status.get("lastScheduleTime"),
        "lastSuccessfulTime": status.get("lastSuccessfulTime"),
    }


async def both(
    steward: Side, upstream: Side, setup: Callable[[Side], Any], settled: Callable[[Side], Any]
) -> None:
    """``setup`` on both sides at once, then wait for ``settled`` on each."""
    await asyncio.gather(asyncio.to_thread(setup, steward), asyncio.to_thread(setup, upstream))
    for side in (steward, upstream):
        await eventually(partial(settled, side), f"{side.name} settled", WITHIN)


async def same(steward: Side, upstream: Side, names: list[str], events: set[str]) -> None:
    """The Jobs, the CronJobs' status and (once each side recorded ``events``' reasons)
    the Events are equal on both sides."""
    assert jobs_view(steward) == jobs_view(upstream)
    for name in names:
        assert status_view(steward, name) == status_view(upstream, name), name

    def normalized(side: Side) -> list[tuple[str, str, str]]:
        return sorted(set(side.events()))

    def agreed() -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]] | None:
        """Both sides' Events once equal and with ``events``' reasons (Events are sent in
        the background: one side's may come later); else None."""
        mine, theirs = normalized(steward), normalized(upstream)
        return (mine, theirs) if mine == theirs and events <= {r for _, r, _ in mine} else None

    def differ(_: Any) -> str:
        return f"Events differ: Steward {normalized(steward)}, upstream {normalized(upstream)}"

    await eventually(agreed, "the same Events", WITHIN, failure=differ)


# Scenarios --------------------------------------------------------------------------------
async def test_a_due_time_starts_its_job(steward: Side, upstream: Side) -> None:
    """The time due starts one Job: named by its minute, the template's labels and
    annotations with the scheduled timestamp, the CronJob its controller; the status
    lists it and says when."""
    at = due()

    def setup(side: Side) -> None:
        side.create_cronjob("plain", schedule=hourly(at))
        side.set_status("plain", before(at))
        side.resume("plain")

    await both(steward, upstream, setup, lambda s: s.live_jobs())
    [job] = steward.jobs()
    meta = job["metadata"]
    assert meta["name"] == job_name("plain", at)
    assert meta["annotations"][SCHEDULED_TIMESTAMP] == stamp(at)
    assert meta["labels"] == {"made-by": "cronjob"}
    [owner] = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("CronJob", "plain", True)
    status = status_view(steward, "plain")
    assert status["active"] == [job_name("plain", at)]
    assert status["lastScheduleTime"] == stamp(at)
    await same(steward, upstream, ["plain"], {"SuccessfulCreate"})


async def test_missed_window_with_and_without_a_starting_deadline(
    steward: Side, upstream: Side
) -> None:
    """The time due half an hour ago runs without ``startingDeadlineSeconds`` and within
    one of an hour; past one of a minute it does not run (the sync, seen by the missing
    Job it forgets, starts nothing)."""
    at = due()

    def setup(side: Side) -> None:
        for name, deadline in (("free", None), ("hour", 3600), ("minute", 60)):
            spec: dict[str, Any] = {"schedule": hourly(at)}
            if deadline is not None:
                spec["startingDeadlineSeconds"] = deadline
            side.create_cronjob(name, **spec)
            side.set_status(name, {**before(at), "active": [missing_ref(side, "gone-" + name)]})
            side.resume(name)

    def settled(side: Side) -> bool:
        return len(side.live_jobs()) == 2 and not status_view(side, "minute")["active"]

    await both(steward, upstream, setup, settled)
    assert steward.live_jobs() == [job_name("free", at), job_name("hour", at)]
    assert status_view(steward, "minute")["lastScheduleTime"] == stamp(at - timedelta(hours=2))
    await same(steward, upstream, ["free", "hour", "minute"], {"SuccessfulCreate", "MissingJob"})


async def test_a_time_zone(steward: Side, upstream: Side) -> None:
    """A daily schedule in Asia/Kolkata (UTC+05:30) at the local time half an hour ago
    runs, and the Job's scheduled timestamp is written in that zone."""
    at = due()
    local = at.astimezone(ZoneInfo("Asia/Kolkata"))

    def setup(side: Side) -> None:
        side.create_cronjob(
            "zoned", schedule=f"{local.minute} {local.hour} * * *", timeZone="Asia/Kolkata"
        )
        side.set_status("zoned", {"lastScheduleTime": stamp(at - timedelta(days=2))})
        side.resume("zoned")

    await both(steward, upstream, setup, lambda s: s.live_jobs())
    [job] = steward.jobs()
    assert job["metadata"]["name"] == job_name("zoned", at)
    assert job["metadata"]["annotations"][SCHEDULED_TIMESTAMP] == local.isoformat()
    assert local.isoformat().endswith("+05:30")
    await same(steward, upstream, ["zoned"], {"SuccessfulCreate"})


async def test_concurrency_policies(steward: Side, upstream: Side) -> None:
    """With a Job still running: ``Allow`` starts another beside it, ``Forbid`` starts
    none (``JobAlreadyActive``), ``Replace`` deletes it (background propagation) and
    starts the new one."""
    at = due()

    def setup(side: Side) -> None:
        for policy in ("Allow", "Forbid", "Replace"):
            name = policy.lower()
            owner = side.create_cronjob(name, schedule=hourly(at), concurrencyPolicy=policy)
            running = adopt_later(side, f"{name}-running", owner)
            side.set_status(name, {**before(at), "active": [ref_of(running)]})
            own(side, running)
            side.resume(name)

    def settled(side: Side) -> bool:
        return (
            len(status_view(side, "allow")["active"]) == 2
            and status_view(side, "replace")["active"] == [job_name("replace", at)]
            and any(r == "JobAlreadyActive" for _, r, _ in side.events())
        )

    await both(steward, upstream, setup, settled)
    assert steward.live_jobs() == sorted(
        ["allow-running", job_name("allow", at), "forbid-running", job_name("replace", at)]
    )
    assert status_view(steward, "forbid")["active"] == ["forbid-running"]
    await same(
        steward,
        upstream,
        ["allow", "forbid", "replace"],
        {"SuccessfulCreate", "SuccessfulDelete", "JobAlreadyActive"},
    )


async def test_suspended(steward: Side, upstream: Side) -> None:
    """A suspended CronJob with a time due starts nothing, but its active list is still
    kept (the missing Job forgotten)."""
    at = due()

    def setup(side: Side) -> None:
        side.create_cronjob("paused", schedule=hourly(at))
        side.set_status("paused", {**before(at), "active": [missing_ref(side, "gone")]})

    await both(steward, upstream, setup, lambda s: not status_view(s, "paused")["active"])
    assert steward.live_jobs() == []
    assert status_view(steward, "paused")["lastScheduleTime"] == stamp(at - timedelta(hours=2))
    await same(steward, upstream, ["paused"], {"MissingJob"})


async def test_history_limits(steward: Side, upstream: Side) -> None:
    """Finished Jobs beyond the limits (one successful, one failed) are deleted oldest
    first by start time; ``lastSuccessfulTime`` is the newest completion; the finished
    Job the active list named leaves it (``SawCompletedJob``)."""
    at = due()
    hour = timedelta(hours=1)

    def setup(side: Side) -> None:
        owner = side.create_cronjob(
            "kept", schedule=hourly(at), successfulJobsHistoryLimit=1, failedJobsHistoryLimit=1
        )
        made = []
        finished = ["Complete"] * 3 + ["Failed"] * 2
        for i, (name, condition) in enumerate(
            zip(["s1", "s2", "s3", "f1", "f2"], finished, strict=True)
        ):
            job = adopt_later(side, name, owner)
            start = at - 10 * hour + i * hour
            side.finish(job, condition, stamp(start), stamp(start + timedelta(minutes=5)))
            made.append(job)
        side.set_status("kept", {**before(at), "active": [ref_of(made[2])]})
        for job in made:
            own(side, job)

    def settled(side: Side) -> bool:
        return side.live_jobs() == ["f2", "s3"] and not status_view(side, "kept")["active"]

    await both(steward, upstream, setup, settled)
    status = status_view(steward, "kept")
    assert status["lastSuccessfulTime"] == stamp(at - 8 * hour + timedelta(minutes=5))
    await same(steward, upstream, ["kept"], {"SuccessfulDelete", "SawCompletedJob"})


async def test_the_due_job_exists_already(steward: Side, upstream: Side) -> None:
    """A Job of the due time's name the CronJob controls but does not list (a crash
    between the creation and the status write) is reported (``UnexpectedJob``), then
    taken as started: listed, ``lastScheduleTime`` set, no second Job and no
    ``SuccessfulCreate``."""
    at = due()
    name = job_name("again", at)

    def setup(side: Side) -> None:
        owner = side.create_cronjob("again", schedule=hourly(at))
        made = adopt_later(side, name, owner)
        side.set_status("again", before(at))
        own(side, made)
        side.resume("again")

    await both(steward, upstream, setup, lambda s: status_view(s, "again")["active"])
    status = status_view(steward, "again")
    assert status == {"active": [name], "lastScheduleTime": stamp(at), "lastSuccessfulTime": None}
    assert steward.live_jobs() == [name]
    await same(steward, upstream, ["again"], {"UnexpectedJob"})
    assert "SuccessfulCreate" not in {r for _, r, _ in steward.events()}
