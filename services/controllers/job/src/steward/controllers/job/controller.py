"""The Job controller: Jobs and their pods from the mirror, :mod:`.sync`'s decisions, and
the writes to the API server (pods, finalizers, status, Events).

# Which Jobs
A Job is reconciled only when :meth:`JobReconciler.manages` says so: its
``spec.managedBy`` is this controller's name (``--managed-by``,
``steward.io/job-controller`` by default), or it has none and the controller takes
unmanaged Jobs (``--take-unmanaged``, the default, for a cluster where upstream's job
controller is off). A Job managed by anyone else is never touched, nor are its pods.

# Errors
Every write is checked. A status write that hits a conflict (the Job changed since the
mirror showed it) ends the sync with a rate-limited requeue; the next sync starts over
from fresh state, which is safe because pods are only counted once their UIDs are durably
in ``status.uncountedTerminatedPods`` and their finalizer is gone. A failed adoption or
release, a failed pod creation (which stops the remaining slow-start batches), deletion
or finalizer removal makes the sync raise, so the key is retried with backoff; failed
writes are un-expected at once. Events are best effort: a failure to record one is
logged, never retried.

# What it reads
Jobs whole (a status write is a copy of the mirror's object); of a pod only
:data:`POD_FIELDS`, which is all the mirror holds of it. Pods are only created, patched
(adoption and release, the tracking finalizer's removal: patches that name what they
change, nothing read) and deleted, never written back from the mirror's copy.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

import steward
from steward import (
    JOBS,
    PODS,
    ApiError,
    Change,
    ChangeKind,
    ConflictError,
    ControllerOptions,
    MirrorObject,
    NotFoundError,
    Request,
    Result,
)
from steward.controllers.job import pods
from steward.controllers.job.pods import TRACKING_FINALIZER
from steward.controllers.job.sync import (
    DEFAULT_BACKOFF,
    MAX_BACKOFF,
    BackoffRecord,
    JobSync,
    job_finished,
)

NAME = "job"
"""The controller's name with the manager (as in kube-controller-manager's --controllers)."""
MANAGED_BY = "steward.io/job-controller"
"""The default ``spec.managedBy`` value this controller answers to."""

POD_FIELDS = (
    "metadata.labels",
    "metadata.annotations",
    "metadata.ownerReferences",
    "metadata.finalizers",
    "metadata.deletionTimestamp",
    "metadata.creationTimestamp",
    "spec.nodeName",
    "status.phase",
    "status.conditions.type",
    "status.conditions.status",
    "status.conditions.lastTransitionTime",
    "status.containerStatuses.name",
    "status.containerStatuses.restartCount",
    "status.containerStatuses.state.terminated.exitCode",
    "status.containerStatuses.state.terminated.finishedAt",
    "status.initContainerStatuses.name",
    "status.initContainerStatuses.restartCount",
    "status.initContainerStatuses.state.terminated.exitCode",
)
"""What the controller reads of a pod (one a Job controls, or an orphan): its labels and
controller (the claim), completion index and index failure counts (annotations), tracking
finalizer, deletion mark and phase; its conditions (Ready, the podFailurePolicy's
``onPodConditions``, the finish time when no container says it); of each container its
name, restarts (``backoffLimit`` with ``OnFailure``, removal order) and, once terminated,
its exit code (``onExitCodes``) and finish time; of each init container its name,
restarts and exit code; and the node and creation time (removal order). A container's
state while waiting or running, its image and IDs never arrive."""

JobKey = tuple[str, str]
"""(namespace, name) of a Job: the key of its expectations and backoff."""


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= MAX_BACKOFF:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most {MAX_BACKOFF:.0f}")
    return value


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The Job controller's own flags: which Jobs it manages, how long it backs off."""
    parser.add_argument(
        "--managed-by",
        default=MANAGED_BY,
        help=f"manage Jobs whose spec.managedBy is this (default {MANAGED_BY})",
    )
    parser.add_argument(
        "--take-unmanaged",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also manage Jobs without spec.managedBy (default: yes; say --no-take-unmanaged "
        "when upstream's job controller runs too)",
    )
    parser.add_argument(
        "--pod-failure-backoff",
        type=_seconds,
        default=DEFAULT_BACKOFF,
        metavar="SECONDS",
        help=f"wait this long before re-creating a Job's failed pod, doubling with each "
        f"further failure up to {MAX_BACKOFF:.0f} s (default {DEFAULT_BACKOFF:.0f}, upstream's "
        "fixed DefaultJobPodFailureBackOff; shorter only to test)",
    )


def _by_job(obj: MirrorObject) -> Iterable[str]:
    """Index of pods by their controlling Job: ``namespace/name``."""
    if obj.type != PODS:
        return ()
    ref = steward.owner_of(obj, JOBS)
    return (f"{ref.namespace}/{ref.name}",) if ref is not None else ()


class JobReconciler:
    """Reconciles one Job by key; see the module docs.

    Keeps the pod re-creation backoff records in memory, beside the controller's
    expectations (creations and deletions lowered by the runtime as the mirror shows the
    pods, ``owns(..., expect=True)``; finalizer removals by :meth:`observe`); both are
    rebuilt safely after a restart (expectations start satisfied, backoff starts from the
    pods' status).
    """

    def __init__(
        self, ctx: steward.Context, clock: Callable[[], datetime] = steward.utc_now
    ) -> None:
        self.ctx = ctx
        self.mirror = ctx.mirror
        self.managed_by: str = ctx.flags.managed_by
        self.take_unmanaged: bool = ctx.flags.take_unmanaged
        self.backoff_base: float = ctx.flags.pod_failure_backoff
        self.clock = clock
        self.expectations = ctx.expectations
        self.backoffs: dict[JobKey, BackoffRecord] = {}
        self.events = ctx.event_recorder("job-controller", self.managed_by, clock=clock)
        self.jobs = ctx.client(JOBS)
        self.pods = ctx.children(PODS, events=self.events, finalizers=[TRACKING_FINALIZER])
        self._ours: dict[JobKey, str] = {}
        """UIDs of the Jobs this controller manages (including deleted ones not yet
        cleaned up), by key."""

    def manages(self, job: dict[str, Any]) -> bool:
        """Whether this controller owns the Job's reconciliation (``spec.managedBy``)."""
        managed_by = (job.get("spec") or {}).get("managedBy")
        if not managed_by:
            return self.take_unmanaged
        return bool(managed_by == self.managed_by)

    # Expectations from the mirror -------------------------------------------------------
    def observe(self, change: Change) -> None:
        """Lower the expectations of the pod's Job as finalizer removals show up in the
        mirror (as upstream, by the pod's controller reference, the Job unresolved), and
        remember which Jobs are ours."""
        obj = change.obj
        if obj.type == JOBS:
            # Remember which Jobs are ours, so that once one is deleted its pods'
            # finalizers are cleared only if it was.
            if change.kind is not ChangeKind.DELETED and not self.manages(obj.object):
                self._ours.pop(obj.key, None)
            elif self.manages(obj.object):
                self._ours[obj.key] = obj.meta.uid
            return
        ref = steward.owner_of(obj, JOBS) if obj.type == PODS else None
        if ref is None:
            return
        meta = obj.meta  # the informer's parsed metadata: no decoding on this hot path
        if change.kind is ChangeKind.DELETED or TRACKING_FINALIZER not in meta.finalizers:
            self.expectations.removal_observed(ref.key, meta.uid)

    # Reconcile --------------------------------------------------------------------------
    async def reconcile(self, request: Request) -> Result:
        """Sync one Job (see the module docs for what happens on errors)."""
        ns, name = request.namespace, request.name
        key: JobKey = (ns, name)
        obj = self.mirror.get(JOBS, ns, name)
        if obj is None:
            self.expectations.forget(key)
            self.backoffs.pop(key, None)
            gone_uid = self._ours.get(key)
            if gone_uid is not None or self.take_unmanaged:
                # A Job of ours is gone (or, when we take unmanaged Jobs, one we cannot
                # tell): its pods must not keep the finalizer. Another manager's, never.
                await self._clear_orphans(ns, name, None, only_uid=gone_uid)
            self._ours.pop(key, None)
            return Result()
        job = obj.object
        if not self.manages(job):
            return Result()
        if job_finished(job):
            self.backoffs.pop(key, None)
            await self._clear_orphans(ns, name, None)
            return Result()
        await self._clear_orphans(ns, name, str(job["metadata"].get("uid", "")))
        satisfied = self.expectations.satisfied(key)
        candidates = [
            *self.mirror.by_index(PODS, "job", f"{ns}/{name}"),
            *self.mirror.by_index(PODS, "orphan", ns),
        ]
        owned = await self.pods.claim(job, [o.object for o in candidates])
        sync = JobSync(
            job,
            owned,
            self.clock(),
            expectations_satisfied=satisfied,
            expected_removals=self.expectations.removals(key),
            backoff=self.backoffs.get(key),
            backoff_base=self.backoff_base,
        )
        plan = sync.plan()
        if plan.create and counted_behind(job, owned) and not await self.ctx.is_current(job):
            return Result()  # the Job's newer version is on its way to the mirror
        errors: list[Exception] = []
        created = deleted = 0
        if plan.delete:
            outcome = await self.pods.delete_all(job, plan.delete)
            deleted, errors = outcome.succeeded, outcome.errors
        elif plan.create:
            outcome = await self.pods.create_all(job, plan.create)
            created, errors = outcome.succeeded, outcome.errors
        tracking = sync.track(created, deleted, plan)
        try:
            if tracking.flush_first:
                job = await self._write_status(job, tracking.status)
            removed = await self._remove_finalizers(key, tracking.remove_finalizers, errors)
            final = sync.finish(removed)
            if final.write:
                job = await self._write_status(job, final.status)
        except ConflictError:
            return Result(requeue=True)  # changed meanwhile: the next sync sees the new state
        self.backoffs[key] = sync.new_backoff
        for etype, reason, message in [*plan.events, *final.events]:
            self.events.event(job, etype, reason, message)
        if errors:
            raise errors[0]
        return Result(requeue_after=plan.requeue_after or 0.0)

    async def _clear_orphans(
        self, ns: str, name: str, job_uid: str | None, only_uid: str | None = None
    ) -> None:
        """Remove the tracking finalizer from pods of a Job that is gone or finished
        (``job_uid`` None; only those of Job ``only_uid`` if given), or of an earlier Job
        of the same name (any other UID than ``job_uid``)."""
        stale = []
        for obj in self.mirror.by_index(PODS, "job", f"{ns}/{name}"):
            ref = obj.controller_owner()
            if ref is None or (job_uid is not None and ref.uid == job_uid):
                continue
            if only_uid is not None and ref.uid != only_uid:
                continue
            if pods.has_finalizer(obj.object):
                stale.append(obj.object)
        errors: list[Exception] = []
        await self._remove_finalizers((ns, name), stale, errors)
        if errors:
            raise errors[0]

    async def _remove_finalizers(
        self, key: JobKey, victims: list[dict[str, Any]], errors: list[Exception]
    ) -> set[str]:
        """Remove the tracking finalizer; returns the UIDs it is gone from (404 included)."""
        if not victims:
            return set()
        uids = {pods.uid(p) for p in victims}
        self.expectations.expect_removals(key, uids)

        async def one(pod: dict[str, Any]) -> str | None:
            try:
                await self.pods.remove_finalizers(pod)
            except NotFoundError:
                return pods.uid(pod)
            except ApiError as err:
                self.expectations.removal_observed(key, pods.uid(pod))
                errors.append(err)
                return None
            return pods.uid(pod)

        try:
            results = await asyncio.gather(*(one(p) for p in victims))
        except asyncio.CancelledError:
            for uid in uids:  # outcome unknown: the next sync sees each pod as it is
                self.expectations.removal_observed(key, uid)
            raise
        return {u for u in results if u is not None}

    async def _write_status(self, job: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """Write the status (a conflict raises: the sync ends and starts over)."""
        return await self.jobs.update_status(job, status)


def counted_behind(job: dict[str, Any], owned: Sequence[dict[str, Any]]) -> bool:
    """Whether the Job's status may be older than its pods: more of them finished without
    the tracking finalizer (and are not in ``uncountedTerminatedPods``) than the status
    counts. A pod loses the finalizer only after the status recorded it, so a status that
    does not count it was read before that write (the mirror's read-your-writes guard
    covers this instance's own writes, not a previous instance's); creating pods from it
    would exceed the completions. (A pod that finished without ever having the finalizer
    makes this true as well; the caller then checks the API server's version before
    acting.)"""
    status = job.get("status") or {}
    uncounted = status.get("uncountedTerminatedPods") or {}
    listed = {*(uncounted.get("succeeded") or ()), *(uncounted.get("failed") or ())}
    finished = sum(
        1
        for p in owned
        if steward.pods.is_terminal(p) and not pods.has_finalizer(p) and pods.uid(p) not in listed
    )
    return finished > int(status.get("succeeded") or 0) + int(status.get("failed") or 0)


CONTROLLER = (
    steward.ControllerBuilder[JobReconciler](NAME)
    .for_(JOBS)
    .owns(PODS, expect=True, orphans=True, fields=POD_FIELDS)  # orphans: it adopts them
    .flags(add_flags)
    .beside_upstream(["--no-take-unmanaged"], alone=["--take-unmanaged"])
    .observe(JobReconciler.observe)
    .with_index("job", _by_job)
    .with_index("orphan", steward.orphan_index(PODS))
    .with_options(ControllerOptions(max_concurrent_reconciles=5))
    .describe(
        "Steward's Job controller: runs each batch/v1 Job's pods to completion, tracking "
        "them with the batch.kubernetes.io/job-tracking finalizer, as upstream's does."
    )
    .complete(JobReconciler)
)
"""The Job controller: Jobs are the primary type, pods are owned (a pod change lowers its
Job's expectations, then queues it) and indexed by controlling Job, orphans by
namespace. It receives only the pods Jobs control and orphans."""
