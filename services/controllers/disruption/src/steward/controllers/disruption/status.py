"""The status of a PodDisruptionBudget: upstream's ``countHealthyPods``,
``buildDisruptedPodMap``, ``updatePdbStatus`` and ``failSafe``
(pkg/controller/disruption/disruption.go, v1.37.2) with the ``DisruptionAllowed`` condition of
``UpdateDisruptionAllowedCondition`` and ``ConditionsAreUpToDate``
(k8s.io/component-helpers/apps/poddisruptionbudget).

Nothing here talks to an API: the controller hands in the budget, its selected pods, what
:func:`~steward.controllers.disruption.expected.expected_count` computed and the time, and
writes the status this module returns to ``poddisruptionbudgets/status`` (an update: a
conflict is retried without the fail-safe).

# Disrupted pods
``status.disruptedPods`` maps a pod's name to when the eviction API let it go. An entry is
kept while the pod is still selected, not being deleted, and ``disruption time +``
:data:`DELETION_TIMEOUT` is not before now; an entry of a selected pod that outlived it is
dropped and the pod named for a ``NotDeleted`` Event; entries of other pods are dropped
silently. The budget is looked at again when the earliest kept entry expires.

# Health
A selected pod is healthy when its Ready condition is True, it is not being deleted, and it is
not in the disrupted-pods map with ``disruption time + DELETION_TIMEOUT`` after now.
``disruptionsAllowed = currentHealthy - desiredHealthy``, but 0 when that is negative or when
the budget expects no pods (so that a budget whose first pods appear before this controller
saw them allows nothing). ``spec.unhealthyPodEvictionPolicy`` is the eviction API's business:
it changes nothing here.

# The condition
``DisruptionAllowed`` is True with reason ``SufficientPods`` when disruptions are allowed,
else False with ``InsufficientPods``; its message is emptied and its ``observedGeneration`` is
the budget's. Its ``lastTransitionTime`` moves only when its status flips (or it is new). The
status is left alone (``None``) when every field already says so and ``observedGeneration`` is
the budget's generation.

# Failing safe
When a sync fails for any reason but a conflict, :func:`fail_safe` writes
``disruptionsAllowed: 0`` and the condition False with reason ``SyncFailed`` and the error as
its message, keeping the rest of the status (its ``observedGeneration`` included, which the
condition takes too), so that the eviction API refuses while the state is unknown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from steward import format_time, parse_time, pods

from .expected import ExpectedCount

Obj = dict[str, Any]

DELETION_TIMEOUT: Final = timedelta(minutes=2)
"""Upstream's ``DeletionTimeout``: how long after an eviction the pod may take to be seen
being deleted before its ``disruptedPods`` entry is dropped."""

DISRUPTION_ALLOWED: Final = "DisruptionAllowed"
SUFFICIENT_PODS: Final = "SufficientPods"
INSUFFICIENT_PODS: Final = "InsufficientPods"
SYNC_FAILED: Final = "SyncFailed"


def _name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name") or "")


def _generation(budget: Mapping[str, Any]) -> int:
    return int((budget.get("metadata") or {}).get("generation") or 0)


def _status(budget: Mapping[str, Any]) -> Obj:
    return dict(budget.get("status") or {})


@dataclass(frozen=True)
class DisruptedPods:
    """The disrupted-pods map to write (names to the timestamps as they were), when to look
    at the budget again (the earliest kept entry's expiry; None when nothing is kept), and the
    pods that outlived their entry without being deleted (for ``NotDeleted`` Events)."""

    kept: Mapping[str, str]
    recheck_at: datetime | None
    not_deleted: tuple[str, ...] = ()


def disrupted_pods(
    budget: Mapping[str, Any], selected: Iterable[Obj], now: datetime
) -> DisruptedPods:
    """Upstream's ``buildDisruptedPodMap``: see the module documentation. An entry whose
    timestamp does not parse counts as expired."""
    entries: Mapping[str, Any] = _status(budget).get("disruptedPods") or {}
    kept: dict[str, str] = {}
    recheck_at: datetime | None = None
    not_deleted: list[str] = []
    if not entries:
        return DisruptedPods(kept, None)
    for pod in selected:
        name = _name(pod)
        if pods.is_deleting(pod) or name not in entries:
            continue
        when = parse_time(entries[name])
        expires = when + DELETION_TIMEOUT if when is not None else None
        if expires is None or expires < now:
            not_deleted.append(name)
            continue
        if recheck_at is None or expires < recheck_at:
            recheck_at = expires
        kept[name] = str(entries[name])
    return DisruptedPods(kept, recheck_at, tuple(not_deleted))


def count_healthy(selected: Iterable[Obj], disrupted: Mapping[str, str], now: datetime) -> int:
    """Upstream's ``countHealthyPods``: the selected pods that are Ready, not being deleted,
    and not disrupted less than :data:`DELETION_TIMEOUT` ago (an entry expiring exactly now
    no longer holds the pod back)."""
    healthy = 0
    for pod in selected:
        if pods.is_deleting(pod):
            continue
        when = parse_time(disrupted.get(_name(pod)))
        if when is not None and when + DELETION_TIMEOUT > now:
            continue
        if pods.is_ready(pod):
            healthy += 1
    return healthy


def disruptions_allowed(current_healthy: int, desired_healthy: int, expected_pods: int) -> int:
    """How many more pods may be disrupted: the healthy surplus, 0 when there is none or the
    budget expects no pods."""
    allowed = current_healthy - desired_healthy
    return 0 if expected_pods <= 0 or allowed <= 0 else allowed


def set_condition(conditions: list[Obj], condition: Obj, now: datetime) -> None:
    """``meta.SetStatusCondition`` on dicts: add ``condition`` stamped ``now``, or update the
    one of its type in place, moving ``lastTransitionTime`` only when its status changes."""
    for existing in conditions:
        if existing.get("type") == condition["type"]:
            if existing.get("status") != condition["status"]:
                existing["status"] = condition["status"]
                existing["lastTransitionTime"] = format_time(now)
            for key in ("reason", "message", "observedGeneration"):
                existing[key] = condition[key]
            return
    conditions.append({**condition, "lastTransitionTime": format_time(now)})


def _find(conditions: Iterable[Mapping[str, Any]], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions if c.get("type") == kind), None)


def _condition_up_to_date(budget: Mapping[str, Any]) -> bool:
    """``ConditionsAreUpToDate``: the condition exists, the status has seen the budget's
    generation, and status and reason match ``disruptionsAllowed``."""
    status = _status(budget)
    condition = _find(status.get("conditions") or (), DISRUPTION_ALLOWED)
    if condition is None or int(status.get("observedGeneration") or 0) != _generation(budget):
        return False
    if int(status.get("disruptionsAllowed") or 0) > 0:
        return condition.get("status") == "True" and condition.get("reason") == SUFFICIENT_PODS
    return condition.get("status") == "False" and condition.get("reason") == INSUFFICIENT_PODS


def _copy_conditions(status: Mapping[str, Any]) -> list[Obj]:
    return [dict(c) for c in status.get("conditions") or ()]


def new_status(
    budget: Mapping[str, Any],
    current_healthy: int,
    desired_healthy: int,
    expected_pods: int,
    disrupted: Mapping[str, str],
    now: datetime,
) -> Obj | None:
    """Upstream's ``updatePdbStatus``: the status to write, or None when the budget's already
    says it all (see the module documentation)."""
    allowed = disruptions_allowed(current_healthy, desired_healthy, expected_pods)
    status = _status(budget)
    generation = _generation(budget)
    if (
        int(status.get("currentHealthy") or 0) == current_healthy
        and int(status.get("desiredHealthy") or 0) == desired_healthy
        and int(status.get("expectedPods") or 0) == expected_pods
        and int(status.get("disruptionsAllowed") or 0) == allowed
        and dict(status.get("disruptedPods") or {}) == dict(disrupted)
        and int(status.get("observedGeneration") or 0) == generation
        and _condition_up_to_date(budget)
    ):
        return None
    conditions = _copy_conditions(status)
    sufficient = allowed > 0
    set_condition(
        conditions,
        {
            "type": DISRUPTION_ALLOWED,
            "status": "True" if sufficient else "False",
            "reason": SUFFICIENT_PODS if sufficient else INSUFFICIENT_PODS,
            "message": "",
            "observedGeneration": generation,
        },
        now,
    )
    written: Obj = {
        "observedGeneration": generation,
        "disruptionsAllowed": allowed,
        "currentHealthy": current_healthy,
        "desiredHealthy": desired_healthy,
        "expectedPods": expected_pods,
        "conditions": conditions,
    }
    if disrupted:
        written["disruptedPods"] = dict(disrupted)
    return written


def fail_safe(budget: Mapping[str, Any], message: str, now: datetime) -> Obj:
    """Upstream's ``failSafe``: the budget's status with ``disruptionsAllowed: 0`` and the
    condition False, ``SyncFailed``, ``message``; always written."""
    status = _status(budget)
    status["disruptionsAllowed"] = 0
    conditions = _copy_conditions(status)
    set_condition(
        conditions,
        {
            "type": DISRUPTION_ALLOWED,
            "status": "False",
            "reason": SYNC_FAILED,
            "message": message,
            "observedGeneration": int(status.get("observedGeneration") or 0),
        },
        now,
    )
    status["conditions"] = conditions
    return status


@dataclass(frozen=True)
class Sync:
    """One sync's decision: the status to write (None: none), when to sync again for the
    disrupted pods (None: no need), and the pods for ``NotDeleted`` Events."""

    status: Obj | None
    recheck_after: timedelta | None
    not_deleted: tuple[str, ...] = ()


def sync(
    budget: Mapping[str, Any], selected: list[Obj], expected: ExpectedCount, now: datetime
) -> Sync:
    """The status part of upstream's ``trySync``, once the expected count is known: prune the
    disrupted pods, count the healthy ones, and decide the status. The recheck is for the
    controller to schedule only once the write succeeded (as upstream)."""
    disrupted = disrupted_pods(budget, selected, now)
    healthy = count_healthy(selected, disrupted.kept, now)
    status = new_status(
        budget, healthy, expected.desired_healthy, expected.expected_pods, disrupted.kept, now
    )
    recheck = disrupted.recheck_at - now if disrupted.recheck_at is not None else None
    return Sync(status, recheck, disrupted.not_deleted)
