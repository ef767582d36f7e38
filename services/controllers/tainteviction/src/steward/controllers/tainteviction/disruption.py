"""The ``DisruptionTarget`` condition a pod gets just before this controller deletes it, as
upstream's ``addConditionAndDeletePod`` (pkg/controller/tainteviction/taint_eviction.go)
builds it with ``UpdatePodCondition`` and ``CalculatePodConditionObservedGeneration``
(pkg/api/v1/pod/util.go).

The condition is ``True`` with reason ``DeletionByTaintManager`` and message
``Taint manager: deleting due to NoExecute taint``; its ``observedGeneration`` is the
pod's ``metadata.generation`` (``PodObservedGenerationTracking`` is GA and locked on in
1.37). Its ``lastTransitionTime`` is now, or the existing condition's when that one is
``True`` already. A pod whose condition already says the same (status, reason, message,
``lastProbeTime`` and ``lastTransitionTime``; ``observedGeneration`` is not compared, as
upstream's) is not written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CONDITION = "DisruptionTarget"
REASON = "DeletionByTaintManager"
MESSAGE = "Taint manager: deleting due to NoExecute taint"


def disruption_condition(pod: Mapping[str, Any], now: str) -> dict[str, Any] | None:
    """The ``DisruptionTarget`` condition to write into ``pod``'s status at ``now`` (RFC
    3339), or None when the pod has it as it would be written."""
    conditions = (pod.get("status") or {}).get("conditions") or ()
    existing = next((c for c in conditions if c.get("type") == CONDITION), None)
    condition: dict[str, Any] = {
        "type": CONDITION,
        "status": "True",
        "lastTransitionTime": now,
        "reason": REASON,
        "message": MESSAGE,
    }
    generation = int((pod.get("metadata") or {}).get("generation") or 0)
    if generation:
        condition["observedGeneration"] = generation
    if existing is None:
        return condition
    if existing.get("status") == "True":
        condition["lastTransitionTime"] = existing.get("lastTransitionTime")
    same = (
        existing.get("status") == "True"
        and existing.get("reason") == REASON
        and existing.get("message") == MESSAGE
        and not existing.get("lastProbeTime")
    )
    return None if same else condition


def status_patch(pod: Mapping[str, Any], condition: Mapping[str, Any]) -> dict[str, Any]:
    """The strategic merge patch of the pod's status that adds or replaces ``condition``
    (conditions merge by ``type``), with the pod's uid as a precondition, as upstream's
    ``PatchPodStatus``."""
    uid = (pod.get("metadata") or {}).get("uid", "")
    return {"metadata": {"uid": uid}, "status": {"conditions": [dict(condition)]}}
