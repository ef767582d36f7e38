"""A CronJob's sync decided without I/O: which Jobs to forget, which to delete, whether and
which Job to start now, with upstream's Events (pkg/controller/cronjob,
``cleanupFinishedJobs``, ``syncCronJob`` and ``getJobFromTemplate2`` in
cronjob_controllerv2.go and utils.go).

The controller (:mod:`.controller`) calls these in upstream's order on a copy of the
CronJob's status, doing the reads and writes they ask for in between:

1. :func:`history_victims`: finished Jobs beyond ``successfulJobsHistoryLimit`` and
   ``failedJobsHistoryLimit``, oldest first (by ``status.startTime``, a Job that never
   started last, the name breaking ties), to be deleted with background propagation;
2. :func:`reconcile_jobs`: the active list against the Jobs the CronJob controls (a
   finished one leaves it with ``SawCompletedJob``; an unfinished one it does not list is
   ``UnexpectedJob`` unless the API server's CronJob lists it; an entry no Job answers is
   read from the API server and, gone, leaves with ``MissingJob``) and
   ``status.lastSuccessfulTime``;
3. :func:`decide`: what the schedule asks for now (:class:`Decision`).

Everything a step changes is in :class:`Status`, which the controller writes once at the
end when :attr:`Status.changed` says so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from steward import copy_json, format_time, parse_time
from steward.controllers.cronjob import schedule as sched

SCHEDULED_TIMESTAMP = "batch.kubernetes.io/cronjob-scheduled-timestamp"
"""The annotation of a Job with the time it was scheduled for, RFC 3339 in the CronJob's
zone (upstream's ``CronJobScheduledTimestampAnnotation``)."""

Object = dict[str, Any]
Event = tuple[str, str, str]
"""(type, reason, message) of an Event on the CronJob."""

_RFC1123Z = "%a, %d %b %Y %H:%M:%S %z"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _uid(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("uid", ""))


def _name(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("name", ""))


def when(value: Any) -> datetime:
    """A timestamp of the API server's; ValueError when absent or malformed."""
    parsed = parse_time(value)
    if parsed is None:
        raise ValueError(f"not a timestamp: {value!r}")
    return parsed


def go_quote(text: str) -> str:
    """Go's ``%q`` of a string (close enough: JSON's escapes, non-ASCII kept)."""
    return json.dumps(text, ensure_ascii=False)


# -- Jobs -----------------------------------------------------------------------------


def finished_condition(job: Mapping[str, Any]) -> str | None:
    """``Complete`` or ``Failed`` when the Job has that condition True (upstream's
    ``jobutil.FinishedCondition``), else None."""
    for cond in (job.get("status") or {}).get("conditions") or ():
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return str(cond["type"])
    return None


def _start_order(job: Mapping[str, Any]) -> tuple[int, datetime, str]:
    """upstream's ``byJobStartTime``: started Jobs by start time, then never-started ones;
    the name breaks ties."""
    start = (job.get("status") or {}).get("startTime")
    if not start:
        return (1, datetime.min.replace(tzinfo=UTC), _name(job))
    return (0, when(start), _name(job))


def history_victims(cronjob: Mapping[str, Any], jobs: Sequence[Object]) -> list[Object]:
    """The finished Jobs to delete beyond the history limits: the oldest successful ones
    beyond ``successfulJobsHistoryLimit``, then the oldest failed ones beyond
    ``failedJobsHistoryLimit`` (a limit not set keeps every Job of its kind)."""
    spec = cronjob.get("spec") or {}
    victims: list[Object] = []
    for kind, limit in (
        ("Complete", spec.get("successfulJobsHistoryLimit")),
        ("Failed", spec.get("failedJobsHistoryLimit")),
    ):
        if limit is None:
            continue
        done = sorted((j for j in jobs if finished_condition(j) == kind), key=_start_order)
        victims.extend(done[: max(len(done) - int(limit), 0)])
    return victims


def job_name(cronjob_name: str, scheduled: datetime) -> str:
    """``<cronjob>-<scheduled time in minutes since the epoch>``: one name per scheduled
    time, so a Job is never started twice for it (upstream's ``getJobName``)."""
    return f"{cronjob_name}-{int(scheduled.timestamp()) // 60}"


def job_from_template(cronjob: Mapping[str, Any], scheduled: datetime) -> Object:
    """The Job to create for ``scheduled``: the template's labels, annotations (plus
    :data:`SCHEDULED_TIMESTAMP`) and spec, the name of :func:`job_name`, the CronJob as
    its controller. Raises :class:`~.schedule.UnknownTimeZoneError` for an unknown
    ``spec.timeZone``."""
    meta = _meta(cronjob)
    spec = cronjob.get("spec") or {}
    template = spec.get("jobTemplate") or {}
    tmeta = template.get("metadata") or {}
    zone = sched.load_time_zone(spec.get("timeZone") or "")
    annotations = dict(tmeta.get("annotations") or {})
    local = scheduled.astimezone(zone)
    annotations[SCHEDULED_TIMESTAMP] = _rfc3339(local)
    body: Object = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(str(meta.get("name", "")), scheduled),
            "namespace": meta.get("namespace", ""),
            "labels": dict(tmeta.get("labels") or {}),
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "CronJob",
                    "name": meta.get("name", ""),
                    "uid": meta.get("uid", ""),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": copy_json(template.get("spec") or {}),
    }
    return body


