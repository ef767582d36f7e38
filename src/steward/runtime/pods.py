"""Pod facts that workload controllers decide on, as upstream's ``podutil`` and controller
helpers define them: phase, finished, being deleted, active, terminating, Ready.

Each takes a pod as the API server's JSON (a dict) and is total: missing fields count as
absent (no phase yet, no conditions, not being deleted).
"""

from __future__ import annotations

from typing import Any


def phase(pod: dict[str, Any]) -> str:
    """The pod's phase ("" when not reported yet)."""
    return str((pod.get("status") or {}).get("phase", ""))


def is_terminal(pod: dict[str, Any]) -> bool:
    """Whether the pod has finished: Succeeded or Failed."""
    return phase(pod) in ("Succeeded", "Failed")


def is_deleting(pod: dict[str, Any]) -> bool:
    """Whether the pod is marked for deletion (has a deletion timestamp)."""
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def is_active(pod: dict[str, Any]) -> bool:
    """Neither finished nor being deleted (upstream's ``IsPodActive``)."""
    return not is_terminal(pod) and not is_deleting(pod)


def is_terminating(pod: dict[str, Any]) -> bool:
    """Being deleted but not finished yet."""
    return is_deleting(pod) and not is_terminal(pod)


def ready_condition(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod's Ready condition (empty when it reports none)."""
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return next((dict(c) for c in conditions if c.get("type") == "Ready"), {})


def is_ready(pod: dict[str, Any]) -> bool:
    """Whether the pod's Ready condition is True (upstream's ``IsPodReady``)."""
    return ready_condition(pod).get("status") == "True"
