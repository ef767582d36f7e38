"""The CronJob controller: CronJobs and the Jobs they control from the mirror,
:mod:`.sync`'s decisions, and the writes (Jobs created and deleted, the CronJob's status,
Events), as upstream's ``cronjob-controller`` (pkg/controller/cronjob/cronjob_controllerv2.go).

# One sync
In upstream's order: finished Jobs beyond the history limits are deleted (background
propagation; ``SuccessfulDelete`` / ``FailedDelete``); the active list is reconciled with
the Jobs (``SawCompletedJob``, ``UnexpectedJob`` after a fresh read of the CronJob,
``MissingJob`` after a fresh read of the Job) and ``lastSuccessfulTime`` moved forward;
then, unless the CronJob is being deleted, has an unknown time zone, is suspended or has
a schedule that does not parse, the most recent scheduled time is run if it is within
``startingDeadlineSeconds``, not run yet, and the concurrency policy allows (``Replace``
deletes the active Jobs first). The Job is named ``<cronjob>-<minutes since the epoch>``;
if that name exists already and the CronJob controls it, it is taken as started.
The status is written once, at the end, when anything changed; the CronJob is synced
again 100 ms after its next scheduled time.

# When a CronJob changes
As upstream's handlers: a new or deleted CronJob, or one whose spec other than the
schedule and time zone changed (or whose status changed), is synced at once; one whose
``spec.schedule`` or ``spec.timeZone`` changed is synced at the new schedule's next time
(``UnParseableCronJobSchedule`` when the new schedule does not parse). A change of a
Job the CronJob controls syncs the CronJob.

# Errors
A failed write of the status (a conflict included), a failed creation (``FailedCreate``,
except in a terminating namespace), a failed deletion of an active Job under ``Replace``
or a failed read ends the sync with an error after the status is written: the key is
retried with backoff. A failed deletion of an old finished Job is only its Event, as
upstream. Events are best effort.

# Traces
A Job's creation carries the trace of the sync that made it (its annotations), so the
Job controller's work on it continues that trace.

# What it reads
CronJobs whole (the status write is a copy of the mirror's object and the Jobs are made
from the template); of the Jobs a CronJob controls only :data:`JOB_FIELDS`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from prometheus_client import Histogram

import steward
from steward import (
    CRONJOBS,
    JOBS,
    ApiError,
    ApiStatusError,
    Change,
    ChangeKind,
    ControllerOptions,
    NotFoundError,
    Request,
    Result,
    error_message,
    namespace_terminating,
)
from steward.controllers.cronjob import schedule as sched
from steward.controllers.cronjob import sync
from steward.controllers.cronjob.sync import Status

log = logging.getLogger(__name__)

NAME = "cronjob"
"""The controller's name with the manager (kube-controller-manager's alias of its
``cronjob-controller``)."""
COMPONENT = "cronjob-controller"
"""The Events' source component, as upstream's."""
QUEUE = "cronjob"
"""Upstream's work queue name."""
WORKERS = 5
"""CronJobs synced at once (kube-controller-manager's ``--concurrent-cron-job-syncs``)."""

CREATION_SKEW = Histogram(
    "cronjob_controller_job_creation_skew_duration_seconds",
    "Time between when a cronjob is scheduled to be run, and when the corresponding job is created",
    buckets=[float(2**i) for i in range(10)],
)
"""Upstream's one metric, with its name, help text and buckets (1 s to 512 s)."""

JOB_FIELDS = (
    "metadata.ownerReferences",
    "metadata.deletionTimestamp",
    "status.conditions.type",
    "status.conditions.status",
    "status.startTime",
    "status.completionTime",
)
"""What the controller reads of a Job a CronJob controls: its controller (the index),
whether and how it finished, when it started (history order) and completed
(``lastSuccessfulTime``)."""


def _rescheduled(change: Change) -> bool:
    """An update of a CronJob's ``spec.schedule`` or ``spec.timeZone``."""
    if change.kind is not ChangeKind.MODIFIED or change.old is None:
        return False
    old = change.old.object.get("spec") or {}
    new = change.obj.object.get("spec") or {}
    return bool(
        old.get("schedule") != new.get("schedule") or old.get("timeZone") != new.get("timeZone")
    )


def synced_at_once(change: Change) -> bool:
    """Every change of a CronJob but a new schedule (see :meth:`CronJobReconciler.observe`)."""
    return change.obj.type != CRONJOBS or not _rescheduled(change)