def _rfc3339(when: datetime) -> str:
    """Go's ``time.RFC3339`` of ``when``: whole seconds, ``Z`` for any zero offset."""
    text = when.replace(microsecond=0).isoformat()
    offset = when.utcoffset()
    return text[:-6] + "Z" if offset is not None and not offset else text


def job_ref(job: Mapping[str, Any]) -> Object:
    """The entry of ``status.active`` naming ``job`` (upstream's ``ObjectReference``)."""
    meta = _meta(job)
    return {
        "kind": "Job",
        "namespace": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
        "apiVersion": "batch/v1",
        "resourceVersion": meta.get("resourceVersion", ""),
    }


# -- status ---------------------------------------------------------------------------


@dataclass
class Status:
    """The CronJob's status as the sync changes it, and its Events in order."""

    status: Object
    changed: bool = False
    events: list[Event] = field(default_factory=list)

    @classmethod
    def of(cls, cronjob: Mapping[str, Any]) -> Status:
        return cls(copy_json(dict(cronjob.get("status") or {})))

    @property
    def active(self) -> list[Object]:
        return list(self.status.get("active") or ())

    def lists(self, uid: str) -> bool:
        return any(ref.get("uid") == uid for ref in self.active)

    def lists_name(self, ns: str, name: str) -> bool:
        return any(r.get("name") == name and r.get("namespace") == ns for r in self.active)

    def forget(self, uid: str) -> None:
        """Take the Job of ``uid`` off the active list (upstream's ``deleteFromActiveList``:
        the list is then written even when empty)."""
        self.status["active"] = [r for r in self.active if r.get("uid") != uid]
        self.changed = True

    def add(self, job: Mapping[str, Any], scheduled: datetime) -> None:
        self.status["active"] = [*self.active, job_ref(job)]
        self.status["lastScheduleTime"] = format_time(scheduled)
        self.changed = True

    def event(self, etype: str, reason: str, message: str) -> None:
        self.events.append((etype, reason, message))


def reconcile_jobs(status: Status, jobs: Sequence[Object]) -> list[Object]:
    """The active list and ``lastSuccessfulTime`` against the CronJob's Jobs (upstream's
    first loop of ``syncCronJob``): a finished Job it lists leaves it (``SawCompletedJob``),
    a succeeded Job's completion time moves ``lastSuccessfulTime`` forward. Returns the
    unfinished Jobs it does not list, in order: the controller reads the CronJob afresh
    and records ``UnexpectedJob`` (:func:`unexpected`) for those the API server's copy
    does not list either."""
    strays: list[Object] = []
    for job in jobs:
        uid = _uid(job)
        condition = finished_condition(job)
        if condition is None:
            if not status.lists(uid):
                strays.append(job)
            continue
        if status.lists(uid):
            status.forget(uid)
            status.event(
                "Normal",
                "SawCompletedJob",
                f"Saw completed job: {_name(job)}, condition: {condition}",
            )
        if condition == "Complete":
            done = (job.get("status") or {}).get("completionTime")
            last = status.status.get("lastSuccessfulTime")
            if last is None:
                status.status["lastSuccessfulTime"] = done
                status.changed = True
            if done and (last is None or when(done) > when(last)):
                status.status["lastSuccessfulTime"] = done
                status.changed = True
    return strays


def unexpected(status: Status, job: Mapping[str, Any]) -> None:
    """Record the ``UnexpectedJob`` Event of an unfinished Job neither copy lists."""
    status.event(
        "Warning",
        "UnexpectedJob",
        f"Saw a job that the controller did not create or forgot: {_name(job)}",
    )


def missing_refs(status: Status, jobs: Sequence[Object]) -> list[Object]:
    """Entries of the active list no Job of the CronJob answers (by UID): the controller
    reads each from the API server and calls :func:`went_missing` when it is gone."""
    uids = {_uid(j) for j in jobs}
    return [ref for ref in status.active if ref.get("uid") not in uids]


def went_missing(status: Status, ref: Mapping[str, Any]) -> None:
    status.event("Normal", "MissingJob", f"Active job went missing: {ref.get('name', '')}")
    status.forget(str(ref.get("uid", "")))


