"""Stale ``DisruptionTarget`` conditions on pods: upstream's
``nonTerminatingPodHasStaleDisruptionCondition`` and ``syncStalePodDisruption``
(pkg/controller/disruption/disruption.go, v1.37.2).

The eviction API (and the scheduler's preemption, the taint manager, ...) sets a pod's
``DisruptionTarget`` condition True just before deleting it. If the deletion never comes, the
condition is stale: once it has been True for :data:`STALE_POD_DISRUPTION_TIMEOUT` on a pod
that is not being deleted, this controller sets it False.

Not stale, ever: a pod being deleted, a pod in a terminal phase (Succeeded, Failed: no status
write for nothing), a condition that is absent or not True, and one with reason
``TerminationByKubelet`` (the kubelet's own, which may take arbitrarily long before the pod
terminates).

Nothing here talks to an API: :func:`stale_disruption` says whether and when to clear (the
controller enqueues the pod after that delay on every pod event and when a sync finds it too
early), :func:`cleared_conditions` gives the pod's conditions to write to ``pods/status``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from steward import format_time, parse_time, pods

Obj = dict[str, Any]

STALE_POD_DISRUPTION_TIMEOUT: Final = timedelta(minutes=2)
"""Upstream's ``stalePodDisruptionTimeout``."""

DISRUPTION_TARGET: Final = "DisruptionTarget"
TERMINATION_BY_KUBELET: Final = "TerminationByKubelet"

_ZERO: Final = timedelta(0)


def _condition(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return next((c for c in conditions if c.get("type") == DISRUPTION_TARGET), None)


def stale_disruption(
    pod: Obj, now: datetime, timeout: timedelta = STALE_POD_DISRUPTION_TIMEOUT
) -> timedelta | None:
    """None when the pod's ``DisruptionTarget`` condition cannot be stale (see the module
    documentation); else how long until it is (0: clear it now), counted from the condition's
    ``lastTransitionTime`` (absent or malformed: stale now, as Go's zero time)."""
    if pods.is_deleting(pod) or pods.is_terminal(pod):
        return None
    condition = _condition(pod)
    if (
        condition is None
        or condition.get("status") != "True"
        or condition.get("reason") == TERMINATION_BY_KUBELET
    ):
        return None
    since = parse_time(condition.get("lastTransitionTime"))
    if since is None:
        return _ZERO
    return max(timeout - (now - since), _ZERO)


def cleared_conditions(pod: Obj, now: datetime) -> list[Obj]:
    """The pod's conditions with ``DisruptionTarget`` replaced by a False one stamped ``now``,
    without reason or message, observing the pod's generation (``UpdatePodCondition`` with
    ``PodObservedGenerationTracking``, GA). Call it only when :func:`stale_disruption` said 0:
    the condition is then True, so the write always changes it."""
    generation = int((pod.get("metadata") or {}).get("generation") or 0)
    cleared: Obj = {
        "type": DISRUPTION_TARGET,
        "status": "False",
        "lastTransitionTime": format_time(now),
    }
    if generation:
        cleared["observedGeneration"] = generation
    conditions = [dict(c) for c in (pod.get("status") or {}).get("conditions") or ()]
    for index, condition in enumerate(conditions):
        if condition.get("type") == DISRUPTION_TARGET:
            conditions[index] = cleared
            return conditions
    conditions.append(cleared)
    return conditions
