"""A node's health from its heartbeats, without I/O (upstream's ``tryUpdateNodeHealth``
and its ``nodeHealthData`` in pkg/controller/nodelifecycle/node_lifecycle_controller.go).

# Heartbeats
The controller remembers, per node, when it last *saw* a heartbeat (the probe time, by
its own clock, never the kubelet's): a change of the Ready condition's
``lastHeartbeatTime``, or a renewal of the node's Lease in ``kube-node-lease`` (a
``spec.renewTime`` later than the one remembered). A node first seen, or whose Ready
condition appeared or disappeared, starts with a probe time of now; a node that never had
a Ready condition starts at its creation.

# The grace periods
A node with a Ready condition may go ``--node-monitor-grace-period`` without a
heartbeat; one without (still starting) ``--node-startup-grace-period``. Past it, its
Ready, MemoryPressure, DiskPressure and PIDPressure conditions become ``Unknown``: those
not already Unknown with the reason ``NodeStatusUnknown`` ("Kubelet stopped posting node
status.") and a transition time of now, those missing are added with
``NodeStatusNeverUpdated`` ("Kubelet never posted node status.", the node's creation as
their heartbeat). The conditions are written only when the Ready condition changes (as
upstream, pressure conditions alone changing write nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from steward.runtime.times import format_time, parse_time

Condition = dict[str, Any]

UNKNOWN_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
"""The conditions a node past its grace period has set to Unknown, in this order."""
STOPPED_REASON = "NodeStatusUnknown"
STOPPED_MESSAGE = "Kubelet stopped posting node status."
NEVER_REASON = "NodeStatusNeverUpdated"
NEVER_MESSAGE = "Kubelet never posted node status."
EPOCH = datetime.fromtimestamp(0).astimezone()


@dataclass(frozen=True)
class Lease:
    """What the controller reads of a node's Lease."""

    renew: datetime | None
    version: str


@dataclass(frozen=True)
class NodeHealth:
    """What the controller remembers of a node between passes (``nodeHealthData``)."""

    probe: datetime
    """When the controller last saw a heartbeat."""
    ready_transition: datetime
    """When the controller saw the Ready condition last change."""
    ready: Condition | None
    """The Ready condition as last seen (None: the node had none)."""
    lease: Lease | None = None
    """The Lease as last seen renewed."""


@dataclass(frozen=True)
class Observation:
    """One look at a node (the first half of ``tryUpdateNodeHealth``)."""

    health: NodeHealth
    """What to remember of it."""
    observed_ready: Condition
    """Its Ready condition as the node has it (a synthetic Unknown one, dated its
    creation, when it has none)."""
    grace: timedelta
    """The grace period that applies to it."""
    expired: bool
    """No heartbeat seen within the grace period."""


def condition(node: Mapping[str, Any], ctype: str) -> Condition | None:
    """The node's condition of this type, or None."""
    for cond in (node.get("status") or {}).get("conditions") or ():
        if cond.get("type") == ctype:
            return dict(cond)
    return None


def created(node: Mapping[str, Any]) -> datetime:
    """The node's creation time (the epoch if it has none)."""
    return parse_time((node.get("metadata") or {}).get("creationTimestamp")) or EPOCH


def observe(
    saved: NodeHealth | None,
    node: Mapping[str, Any],
    lease: Lease | None,
    now: datetime,
    *,
    startup_grace: timedelta,
    monitor_grace: timedelta,
) -> Observation:
    """Look at ``node`` (and its ``lease``) with what was remembered of it (see the
    module docs)."""
    current = condition(node, "Ready")
    birth = created(node)
    health = saved
    if current is None:
        stamp = (node.get("metadata") or {}).get("creationTimestamp") or format_time(birth)
        observed: Condition = {
            "type": "Ready",
            "status": "Unknown",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }
        grace = startup_grace
        health = (
            replace(health, ready=None)
            if health is not None
            else NodeHealth(probe=birth, ready_transition=birth, ready=None)
        )
    else:
        observed = current
        grace = monitor_grace
    saved_ready = health.ready if health is not None else None
    if health is None or (saved_ready is None and current is not None):
        health = NodeHealth(probe=now, ready_transition=now, ready=current)
    elif saved_ready is not None and current is None:
        health = NodeHealth(probe=now, ready_transition=now, ready=None)
    elif (
        saved_ready is not None
        and current is not None
        and _time(saved_ready, "lastHeartbeatTime") != _time(current, "lastHeartbeatTime")
    ):
        transition = (
            now
            if _time(saved_ready, "lastTransitionTime") != _time(current, "lastTransitionTime")
            else health.ready_transition
        )
        health = NodeHealth(probe=now, ready_transition=transition, ready=current)
    if lease is not None and (health.lease is None or _renewed(health.lease, lease)):
        health = replace(health, lease=lease, probe=now)
    return Observation(health, observed, grace, now > health.probe + grace)


def _time(cond: Mapping[str, Any], field: str) -> datetime | None:
    return parse_time(cond.get(field))


def _renewed(seen: Lease, lease: Lease) -> bool:
    # metav1.MicroTime.Before: a nil time is before nothing, and nothing is before it.
    return seen.renew is not None and lease.renew is not None and seen.renew < lease.renew


def unknown_conditions(
    node: Mapping[str, Any], now: datetime
) -> tuple[list[Condition], list[Condition]]:
    """(every condition of the node afterwards, the conditions changed or added) once
    the node is past its grace period (see the module docs)."""
    conditions = [dict(c) for c in (node.get("status") or {}).get("conditions") or ()]
    changed: list[Condition] = []
    stamp = format_time(now)
    birth = (node.get("metadata") or {}).get("creationTimestamp") or format_time(created(node))
    for ctype in UNKNOWN_CONDITIONS:
        found = next((c for c in conditions if c.get("type") == ctype), None)
        if found is None:
            new = {
                "type": ctype,
                "status": "Unknown",
                "reason": NEVER_REASON,
                "message": NEVER_MESSAGE,
                "lastHeartbeatTime": birth,
                "lastTransitionTime": stamp,
            }
            conditions.append(new)
            changed.append(new)
        elif found.get("status") != "Unknown":
            found.update(
                status="Unknown",
                reason=STOPPED_REASON,
                message=STOPPED_MESSAGE,
                lastTransitionTime=stamp,
            )
            changed.append(found)
    return conditions, changed


def same_condition(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Semantic equality of two conditions (times compared as times, absent fields as
    empty)."""
    if a is None or b is None:
        return a is b
    keys = set(a) | set(b)
    for key in keys:
        va, vb = a.get(key), b.get(key)
        if key.endswith("Time"):
            if parse_time(va) != parse_time(vb):
                return False
        elif (va or "") != (vb or ""):
            return False
    return True


def with_conditions(node: Mapping[str, Any], conditions: list[Condition]) -> dict[str, Any]:
    """A copy of ``node`` with these conditions."""
    status = {**(node.get("status") or {}), "conditions": conditions}
    return {**node, "status": status}
