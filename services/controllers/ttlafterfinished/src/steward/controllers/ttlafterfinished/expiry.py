"""The TTL-after-finished controller's decisions, without I/O: whether a Job is to be
cleaned up, when it finished and how long it has left
(pkg/controller/ttlafterfinished/ttlafterfinished_controller.go: ``needsCleanup``,
``jobFinishTime``, ``timeLeft``; pkg/controller/job/util/utils.go: ``IsJobFinished``).

# Finished
A Job has finished when one of its conditions of type ``Complete`` or ``Failed`` has the
status ``True`` (the first such condition in the list counts). Its finish time is that
condition's ``lastTransitionTime``; a finished Job without one (or with one that is not a
timestamp) cannot be timed, which upstream treats as an error to retry.

# Expiry
A finished Job with ``spec.ttlSecondsAfterFinished`` (0 included) expires that many
seconds after its finish time; ``remaining`` is the expiry less now, zero or less once
expired. A finish time later than now is a clock skew between whoever wrote the condition
and this controller: upstream logs a warning and still waits for the expiry computed from
it (which is then more than the TTL away), and so does :func:`time_left`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from steward import parse_time

FINISHED = ("Complete", "Failed")
"""The condition types that say a Job has finished (upstream's ``JobComplete`` and
``JobFailed``)."""


class UntimedError(ValueError):
    """A finished Job whose finish time cannot be read (upstream's "unable to find the
    time when the Job finished"): retried with backoff, as upstream does."""


@dataclass(frozen=True)
class TimeLeft:
    """How a finished Job with a TTL stands at ``now``."""

    finished_at: datetime
    expires_at: datetime
    remaining: timedelta
    """The expiry less now: zero or less when expired."""
    skewed: bool
    """The finish time is later than now (upstream's "Found Job finished in the future")."""

    @property
    def expired(self) -> bool:
        return self.remaining <= timedelta(0)


def ttl_seconds(job: Mapping[str, Any]) -> int | None:
    """``spec.ttlSecondsAfterFinished``; None when unset."""
    value = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
    return int(value) if value is not None else None


def finished_condition(job: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The first condition saying the Job has finished (upstream's ``FinishedCondition``)."""
    for condition in (job.get("status") or {}).get("conditions") or ():
        if condition.get("type") in FINISHED and condition.get("status") == "True":
            return condition  # type: ignore[no-any-return]
    return None


def is_finished(job: Mapping[str, Any]) -> bool:
    return finished_condition(job) is not None


def needs_cleanup(job: Mapping[str, Any]) -> bool:
    """Upstream's ``needsCleanup``: a TTL is set and the Job has finished."""
    return ttl_seconds(job) is not None and is_finished(job)


def terminating(job: Mapping[str, Any]) -> bool:
    return bool((job.get("metadata") or {}).get("deletionTimestamp"))


def wants_cleanup(job: Mapping[str, Any]) -> bool:
    """The handlers' filter and the sync's first check: not being deleted already, and
    :func:`needs_cleanup`."""
    return not terminating(job) and needs_cleanup(job)


def finish_time(job: Mapping[str, Any]) -> datetime:
    """The finished condition's ``lastTransitionTime`` (upstream's ``jobFinishTime``);
    :class:`UntimedError` when the Job has not finished or its time is missing."""
    condition = finished_condition(job)
    if condition is None:
        raise UntimedError(f"job {job_key(job)} has not finished")
    when = parse_time(condition.get("lastTransitionTime"))
    if when is None:
        raise UntimedError(f"unable to find the time when the Job {job_key(job)} finished")
    return when


def time_left(job: Mapping[str, Any], now: datetime) -> TimeLeft:
    """Upstream's ``timeLeft`` of a Job that :func:`needs_cleanup` (:class:`UntimedError`
    for one that does not, or that cannot be timed)."""
    ttl = ttl_seconds(job)
    if ttl is None:
        raise UntimedError(f"job {job_key(job)} has no ttlSecondsAfterFinished")
    finished_at = finish_time(job)
    expires_at = finished_at + timedelta(seconds=ttl)
    return TimeLeft(finished_at, expires_at, expires_at - now, finished_at > now)


def job_key(job: Mapping[str, Any]) -> str:
    """``namespace/name``, for the logs."""
    meta = job.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