class CronJobReconciler:
    """Syncs one CronJob by key; see the module docs."""

    def __init__(
        self, ctx: steward.Context, clock: Callable[[], datetime] = steward.utc_now
    ) -> None:
        self.ctx = ctx
        self.mirror = ctx.mirror
        self.clock = clock
        self.events = ctx.event_recorder(COMPONENT, clock=clock)
        self.cronjobs = ctx.client(CRONJOBS)
        self.jobs = ctx.client(JOBS)

    def observe(self, change: Change) -> None:
        """A CronJob with a new schedule: synced at that schedule's next time, as
        upstream's ``updateCronJob`` (its other changes queue it at once)."""
        if change.obj.type != CRONJOBS or not _rescheduled(change):
            return
        cronjob = change.obj.object
        schedule = sync.parse_schedule_quietly(cronjob)
        if schedule is None:
            text = (cronjob.get("spec") or {}).get("schedule", "")
            self.events.event(
                cronjob,
                "Warning",
                "UnParseableCronJobSchedule",
                f"unparseable schedule for cronjob: {text}",
            )
            return
        now = self.clock()
        delay = sched.next_requeue(schedule, sync.earliest(cronjob, Status.of(cronjob)), now)
        self.ctx.enqueue(Request(change.obj.namespace, change.obj.name), delay or 0.0)

    async def reconcile(self, request: Request) -> Result:
        obj = self.mirror.get(CRONJOBS, request.namespace, request.name)
        if obj is None:
            return Result()
        cronjob = obj.object
        jobs = [o.object for o in self.mirror.by_index(JOBS, "controller", obj.meta.uid)]
        status = Status.of(cronjob)
        error: Exception | None = None
        requeue: float | None = None
        try:
            await self._cleanup(cronjob, status, jobs)
            requeue = await self._sync(cronjob, status, jobs)
        except ApiError as err:
            error = err
        finally:
            for etype, reason, message in status.events:
                self.events.event(cronjob, etype, reason, message)
        if status.changed:
            await self.cronjobs.update_status(cronjob, status.status)
        if requeue is not None:
            # Upstream's queue adds a key due now at once; a Result of 0 would be "done".
            return Result(requeue_after=max(requeue, 0.001))
        if error is not None:
            raise error
        return Result()

    async def _cleanup(
        self, cronjob: dict[str, Any], status: Status, jobs: list[dict[str, Any]]
    ) -> None:
        """Delete the finished Jobs beyond the history limits (a failure is its Event)."""
        for job in sync.history_victims(cronjob, jobs):
            await self._delete(status, job)

    async def _delete(self, status: Status, job: dict[str, Any]) -> bool:
        """Delete one Job with background propagation and take it off the active list
        (upstream's ``deleteJob``); False after a ``FailedDelete`` Event."""
        meta = job.get("metadata") or {}
        try:
            await self.jobs.delete(meta["namespace"], meta["name"], propagation="Background")
        except ApiError as err:
            status.event("Warning", "FailedDelete", f"Deleted job: {error_message(err)}")
            return False
        status.forget(str(meta.get("uid", "")))
        status.event("Normal", "SuccessfulDelete", f"Deleted job {meta['name']}")
        return True

    async def _sync(
        self, cronjob: dict[str, Any], status: Status, jobs: list[dict[str, Any]]
    ) -> float | None:
        """Upstream's ``syncCronJob``: the seconds to the next sync (None: none)."""
        meta = cronjob["metadata"]
        ns, name = meta["namespace"], meta["name"]
        strays = sync.reconcile_jobs(status, jobs)
        fresh: dict[str, Any] | None = None
        for job in strays:
            fresh = fresh or await self.cronjobs.get(ns, name)
            if not Status.of(fresh).lists(str(job["metadata"].get("uid", ""))):
                sync.unexpected(status, job)
        for ref in sync.missing_refs(status, jobs):
            try:
                await self.jobs.get(str(ref.get("namespace", ns)), str(ref.get("name", "")))
            except NotFoundError:
                sync.went_missing(status, ref)
        now = self.clock()
        decision = sync.decide(cronjob, status, now)
        if decision.run is None:
            return decision.requeue_after
        for ref in decision.replace:
            try:
                job = await self.jobs.get(str(ref.get("namespace", ns)), str(ref.get("name", "")))
            except ApiError as err:
                status.event("Warning", "FailedGet", f"Get job: {error_message(err)}")
                raise
            if not await self._delete(status, job):
                raise ApiError(f"could not replace job {ns}/{job['metadata']['name']}")
        body = sync.job_from_template(cronjob, decision.run)
        try:
            created = await self.jobs.create(body, namespace=ns, stamp_trace=True)
        except ApiError as err:
            if namespace_terminating(err):
                raise
            if not _already_exists(err):
                status.event("Warning", "FailedCreate", f"Error creating job: {error_message(err)}")
                raise
            created = await self.jobs.get(ns, body["metadata"]["name"])
            if not steward.is_controlled_by(created, cronjob) or status.lists(
                str(created["metadata"].get("uid", ""))
            ):
                return None
            log.info("cronjob %s/%s: job %s exists already", ns, name, body["metadata"]["name"])
        else:
            made = sync.when(created["metadata"].get("creationTimestamp"))
            CREATION_SKEW.observe((made - decision.run).total_seconds())
            status.event("Normal", "SuccessfulCreate", f"Created job {created['metadata']['name']}")
        status.add(created, decision.run)
        return sync.after_start(cronjob, status, now)


def _already_exists(err: ApiError) -> bool:
    return isinstance(err, ApiStatusError) and err.reason == "AlreadyExists"


CONTROLLER = (
    steward.ControllerBuilder[CronJobReconciler](NAME)
    .for_(CRONJOBS, synced_at_once)
    .owns(JOBS, fields=JOB_FIELDS)
    .observe(CronJobReconciler.observe)
    .with_index("controller", steward.index_by_controller)
    .with_options(ControllerOptions(max_concurrent_reconciles=WORKERS, queue_name=QUEUE))
    .beside_upstream(None)
    .describe(
        "Steward's CronJob controller: starts each batch/v1 CronJob's Jobs on its schedule "
        "(in spec.timeZone, else UTC), with its concurrency policy, starting deadline and "
        "history limits, as kube-controller-manager's cronjob-controller. Both would start "
        "the same Jobs, so it must not run beside upstream's."
    )
    .complete(CronJobReconciler)
)
"""The CronJob controller: CronJobs are the primary type, the Jobs they control are owned
(a change queues the CronJob) and indexed by their controller's UID."""
