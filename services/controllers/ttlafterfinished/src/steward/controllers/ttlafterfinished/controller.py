"""The TTL-after-finished controller: a finished Job with ``spec.ttlSecondsAfterFinished``
deleted, with its dependents, once that many seconds have passed since it finished, as
upstream's ``ttl-after-finished-controller``
(pkg/controller/ttlafterfinished/ttlafterfinished_controller.go).

# A sync
Keyed by the Job's namespace and name. A Job the mirror does not hold, that is being
deleted already, that has no TTL or that has not finished is done (decisions in
:mod:`.expiry`). One whose TTL has not expired is queued again when it will have
(``requeue_after`` the time left). One whose TTL has expired by the mirror's copy is read
fresh from the API server, since the copy may be stale (the TTL raised meanwhile), and
judged again on that: not expired, it is queued again for its new time left; gone or
being deleted, done; expired, it is deleted with foreground propagation (its pods go
before it) and its UID as a precondition (a Job of the same name made since is not
touched: the delete is refused with a Conflict and the key retried, the new Job then
judged on its own). Each deletion observes the seconds since the expiry in
``ttl_after_finished_controller_job_deletion_duration_seconds``, upstream's histogram.

A finish time later than now (a clock skew between whoever wrote the condition and this
controller) is logged as a warning, and the Job waits for the expiry computed from it, as
upstream. A finished Job whose finish time cannot be read is an error, retried with
backoff, as upstream.

# Queueing
A Job is queued when it is added or updated while it :func:`~.expiry.wants_cleanup` (not
being deleted, finished, with a TTL), as upstream's handlers; a deletion queues nothing.
The instance queues every Job when it becomes active; the sync sorts them out.

# What it reads
Jobs: metadata, ``spec.ttlSecondsAfterFinished`` and the conditions' ``type``,
``status`` and ``lastTransitionTime``, from the informer (so a Job's other status
updates, its counts of pods, reach no one). The one direct read is the fresh GET of an
expired Job before its deletion.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from prometheus_client import Histogram

import steward
from steward import JOBS, NotFoundError, Request, Result, utc_now
from steward.controllers.ttlafterfinished.expiry import (
    TimeLeft,
    UntimedError,
    job_key,
    time_left,
    wants_cleanup,
)

log = logging.getLogger(__name__)

NAME = "ttl-after-finished"
"""The controller's name with the manager (kube-controller-manager's alias of its
``ttl-after-finished-controller``)."""
QUEUE = "ttl_jobs_to_delete"
"""Upstream's work queue name (the ``name`` label of ``workqueue_*``)."""
WORKERS = 5
"""Jobs synced at once: kube-controller-manager's default
``--concurrent-ttl-after-finished-syncs``."""
FIELDS = (
    "spec.ttlSecondsAfterFinished",
    "status.conditions.type",
    "status.conditions.status",
    "status.conditions.lastTransitionTime",
)
"""What is read of a Job besides its metadata."""

DELETION_DURATION = Histogram(
    "ttl_after_finished_controller_job_deletion_duration_seconds",
    "The time it took to delete the job since it became eligible for deletion",
    buckets=tuple(0.1 * 2**i for i in range(14)),
)
"""Upstream's histogram, with its name, help text and buckets (100 ms doubling up to
about 13.7 min; the last bucket is [~27 min, +Inf) upstream, whose help says so)."""


def add_flags(parser: argparse.ArgumentParser) -> None:
    """kube-controller-manager's flag of this controller, as an alias of the host's."""
    steward.add_workers_alias(parser, "--concurrent-ttl-after-finished-syncs", "Jobs", WORKERS)


def added_or_updated(change: steward.Change) -> bool:
    """Upstream's handlers: an addition or update of a Job that wants its cleanup; a
    deletion queues nothing."""
    return change.kind is not steward.ChangeKind.DELETED and wants_cleanup(change.obj.object)


class TTLAfterFinished:
    """Deletes the Jobs whose TTL after finishing has passed; see the module docs."""

    def __init__(self, ctx: steward.Context) -> None:
        self.ctx = ctx
        self.mirror = ctx.mirror
        self.jobs = ctx.client(JOBS)

    async def reconcile(self, request: Request) -> Result:
        found = self.mirror.get(JOBS, request.namespace, request.name)
        if found is None:
            return Result()
        left = self.judge(found.object)
        if left is None or not left.expired:
            return self.wait(left)
        # The mirror's copy may be stale: its TTL may have been raised meanwhile.
        try:
            fresh = await self.jobs.get(request.namespace, request.name)
        except NotFoundError:
            return Result()
        left = self.judge(fresh)
        if left is None or not left.expired:
            return self.wait(left)
        uid = str(fresh["metadata"]["uid"])
        log.info("job %s/%s: TTL expired, deleting", request.namespace, request.name)
        try:
            await self.jobs.delete(
                request.namespace, request.name, uid=uid, propagation="Foreground"
            )
        except NotFoundError:
            log.debug("job %s/%s: gone before its deletion", request.namespace, request.name)
            return Result()
        DELETION_DURATION.observe(max(0.0, (utc_now() - left.expires_at).total_seconds()))
        return Result()

    @staticmethod
    def judge(job: Mapping[str, Any]) -> TimeLeft | None:
        """Upstream's ``processTTL`` without its queueing: None for a Job that wants no
        cleanup (being deleted, no TTL, not finished), else its time left; an untimed Job
        raises (the runtime retries it with backoff)."""
        if not wants_cleanup(job):
            return None
        try:
            left = time_left(job, utc_now())
        except UntimedError:
            log.error("job %s: its finish time cannot be read, retrying", job_key(job))
            raise
        if left.skewed:
            log.warning(
                "job %s finished in the future (%s): likely a clock skew in the cluster; its "
                "cleanup is deferred",
                job_key(job),
                left.finished_at.isoformat(),
            )
        log.debug(
            "job %s: finished %s, expires %s, %.3fs left",
            job_key(job),
            left.finished_at.isoformat(),
            left.expires_at.isoformat(),
            left.remaining.total_seconds(),
        )
        return left

    @staticmethod
    def wait(left: TimeLeft | None) -> Result:
        """Done for a Job that wants no cleanup; else queued again when its TTL expires."""
        if left is None:
            return Result()
        return Result(requeue_after=max(left.remaining, timedelta(0)).total_seconds())


CONTROLLER = (
    steward.ControllerBuilder[TTLAfterFinished](NAME)
    .for_(JOBS, added_or_updated, metadata_only=True, fields=FIELDS)
    .flags(add_flags)
    .with_options(steward.ControllerOptions(max_concurrent_reconciles=WORKERS, queue_name=QUEUE))
    .beside_upstream(None)
    .describe(
        "Steward's TTL-after-finished controller, as kube-controller-manager's "
        "ttl-after-finished-controller: a finished Job (a Complete or Failed condition) "
        "with spec.ttlSecondsAfterFinished is deleted, with foreground propagation and its "
        "UID as a precondition, once that many seconds have passed since the condition's "
        "lastTransitionTime (read fresh from the API server before the deletion). --workers "
        "(or --concurrent-ttl-after-finished-syncs) defaults to upstream's 5. Both would "
        "delete the same Jobs, so it must not run beside upstream's."
    )
    .complete(TTLAfterFinished)
)
"""The controller: Jobs are the primary (and only) type, their metadata, TTL and
conditions."""
