"""A Job's ``spec.podFailurePolicy``: which rule, if any, a failed pod matches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FAIL_JOB = "FailJob"
"""Fail the whole Job (reason ``PodFailurePolicy``)."""
FAIL_INDEX = "FailIndex"
"""Fail the pod's index at once (Indexed Jobs with ``backoffLimitPerIndex``)."""
IGNORE = "Ignore"
"""Do not count the failure toward ``backoffLimit`` (nor the index's limit)."""
COUNT = "Count"
"""Count the failure as usual."""


@dataclass(frozen=True)
class PolicyMatch:
    """How a failed pod is handled under the policy."""

    action: str | None = None
    """The matched rule's action, None when no rule matched (or there is no policy)."""
    counts: bool = True
    """Whether the failure counts toward ``backoffLimit``: False only for Ignore."""
    message: str | None = None
    """For FailJob, the message of the Job's failure condition (upstream's wording)."""


NO_MATCH = PolicyMatch()
"""The outcome without a policy or without a matching rule: counted, no action."""


def _terminated_match(
    statuses: list[dict[str, Any]], requirement: dict[str, Any]
) -> dict[str, Any] | None:
    wanted = requirement.get("containerName")
    values = {int(v) for v in requirement.get("values") or () if isinstance(v, int)}
    operator = requirement.get("operator")
    for cs in statuses:
        terminated = (cs.get("state") or {}).get("terminated")
        if not isinstance(terminated, dict):
            continue  # still running or waiting: no exit code yet
        if wanted is not None and wanted != cs.get("name"):
            continue
        try:
            code = int(terminated.get("exitCode", 0))
        except (TypeError, ValueError):
            continue
        if code == 0:
            continue  # a clean exit never matches, whatever the operator
        if (operator == "In" and code in values) or (operator == "NotIn" and code not in values):
            return cs
    return None


def _exit_code_match(pod: dict[str, Any], requirement: dict[str, Any]) -> dict[str, Any] | None:
    status = pod.get("status") or {}
    return _terminated_match(
        list(status.get("containerStatuses") or ()), requirement
    ) or _terminated_match(list(status.get("initContainerStatuses") or ()), requirement)


def _condition_match(pod: dict[str, Any], patterns: list[dict[str, Any]]) -> dict[str, Any] | None:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        for pattern in patterns:
            if cond.get("type") == pattern.get("type") and cond.get("status") == pattern.get(
                "status", "True"
            ):
                return dict(cond)
    return None


def match(policy: dict[str, Any] | None, pod: dict[str, Any]) -> PolicyMatch:
    """The first rule of ``policy`` that the (failed) pod matches, as upstream's
    ``matchPodFailurePolicy``: a rule with ``onExitCodes`` matches a terminated container
    (app containers first, then init containers) with a non-zero exit code that the
    operator accepts; a rule with ``onPodConditions`` matches a pod condition of that type
    and status. Rules with an unknown action or operator never match (the API server
    rejects them); a missing policy or no match gives :data:`NO_MATCH`."""
    if not policy:
        return NO_MATCH
    meta = pod.get("metadata") or {}
    ref = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    for index, rule in enumerate(policy.get("rules") or ()):
        action = rule.get("action")
        if action not in (FAIL_JOB, FAIL_INDEX, IGNORE, COUNT):
            continue
        on_exit = rule.get("onExitCodes")
        if on_exit is not None:
            cs = _exit_code_match(pod, on_exit)
            if cs is None:
                continue
            message = None
            if action == FAIL_JOB:
                code = (cs.get("state") or {}).get("terminated", {}).get("exitCode")
                message = (
                    f"Container {cs.get('name', '')} for pod {ref} failed with exit code "
                    f"{code} matching {action} rule at index {index}"
                )
            return PolicyMatch(action, action != IGNORE, message)
        on_conditions = rule.get("onPodConditions")
        if on_conditions is not None:
            cond = _condition_match(pod, list(on_conditions))
            if cond is None:
                continue
            message = None
            if action == FAIL_JOB:
                message = (
                    f"Pod {ref} has condition {cond.get('type', '')} matching {action} "
                    f"rule at index {index}"
                )
            return PolicyMatch(action, action != IGNORE, message)
    return NO_MATCH
