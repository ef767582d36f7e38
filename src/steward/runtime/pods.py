"""Pod facts that workload controllers decide on, as upstream's ``podutil`` and controller
helpers define them: phase, finished, being deleted, active, terminating, Ready,
available; and a new pod from its owner's template.

Each takes a pod as the API server's JSON (a dict) and is total: missing fields count as
absent (no phase yet, no conditions, not being deleted).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from steward.deepjson import copy as copy_json
from steward.runtime.ownership import controller_ref
from steward.runtime.resources import Resource
from steward.runtime.times import parse_time


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


def is_available(pod: dict[str, Any], min_ready_seconds: int, now: datetime) -> bool:
    """Ready for at least ``min_ready_seconds`` (just Ready when 0), counted from the Ready
    condition's last transition, the moment itself included (upstream's ``IsPodAvailable``,
    pkg/api/v1/pod/util.go: ``Compare(now) <= 0``)."""
    if not is_ready(pod):
        return False
    if min_ready_seconds <= 0:
        return True
    since = parse_time(ready_condition(pod).get("lastTransitionTime"))
    return since is not None and since + timedelta(seconds=min_ready_seconds) <= now


def from_template(
    owner: dict[str, Any], owner_type: Resource, template: dict[str, Any]
) -> dict[str, Any]:
    """A new pod of ``owner`` from a pod template (upstream's ``GetPodFromTemplate``): the
    template's labels, annotations, finalizers and spec, ``generateName`` ``<owner>-``,
    the owner as controlling owner."""
    tmeta = template.get("metadata") or {}
    name = (owner.get("metadata") or {}).get("name", "")
    # As upstream: the dash only while the prefix is a valid generateName.
    prefix = f"{name}-" if len(name) < 253 else name
    meta: dict[str, Any] = {
        "generateName": prefix,
        "labels": dict(tmeta.get("labels") or {}),
        "annotations": dict(tmeta.get("annotations") or {}),
        "ownerReferences": [controller_ref(owner, owner_type)],
    }
    if tmeta.get("finalizers"):
        meta["finalizers"] = list(tmeta["finalizers"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": copy_json(template.get("spec") or {}),
    }
