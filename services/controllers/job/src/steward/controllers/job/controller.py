"""The Job controller service: Jobs and their pods from the mirror, :mod:`.sync`'s
decisions, and the writes to the API server (pods, finalizers, status, Events).

# Which Jobs
A Job is reconciled only when :meth:`JobReconciler.manages` says so: its
``spec.managedBy`` is this controller's name (``steward.io/job-controller`` by default),
or it has none and the controller is told to take unmanaged Jobs (the default, for a
cluster where upstream's job controller is off). A Job managed by anyone else is never
touched, nor are its pods.

# Errors
Every write is checked. A status write that hits a conflict (the Job changed since the
mirror showed it) ends the sync with a rate-limited requeue; the next sync starts over
from fresh state, which is safe because pods are only counted once their UIDs are durably
in ``status.uncountedTerminatedPods`` and their finalizer is gone. A failed pod creation
stops the remaining slow-start batches; failed creations, deletions and finalizer
removals are un-expected at once and the sync raises, so the key is retried with backoff.
Events are best effort: a failure to record one is logged, never retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import grpc

from steward.controllers.job import pods
from steward.controllers.job.expectations import Expectations, JobKey
from steward.controllers.job.pods import TRACKING_FINALIZER
from steward.controllers.job.sync import (
    BackoffRecord,
    JobSync,
    job_finished,
    slow_start_batches,
)
from steward.kube import ApiError, ApiStatusError, ConflictError, KubeClient, NotFoundError
from steward.runtime import Request, Result, TraceContext
from steward.runtime.controller import Controller, ControllerBuilder, ControllerOptions
from steward.runtime.events import EventRecorder
from steward.runtime.mirror import Change, ChangeKind, Mirror, MirrorObject, resource_type
from steward.runtime.tracing import outgoing_headers

log = logging.getLogger(__name__)

NAME = "job"
"""The controller's name with the manager (as in kube-controller-manager's --controllers)."""
MANAGED_BY = "steward.io/job-controller"
"""The default ``spec.managedBy`` value this controller answers to."""
JOBS = resource_type("batch", "v1", "jobs")
PODS = resource_type("", "v1", "pods")
_PODS_KEY = ("", "v1", "pods")
_JOBS_KEY = ("batch", "v1", "jobs")
_REMOVE_FINALIZER = {"metadata": {"$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]}}


@dataclass
class JobControllerOptions:
    """How the Job controller decides which Jobs are its own. Defaults as stated."""

    managed_by: str = MANAGED_BY
    """Manage Jobs whose ``spec.managedBy`` is this. Defaults to ``steward.io/job-controller``."""
    take_unmanaged: bool = True
    """Also manage Jobs without ``spec.managedBy``. Defaults to True (for a cluster where
    upstream's job controller is off); set False when both run side by side."""


def _job_owner(obj: MirrorObject) -> str | None:
    ref = obj.controller_owner()
    if ref is None or ref.kind != "Job" or not ref.api_version.startswith("batch/"):
        return None
    return ref.name


def _by_job(obj: MirrorObject) -> Iterable[str]:
    """Index of pods by their controlling Job: ``namespace/name``."""
    if obj.type != _PODS_KEY:
        return ()
    owner = _job_owner(obj)
    return (f"{obj.namespace}/{owner}",) if owner else ()


def _orphans(obj: MirrorObject) -> Iterable[str]:
    """Index of pods without a controlling owner, by namespace (adoption candidates)."""
    if obj.type != _PODS_KEY or obj.controller_owner() is not None:
        return ()
    return (obj.namespace,)


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """Whether ``labels`` match a Kubernetes label selector (matchLabels and
    matchExpressions). A missing or empty selector matches nothing, as for a Job; an
    unknown operator matches nothing."""
    if not selector:
        return False
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not match_labels and not expressions:
        return False
    for key, value in match_labels.items():
        if labels.get(key) != value:
            return False
    for expr in expressions:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In":
            ok = key in labels and labels[key] in values
        elif op == "NotIn":
            ok = key not in labels or labels[key] not in values
        elif op == "Exists":
            ok = key in labels
        elif op == "DoesNotExist":
            ok = key not in labels
        else:
            return False
        if not ok:
            return False
    return True


class JobReconciler:
    """Reconciles one Job by key; see the module docs.

    Keeps per-Job expectations (fed by :meth:`observe`, registered on the mirror) and the
    pod re-creation backoff records in memory; both are rebuilt safely after a restart
    (expectations start satisfied, backoff starts from the pods' status).
    """

    def __init__(
        self,
        mirror: Mirror,
        api: KubeClient,
        options: JobControllerOptions | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.mirror = mirror
        self.api = api
        self.options = options or JobControllerOptions()
        self.clock = clock
        self.expectations = Expectations()
        self.backoffs: dict[JobKey, BackoffRecord] = {}
        self.events = EventRecorder(
            api,
            api_version="batch/v1",
            kind="Job",
            component="job-controller",
            reporting_component=self.options.managed_by,
            clock=clock,
        )
        self._ours: dict[JobKey, str] = {}
        """UIDs of the Jobs this controller manages (including deleted ones not yet
        cleaned up), by key."""
        self._superseded: dict[JobKey, set[str]] = {}
        """Per Job, the resource versions our status writes replaced since the mirror last
        showed a newer one: while the mirror shows one of them, it is behind our own write
        and a sync would count from a stale status; the write's own event brings the Job
        back. A sync can write twice (new uncounted pods, then their counts), so the
        version before its last write is not the only stale one."""
        mirror.add_handler(self.observe)

    def manages(self, job: dict[str, Any]) -> bool:
        """Whether this controller owns the Job's reconciliation (``spec.managedBy``)."""
        managed_by = (job.get("spec") or {}).get("managedBy")
        if not managed_by:
            return self.options.take_unmanaged
        return bool(managed_by == self.options.managed_by)

    # Expectations from the mirror -------------------------------------------------------
    def observe(self, change: Change) -> None:
        """Lower the expectations of the pod's Job as creations, deletions and finalizer
        removals show up in the mirror."""
        obj = change.obj
        if obj.type == _JOBS_KEY:
            # Remember which Jobs are ours, so that once one is deleted its pods'
            # finalizers are cleared only if it was.
            if change.kind is not ChangeKind.DELETED and not self.manages(obj.object):
                self._ours.pop(obj.key, None)
            elif self.manages(obj.object):
                self._ours[obj.key] = obj.meta.uid
            return
        if obj.type != _PODS_KEY:
            return
        owner = _job_owner(obj)
        if owner is None:
            return
        key = (obj.namespace, owner)
        meta = obj.meta
        deleting = bool(obj.object["metadata"].get("deletionTimestamp"))
        if change.kind is ChangeKind.ADDED:
            self.expectations.creation_observed(key)
            if deleting:
                self.expectations.deletion_observed(key)
        elif change.kind is ChangeKind.MODIFIED:
            old = change.old
            was_deleting = old is not None and bool(old.object["metadata"].get("deletionTimestamp"))
            if deleting and not was_deleting:
                self.expectations.deletion_observed(key)
        else:
            if not deleting:
                self.expectations.deletion_observed(key)
            self.expectations.removal_observed(key, meta.uid)
            return
        if TRACKING_FINALIZER not in obj.object["metadata"].get("finalizers", ()):
            self.expectations.removal_observed(key, meta.uid)

    # Reconcile --------------------------------------------------------------------------
    async def reconcile(self, request: Request, contexts: Sequence[TraceContext]) -> Result:
        """Sync one Job (see the module docs for what happens on errors)."""
        ns, name = request.namespace, request.name
        key: JobKey = (ns, name)
        # Extra request headers; KubeClient adds each request's own traceparent (a client
        # span under this reconcile's span), so the API server's spans join the trace.
        headers: dict[str, str] = {}
        obj = self.mirror.get(JOBS, ns, name)
        if obj is None:
            self.expectations.forget(key)
            self.backoffs.pop(key, None)
            self._superseded.pop(key, None)
            gone_uid = self._ours.get(key)
            if gone_uid is not None or self.options.take_unmanaged:
                # A Job of ours is gone (or, when we take unmanaged Jobs, one we cannot
                # tell): its pods must not keep the finalizer. Another manager's, never.
                await self._clear_orphans(ns, name, None, headers, only_uid=gone_uid)
            self._ours.pop(key, None)
            return Result()
        job = obj.object
        if not self.manages(job):
            return Result()
        if obj.resource_version in self._superseded.get(key, ()):
            return Result()  # our newer write is on its way to the mirror
        self._superseded.pop(key, None)
        job_uid = str(job["metadata"].get("uid", ""))
        if job_finished(job):
            self.backoffs.pop(key, None)
            await self._clear_orphans(ns, name, None, headers)
            return Result()
        await self._clear_orphans(ns, name, job_uid, headers)
        satisfied = self.expectations.satisfied(key)
        owned = await self._claim(job, headers)
        sync = JobSync(
            job,
            owned,
            self.clock(),
            expectations_satisfied=satisfied,
            expected_removals=self.expectations.removals(key),
            backoff=self.backoffs.get(key),
        )
        plan = sync.plan()
        if plan.create and counted_behind(job, owned) and await self._behind_server(job):
            return Result()  # the Job's newer version is on its way to the mirror
        errors: list[Exception] = []
        created = deleted = 0
        if plan.delete:
            deleted = await self._delete(job, key, plan.delete, errors, headers)
        elif plan.create:
            created = await self._create(job, key, plan.create, errors, headers)
        tracking = sync.track(created, deleted, plan)
        try:
            if tracking.flush_first:
                job = await self._write_status(job, tracking.status, headers)
            removed = await self._remove_finalizers(
                key, tracking.remove_finalizers, errors, headers
            )
            final = sync.finish(removed)
            if final.write:
                job = await self._write_status(job, final.status, headers)
        except ConflictError:
            return Result(requeue=True)  # changed meanwhile: the next sync sees the new state
        self.backoffs[key] = sync.new_backoff
        for etype, reason, message in [*plan.events, *final.events]:
            self.events.event(job, etype, reason, message)
        if errors:
            raise errors[0]
        return Result(requeue_after=plan.requeue_after or 0.0)

    async def _behind_server(self, job: dict[str, Any]) -> bool:
        """Whether the API server has a newer version of the Job than ``job``."""
        meta = job["metadata"]
        try:
            fresh = await self.api.arequest(
                "GET", f"/apis/batch/v1/namespaces/{meta['namespace']}/jobs/{meta['name']}"
            )
        except NotFoundError:
            return True  # gone: its deletion is on its way to the mirror
        fresh_meta = fresh.get("metadata") or {}
        return bool(fresh_meta.get("resourceVersion") != meta.get("resourceVersion"))

    async def _claim(self, job: dict[str, Any], headers: dict[str, str]) -> list[dict[str, Any]]:
        """The Job's pods: those it controls and whose labels match its selector; orphans
        that match are adopted (after a fresh read of the Job), controlled pods that no
        longer match are released."""
        meta = job["metadata"]
        ns, name, job_uid = meta["namespace"], meta["name"], meta.get("uid", "")
        selector = (job.get("spec") or {}).get("selector")
        being_deleted = bool(meta.get("deletionTimestamp"))
        owned: list[dict[str, Any]] = []
        for obj in self.mirror.by_index(PODS, "job", f"{ns}/{name}"):
            ref = obj.controller_owner()
            if ref is None or ref.uid != job_uid:
                continue
            pod = obj.object
            if selector_matches(selector, dict(obj.meta.labels)) or being_deleted:
                owned.append(pod)
            elif not pods.deleting(pod):
                await self._release(pod, job_uid, headers)
        if being_deleted:
            return owned
        candidates = [
            o.object
            for o in self.mirror.by_index(PODS, "orphan", ns)
            if selector_matches(selector, dict(o.meta.labels)) and not pods.deleting(o.object)
        ]
        if candidates and await self._can_adopt(ns, name, job_uid):
            for pod in candidates:
                adopted = await self._adopt(job, pod, headers)
                if adopted is not None:
                    owned.append(adopted)
        return owned

    async def _can_adopt(self, ns: str, name: str, job_uid: str) -> bool:
        try:
            fresh = await self.api.arequest("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/{name}")
        except NotFoundError:
            return False
        fmeta = fresh.get("metadata") or {}
        return fmeta.get("uid") == job_uid and not fmeta.get("deletionTimestamp")

    async def _adopt(
        self, job: dict[str, Any], pod: dict[str, Any], headers: dict[str, str]
    ) -> dict[str, Any] | None:
        meta = pod["metadata"]
        jmeta = job["metadata"]
        refs = [*(meta.get("ownerReferences") or ())]
        refs.append(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": jmeta["name"],
                "uid": jmeta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        )
        finalizers = list(meta.get("finalizers") or ())
        if TRACKING_FINALIZER not in finalizers:
            finalizers.append(TRACKING_FINALIZER)
        patch = {
            "metadata": {
                "ownerReferences": refs,
                "finalizers": finalizers,
                "resourceVersion": meta.get("resourceVersion"),
            }
        }
        try:
            return await self.api.arequest(
                "PATCH",
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                patch,
                content_type="application/merge-patch+json",
                headers=headers,
            )
        except (NotFoundError, ConflictError):
            return None  # gone or changed: the next sync looks again

    async def _release(self, pod: dict[str, Any], job_uid: str, headers: dict[str, str]) -> None:
        meta = pod["metadata"]
        patch = {
            "metadata": {
                "ownerReferences": [
                    r for r in meta.get("ownerReferences") or () if r.get("uid") != job_uid
                ],
                "finalizers": [f for f in meta.get("finalizers") or () if f != TRACKING_FINALIZER],
                "resourceVersion": meta.get("resourceVersion"),
            }
        }
        with contextlib.suppress(NotFoundError, ConflictError):
            await self.api.arequest(
                "PATCH",
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                patch,
                content_type="application/merge-patch+json",
                headers=headers,
            )

    async def _clear_orphans(
        self,
        ns: str,
        name: str,
        job_uid: str | None,
        headers: dict[str, str],
        only_uid: str | None = None,
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
        await self._remove_finalizers((ns, name), stale, errors, headers)
        if errors:
            raise errors[0]

    async def _create(
        self,
        job: dict[str, Any],
        key: JobKey,
        bodies: list[dict[str, Any]],
        errors: list[Exception],
        headers: dict[str, str],
    ) -> int:
        """Create pods in slow-start batches; a failed batch stops the rest. Returns how
        many were created."""
        ns = job["metadata"]["namespace"]
        self.expectations.expect(key, adds=len(bodies))
        created = 0
        settled = 0
        """Creations whose expectation is accounted for: created (the pod's event lowers
        it) or failed (lowered here)."""
        queue = list(bodies)
        try:
            for size in slow_start_batches(len(bodies)):
                batch, queue = queue[:size], queue[size:]
                results = await asyncio.gather(
                    *(self._create_one(job, ns, body, headers) for body in batch)
                )
                failed = [r for r in results if r is not None]
                created += len(batch) - len(failed)
                settled += len(batch)
                for err in failed:
                    self.expectations.creation_observed(key)
                    errors.append(err)
                if failed:
                    break
        finally:
            # Never attempted, or cancelled with the outcome unknown (the instance stopped
            # being active mid-sync): expecting them would stall the Job until the
            # expectations expire; a pod that was created after all is seen next sync.
            for _ in range(len(bodies) - settled):
                self.expectations.creation_observed(key)
        return created

    async def _create_one(
        self, job: dict[str, Any], ns: str, body: dict[str, Any], headers: dict[str, str]
    ) -> Exception | None:
        # The pod carries this reconcile's trace context (KEP-5915's annotation), so its
        # later events (kwok running and completing it) continue the same trace.
        context = outgoing_headers()
        if context:
            meta = body.setdefault("metadata", {})
            meta["annotations"] = {**(meta.get("annotations") or {}), **context}
        try:
            pod = await self.api.arequest(
                "POST", f"/api/v1/namespaces/{ns}/pods", body, headers=headers
            )
        except ApiError as err:
            if isinstance(err, ApiStatusError) and "being terminated" in err.message:
                return None  # namespace going away: every creation would fail
            self.events.event(job, "Warning", "FailedCreate", f"Error creating: {err}")
            return err
        self.events.event(job, "Normal", "SuccessfulCreate", f"Created pod: {pods.name(pod)}")
        return None

    async def _delete(
        self,
        job: dict[str, Any],
        key: JobKey,
        victims: list[dict[str, Any]],
        errors: list[Exception],
        headers: dict[str, str],
    ) -> int:
        """Delete pods (their finalizer removed first, so they are not counted as failed).
        Returns how many are gone or going."""
        self.expectations.expect(key, dels=len(victims))
        try:
            results = await asyncio.gather(
                *(self._delete_one(job, key, p, headers) for p in victims)
            )
        except asyncio.CancelledError:
            # Outcome unknown; each deletion that did happen is seen next sync.
            for _ in victims:
                self.expectations.deletion_observed(key)
            raise
        for err in results:
            if err is not None:
                errors.append(err)
        return sum(1 for r in results if r is None)

    async def _delete_one(
        self, job: dict[str, Any], key: JobKey, pod: dict[str, Any], headers: dict[str, str]
    ) -> Exception | None:
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        try:
            if pods.has_finalizer(pod):
                await self.api.arequest(
                    "PATCH",
                    path,
                    _REMOVE_FINALIZER,
                    content_type="application/strategic-merge-patch+json",
                    headers=headers,
                )
            await self.api.arequest("DELETE", path, headers=headers)
        except NotFoundError:
            self.expectations.deletion_observed(key)
            return None
        except ApiError as err:
            self.expectations.deletion_observed(key)
            self.events.event(job, "Warning", "FailedDelete", f"Error deleting: {err}")
            return err
        self.events.event(job, "Normal", "SuccessfulDelete", f"Deleted pod: {meta['name']}")
        return None

    async def _remove_finalizers(
        self,
        key: JobKey,
        victims: list[dict[str, Any]],
        errors: list[Exception],
        headers: dict[str, str],
    ) -> set[str]:
        """Remove the tracking finalizer; returns the UIDs it is gone from (404 included)."""
        if not victims:
            return set()
        uids = {pods.uid(p) for p in victims}
        self.expectations.expect_removals(key, uids)

        async def one(pod: dict[str, Any]) -> str | None:
            meta = pod["metadata"]
            try:
                await self.api.arequest(
                    "PATCH",
                    f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                    _REMOVE_FINALIZER,
                    content_type="application/strategic-merge-patch+json",
                    headers=headers,
                )
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

    async def _write_status(
        self, job: dict[str, Any], status: dict[str, Any], headers: dict[str, str]
    ) -> dict[str, Any]:
        meta = job["metadata"]
        body = {**job, "status": status}
        written = await self.api.arequest(
            "PUT",
            f"/apis/batch/v1/namespaces/{meta['namespace']}/jobs/{meta['name']}/status",
            body,
            headers=headers,
        )
        before = meta.get("resourceVersion", "")
        if (written.get("metadata") or {}).get("resourceVersion") != before:
            self._superseded.setdefault((meta["namespace"], meta["name"]), set()).add(before)
        return written


def counted_behind(job: dict[str, Any], owned: Sequence[dict[str, Any]]) -> bool:
    """Whether the Job's status may be older than its pods: more of them finished without
    the tracking finalizer (and are not in ``uncountedTerminatedPods``) than the status
    counts. A pod loses the finalizer only after the status recorded it, so a status that
    does not count it was read before that write; creating pods from it would exceed the
    completions. (A pod that finished without ever having the finalizer makes this true
    as well; the caller then checks the API server's version before acting.)"""
    status = job.get("status") or {}
    uncounted = status.get("uncountedTerminatedPods") or {}
    listed = {*(uncounted.get("succeeded") or ()), *(uncounted.get("failed") or ())}
    finished = sum(
        1
        for p in owned
        if pods.terminal(p) and not pods.has_finalizer(p) and pods.uid(p) not in listed
    )
    return finished > int(status.get("succeeded") or 0) + int(status.get("failed") or 0)


def build(
    channel: grpc.aio.Channel,
    api: KubeClient,
    options: ControllerOptions | None = None,
    job_options: JobControllerOptions | None = None,
    name: str = NAME,
) -> Controller:
    """The Job controller, wired: Jobs are the primary type, pods are owned (a pod change
    enqueues its Job); pods are indexed by controlling Job and orphans by namespace."""
    return (
        ControllerBuilder(name)
        .for_(JOBS, kind="Job")
        .owns(PODS)
        .with_index("job", _by_job)
        .with_index("orphan", _orphans)
        .with_options(options or ControllerOptions(max_concurrent_reconciles=5))
        .complete(channel, lambda mirror: JobReconciler(mirror, api, job_options))
    )
