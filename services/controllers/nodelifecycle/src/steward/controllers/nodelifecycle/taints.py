"""The node lifecycle controller's taints, without I/O: which NoSchedule taints a node's
conditions call for, the NoExecute ``not-ready``/``unreachable`` pair, and the taint list
a swap leaves (upstream's pkg/util/taints and ``SwapNodeControllerTaint`` in
pkg/controller/util/node/controller_utils.go).

A taint is identified by its key and effect (``MatchTaint``): adding one that is there
with another value or ``timeAdded`` replaces it in place, adding one that is there alike
changes nothing, and removing takes every taint of that key and effect.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Taint = dict[str, Any]

NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
MEMORY_PRESSURE = "node.kubernetes.io/memory-pressure"
DISK_PRESSURE = "node.kubernetes.io/disk-pressure"
PID_PRESSURE = "node.kubernetes.io/pid-pressure"
NETWORK_UNAVAILABLE = "node.kubernetes.io/network-unavailable"

NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"

UNREACHABLE_NO_EXECUTE: Taint = {"key": UNREACHABLE, "effect": NO_EXECUTE}
NOT_READY_NO_EXECUTE: Taint = {"key": NOT_READY, "effect": NO_EXECUTE}
"""Upstream's ``UnreachableTaintTemplate`` and ``NotReadyTaintTemplate``."""

CONDITION_TAINTS: Mapping[str, Mapping[str, str]] = {
    "Ready": {"False": NOT_READY, "Unknown": UNREACHABLE},
    "MemoryPressure": {"True": MEMORY_PRESSURE},
    "DiskPressure": {"True": DISK_PRESSURE},
    "NetworkUnavailable": {"True": NETWORK_UNAVAILABLE},
    "PIDPressure": {"True": PID_PRESSURE},
}
"""Condition type → status → the key of the NoSchedule taint it calls for
(``nodeConditionToTaintKeyStatusMap``)."""

OWNED_NO_SCHEDULE_KEYS = frozenset(
    {UNSCHEDULABLE, *(key for by in CONDITION_TAINTS.values() for key in by.values())}
)
"""The NoSchedule taint keys this controller manages (``taintKeyToNodeConditionMap`` and
``unschedulable``); NoSchedule taints of other keys are never touched."""


def matches(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Same key and effect (``MatchTaint``)."""
    return a.get("key") == b.get("key") and a.get("effect") == b.get("effect")


def exists(taints: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """A taint of ``taint``'s key and effect is among ``taints`` (``TaintExists``)."""
    return any(matches(t, taint) for t in taints)


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    # Semantic equality of two taints: absent and empty strings alike.
    fields = ("key", "value", "effect", "timeAdded")
    return all((a.get(f) or "") == (b.get(f) or "") for f in fields)


def wanted_no_schedule(node: Mapping[str, Any]) -> list[Taint]:
    """The NoSchedule taints the node's conditions and ``spec.unschedulable`` call for
    (``doNoScheduleTaintingPass``), in condition order, ``unschedulable`` last."""
    wanted: list[Taint] = []
    for condition in (node.get("status") or {}).get("conditions") or ():
        key = CONDITION_TAINTS.get(condition.get("type", ""), {}).get(condition.get("status", ""))
        if key:
            wanted.append({"key": key, "effect": NO_SCHEDULE})
    if (node.get("spec") or {}).get("unschedulable"):
        wanted.append({"key": UNSCHEDULABLE, "effect": NO_SCHEDULE})
    return wanted


def no_schedule_diff(node: Mapping[str, Any]) -> tuple[list[Taint], list[Taint]]:
    """(to add, to remove): the managed NoSchedule taints the node lacks, and those it
    carries that no condition calls for (``TaintSetDiff`` of the two sets)."""
    wanted = wanted_no_schedule(node)
    held = [
        dict(t)
        for t in (node.get("spec") or {}).get("taints") or ()
        if t.get("effect") == NO_SCHEDULE and t.get("key") in OWNED_NO_SCHEDULE_KEYS
    ]
    add = [t for t in wanted if not exists(held, t)]
    remove = [t for t in held if not exists(wanted, t)]
    return add, remove


def added(
    taints: Sequence[Mapping[str, Any]], new: Iterable[Mapping[str, Any]]
) -> list[Taint] | None:
    """``taints`` with each of ``new`` added or replacing the one of its key and effect in
    place (``AddOrUpdateTaint``); None when nothing changes."""
    result = [dict(t) for t in taints]
    changed = False
    for taint in new:
        at = next((i for i, t in enumerate(result) if matches(t, taint)), None)
        if at is None:
            result.append(dict(taint))
            changed = True
        elif not _same(result[at], taint):
            result[at] = dict(taint)
            changed = True
    return result if changed else None


def removed(
    taints: Sequence[Mapping[str, Any]], gone: Iterable[Mapping[str, Any]]
) -> list[Taint] | None:
    """``taints`` without any of ``gone``'s key and effect (``RemoveTaint``); None when
    none was there."""
    gone = list(gone)
    result = [dict(t) for t in taints if not exists(gone, t)]
    return result if len(result) != len(taints) else None


def stamped(taints: Iterable[Mapping[str, Any]], now: str) -> list[Taint]:
    """The taints to add, each with ``timeAdded`` now (``SwapNodeControllerTaint``)."""
    return [{**t, "timeAdded": now} for t in taints]


def swapped(
    taints: Sequence[Mapping[str, Any]],
    add: Iterable[Mapping[str, Any]],
    remove: Iterable[Mapping[str, Any]],
) -> list[Taint] | None:
    """The taint list once ``add`` is added and ``remove`` removed, in one write where
    upstream makes two (its patches add first, then remove, so the node is never without
    either); None when nothing changes."""
    after_add = added(taints, add)
    base = after_add if after_add is not None else [dict(t) for t in taints]
    after_remove = removed(base, remove)
    if after_add is None and after_remove is None:
        return None
    return after_remove if after_remove is not None else base