# -- the schedule ---------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """What the schedule asks for now.

    ``run`` is the scheduled time to start a Job for (None: start none); ``replace``
    the active entries to delete first (``Replace``); ``requeue_after`` the seconds
    until the CronJob is synced again (None: not until it changes)."""

    run: datetime | None = None
    replace: tuple[Object, ...] = ()
    requeue_after: float | None = None


def _creation(cronjob: Mapping[str, Any]) -> datetime:
    return when(_meta(cronjob).get("creationTimestamp"))


def earliest(cronjob: Mapping[str, Any], status: Status) -> datetime:
    """``status.lastScheduleTime``, or the creation time when there is none."""
    last = status.status.get("lastScheduleTime")
    return when(last) if last else _creation(cronjob)


def parse_schedule(cronjob: Mapping[str, Any], status: Status) -> sched.Schedule | None:
    """The CronJob's schedule, upstream's ``formatSchedule`` then the parser:
    ``UnsupportedSchedule`` when it names ``TZ`` (then ``spec.timeZone`` is ignored),
    ``UnparseableSchedule`` and None when it does not parse."""
    spec = cronjob.get("spec") or {}
    text = str(spec.get("schedule") or "")
    zone: str | None = spec.get("timeZone")
    if sched.has_legacy_time_zone(text):
        status.event(
            "Warning",
            "UnsupportedSchedule",
            f"CRON_TZ or TZ used in schedule {go_quote(text)} is not officially supported, "
            "see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for "
            "more details",
        )
        zone = None
    try:
        return sched.parse(text, zone)
    except (sched.ScheduleError, sched.UnknownTimeZoneError) as err:
        status.event(
            "Warning", "UnparseableSchedule", f"unparseable schedule: {go_quote(text)} : {err}"
        )
        return None


def decide(cronjob: Mapping[str, Any], status: Status, now: datetime) -> Decision:
    """The rest of ``syncCronJob`` after the Jobs are reconciled: nothing while the
    CronJob is being deleted, has an unknown time zone (``UnknownTimeZone``), is
    suspended, or has a schedule that does not parse or fire (``UnparseableSchedule``,
    ``InvalidSchedule``); else the most recent time it should have fired, unless there
    is none, it is past ``startingDeadlineSeconds`` (``MissSchedule``), it was already
    started, or a Job still runs under ``Forbid`` (``JobAlreadyActive``). Too many missed
    times are reported (``TooManyMissedTimes``) but the most recent one still runs."""
    meta = _meta(cronjob)
    spec = cronjob.get("spec") or {}
    if meta.get("deletionTimestamp"):
        return Decision()
    zone = spec.get("timeZone")
    if zone is not None:
        try:
            sched.load_time_zone(zone)
        except sched.UnknownTimeZoneError as err:
            status.event("Warning", "UnknownTimeZone", f"invalid timeZone: {go_quote(zone)}: {err}")
            return Decision()
    if spec.get("suspend"):
        return Decision()
    schedule = parse_schedule(cronjob, status)
    if schedule is None:
        return Decision()
    start = earliest(cronjob, status)
    deadline = spec.get("startingDeadlineSeconds")
    try:
        found = sched.most_recent(schedule, start, now, deadline)
    except sched.InvalidScheduleError as err:
        status.event(
            "Warning", "InvalidSchedule", f"invalid schedule: {spec.get('schedule', '')} : {err}"
        )
        return Decision()

    def later() -> Decision:
        return Decision(requeue_after=sched.next_requeue(schedule, earliest(cronjob, status), now))

    scheduled = found.time
    if scheduled is None or scheduled > now:
        return later()
    if found.missed is sched.Missed.MANY:
        status.event(
            "Warning",
            "TooManyMissedTimes",
            "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or "
            "check clock skew",
        )
    if deadline is not None and (scheduled.timestamp() + int(deadline)) < now.timestamp():
        status.event(
            "Warning",
            "MissSchedule",
            "Missed scheduled time to start a job: "
            + scheduled.astimezone(UTC).strftime(_RFC1123Z),
        )
        return later()
    name = job_name(str(meta.get("name", "")), scheduled)
    last = status.status.get("lastScheduleTime")
    if status.lists_name(str(meta.get("namespace", "")), name) or (
        last and when(last) == scheduled
    ):
        return later()
    policy = spec.get("concurrencyPolicy") or "Allow"
    if policy == "Forbid" and status.active:
        status.event(
            "Normal",
            "JobAlreadyActive",
            "Not starting job because prior execution is running and concurrency policy is Forbid",
        )
        return later()
    replace = tuple(status.active) if policy == "Replace" else ()
    return Decision(run=scheduled, replace=replace)


def after_start(cronjob: Mapping[str, Any], status: Status, now: datetime) -> float | None:
    """Seconds to the next sync once a Job was started (or found) for the scheduled time
    (upstream's ``nextScheduleTimeDuration`` from the new ``lastScheduleTime``)."""
    schedule = parse_schedule_quietly(cronjob)
    if schedule is None:
        return None
    return sched.next_requeue(schedule, earliest(cronjob, status), now)


def parse_schedule_quietly(cronjob: Mapping[str, Any]) -> sched.Schedule | None:
    """The schedule as :func:`parse_schedule` reads it, without Events (None when it
    does not parse)."""
    return parse_schedule(cronjob, Status({}))
