"""Pod facts only the Job controller decides on: its tracking finalizer, restarts, finish
times, removal order (the common ones are ``steward.pods``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import steward
from steward import parse_time

TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
"""The finalizer that keeps a Job's pod until the Job's status has counted it."""

_PHASE_ORDER = {"Pending": 0, "Unknown": 1, "Running": 2}


def uid(pod: dict[str, Any]) -> str:
    """The pod's UID ("" when missing)."""
    return str((pod.get("metadata") or {}).get("uid", ""))


def has_finalizer(pod: dict[str, Any]) -> bool:
    """Whether the pod carries the Job tracking finalizer."""
    return TRACKING_FINALIZER in ((pod.get("metadata") or {}).get("finalizers") or ())


def restarts(pod: dict[str, Any], *, include_init: bool = False) -> list[int]:
    """Restart counts of the pod's containers (and init containers if asked)."""
    status = pod.get("status") or {}
    keys = (
        ("containerStatuses", "initContainerStatuses") if include_init else ("containerStatuses",)
    )
    return [int(s.get("restartCount", 0)) for k in keys for s in status.get(k) or ()]


def finished_time(pod: dict[str, Any], now: datetime) -> datetime:
    """When the pod finished: the latest container termination, else the latest condition
    transition, else its deletion time, else ``now``."""
    status = pod.get("status") or {}
    latest: datetime | None = None
    for cs in status.get("containerStatuses") or ():
        t = parse_time(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        if t is not None and (latest is None or t > latest):
            latest = t
    if latest is not None:
        return latest
    for cond in status.get("conditions") or ():
        t = parse_time(cond.get("lastTransitionTime"))
        if t is not None and (latest is None or t > latest):
            latest = t
    if latest is not None:
        return latest
    return parse_time((pod.get("metadata") or {}).get("deletionTimestamp")) or now


def _newest_first(value: Any) -> tuple[int, float]:
    t = parse_time(value)
    return (0, 0.0) if t is None else (1, -t.timestamp())


def removal_key(pod: dict[str, Any]) -> tuple[Any, ...]:
    """Sort key putting first the active pods to delete first (client-go's ActivePods):
    unassigned before assigned; Pending, Unknown, Running; not ready before ready; ready
    for less time first; more container restarts first; newer first."""
    is_ready = steward.pods.is_ready(pod)
    ready_since: tuple[int, float] = (0, 0.0)
    if is_ready:
        ready_since = _newest_first(steward.pods.ready_condition(pod).get("lastTransitionTime"))
    counts = restarts(pod)
    return (
        1 if (pod.get("spec") or {}).get("nodeName") else 0,
        _PHASE_ORDER.get(steward.pods.phase(pod), 0),
        1 if is_ready else 0,
        ready_since,
        -(max(counts) if counts else 0),
        _newest_first((pod.get("metadata") or {}).get("creationTimestamp")),
    )
