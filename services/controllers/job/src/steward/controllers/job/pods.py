"""Pod facts the Job controller decides on: phases, readiness, finish times, removal order."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from steward import parse_time

TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
"""The finalizer that keeps a Job's pod until the Job's status has counted it."""

_PHASE_ORDER = {"Pending": 0, "Unknown": 1, "Running": 2}


def uid(pod: dict[str, Any]) -> str:
    """The pod's UID ("" when missing)."""
    return str((pod.get("metadata") or {}).get("uid", ""))


def name(pod: dict[str, Any]) -> str:
    """The pod's name ("" when missing)."""
    return str((pod.get("metadata") or {}).get("name", ""))


def phase(pod: dict[str, Any]) -> str:
    """The pod's phase ("" when not reported yet)."""
    return str((pod.get("status") or {}).get("phase", ""))


def deleting(pod: dict[str, Any]) -> bool:
    """Whether the pod is marked for deletion."""
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def terminal(pod: dict[str, Any]) -> bool:
    """Whether the pod has finished (Succeeded or Failed)."""
    return phase(pod) in ("Succeeded", "Failed")


def active(pod: dict[str, Any]) -> bool:
    """Neither finished nor being deleted (client-go's FilterActivePods)."""
    return not terminal(pod) and not deleting(pod)


def terminating(pod: dict[str, Any]) -> bool:
    """Being deleted but not finished yet."""
    return deleting(pod) and not terminal(pod)


def has_finalizer(pod: dict[str, Any]) -> bool:
    """Whether the pod carries the Job tracking finalizer."""
    return TRACKING_FINALIZER in ((pod.get("metadata") or {}).get("finalizers") or ())


def _ready_condition(pod: dict[str, Any]) -> dict[str, Any] | None:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return dict(cond)
    return None


def ready(pod: dict[str, Any]) -> bool:
    """Whether the pod's Ready condition is True."""
    cond = _ready_condition(pod)
    return cond is not None and cond.get("status") == "True"


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
    is_ready = ready(pod)
    ready_since: tuple[int, float] = (0, 0.0)
    if is_ready:
        cond = _ready_condition(pod) or {}
        ready_since = _newest_first(cond.get("lastTransitionTime"))
    counts = restarts(pod)
    return (
        1 if (pod.get("spec") or {}).get("nodeName") else 0,
        _PHASE_ORDER.get(phase(pod), 0),
        1 if is_ready else 0,
        ready_since,
        -(max(counts) if counts else 0),
        _newest_first((pod.get("metadata") or {}).get("creationTimestamp")),
    )
