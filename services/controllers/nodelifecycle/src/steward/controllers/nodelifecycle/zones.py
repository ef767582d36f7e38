"""Zones and their disruption states, without I/O (upstream's ``ComputeZoneState``,
``handleDisruption``, ``setLimiterInZone``, ``HealthyQPSFunc`` and ``ReducedQPSFunc`` in
pkg/controller/nodelifecycle/node_lifecycle_controller.go).

# A zone
The zone of a node is its region and zone labels (``topology.kubernetes.io/…``, the
deprecated ``failure-domain.beta.kubernetes.io/…`` first), joined as upstream's
``GetZoneKey`` joins them; a node without either is in the zone ``""``. Nodes labelled
``node.kubernetes.io/exclude-disruption`` count in no zone's state.

# Its state
- ``FullDisruption``: no node of the zone is Ready (and there is one);
- ``PartialDisruption``: more than two are not Ready and they are at least
  ``--unhealthy-zone-threshold`` of the zone;
- ``Normal`` otherwise (``Initial`` before the first pass that saw it).

# The rate of its NoExecute taints
Normal: ``--node-eviction-rate``. PartialDisruption: ``--secondary-node-eviction-rate``
when the zone has more than ``--large-cluster-size-threshold`` nodes, else 0.
FullDisruption: ``--node-eviction-rate`` (a zone that is down alone is treated as
healthy; the not-ready nodes are most likely the zone's). When *every* zone is fully
disrupted, the controller assumes the trouble is its own (it cannot see any node):
it removes the not-ready and unreachable NoExecute taints of every node and stops
tainting (rate 0) until some node is Ready again; then every node's probe time starts
afresh (their grace period restarts) and each zone gets its state's rate.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
BETA_ZONE_LABEL = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION_LABEL = "failure-domain.beta.kubernetes.io/region"
EXCLUDE_DISRUPTION_LABEL = "node.kubernetes.io/exclude-disruption"


class ZoneState(enum.StrEnum):
    """A zone's state, spelled as upstream's."""

    INITIAL = "Initial"
    NORMAL = "Normal"
    FULL_DISRUPTION = "FullDisruption"
    PARTIAL_DISRUPTION = "PartialDisruption"


def zone_key(labels: Mapping[str, str] | None) -> str:
    """The zone of a node with these labels (``GetZoneKey``): ``region:\\x00:zone``, or
    ``""`` when it has neither."""
    labels = labels or {}
    zone = labels[BETA_ZONE_LABEL] if BETA_ZONE_LABEL in labels else labels.get(ZONE_LABEL, "")
    region = (
        labels[BETA_REGION_LABEL] if BETA_REGION_LABEL in labels else labels.get(REGION_LABEL, "")
    )
    if not region and not zone:
        return ""
    return f"{region}:\x00:{zone}"


def excluded(labels: Mapping[str, str] | None) -> bool:
    """The node counts in no zone's state (``isNodeExcludedFromDisruptionChecks``)."""
    return EXCLUDE_DISRUPTION_LABEL in (labels or {})


def zone_state(ready: Iterable[str | None], unhealthy_threshold: float) -> tuple[int, ZoneState]:
    """(not-ready nodes, state) of a zone from its nodes' Ready statuses (None: no Ready
    condition, which counts as not ready)."""
    statuses = list(ready)
    ready_count = sum(1 for s in statuses if s == "True")
    not_ready = len(statuses) - ready_count
    if ready_count == 0 and not_ready > 0:
        return not_ready, ZoneState.FULL_DISRUPTION
    if not_ready > 2 and not_ready / (not_ready + ready_count) >= unhealthy_threshold:
        return not_ready, ZoneState.PARTIAL_DISRUPTION
    return not_ready, ZoneState.NORMAL


@dataclass(frozen=True)
class Rates:
    """The rate flags: ``--node-eviction-rate``, ``--secondary-node-eviction-rate`` and
    ``--large-cluster-size-threshold``."""

    healthy: float = 0.1
    secondary: float = 0.01
    large_cluster: int = 50

    def qps(self, state: ZoneState, size: int) -> float | None:
        """The rate of a zone of ``size`` nodes in ``state``; None for ``Initial`` (the
        limiter is left as it is)."""
        if state is ZoneState.NORMAL or state is ZoneState.FULL_DISRUPTION:
            return self.healthy
        if state is ZoneState.PARTIAL_DISRUPTION:
            return self.secondary if size > self.large_cluster else 0.0
        return None


@dataclass
class Plan:
    """What one pass's disruption handling decided."""

    states: dict[str, ZoneState] = field(default_factory=dict)
    """Every zone's state after the pass."""
    rates: dict[str, float] = field(default_factory=dict)
    """Zones whose limiter takes a new rate."""
    entered_full_disruption: bool = False
    """Every zone went fully disrupted: remove every node's NoExecute taints."""
    left_full_disruption: bool = False
    """Some zone came back: restart every node's probe time."""
    changed: dict[str, ZoneState] = field(default_factory=dict)
    """Zones whose state changed (for the log)."""
    gone: list[str] = field(default_factory=list)
    """Zones no node is in any more."""


def handle_disruption(
    previous: Mapping[str, ZoneState],
    ready_by_zone: Mapping[str, list[str | None]],
    rates: Rates,
    unhealthy_threshold: float,
) -> Plan:
    """The zones' new states and what they call for (``handleDisruption``): ``previous``
    the states before the pass (every zone with a node, ``Initial`` when new),
    ``ready_by_zone`` the Ready statuses of the pass's nodes by zone."""
    new: dict[str, ZoneState] = {}
    all_are_full = True
    for zone, ready in ready_by_zone.items():
        _, state = zone_state(ready, unhealthy_threshold)
        if state is not ZoneState.FULL_DISRUPTION:
            all_are_full = False
        new[zone] = state
    states = {zone: previous.get(zone, ZoneState.INITIAL) for zone in ready_by_zone}
    plan = Plan(states=states, gone=[z for z in previous if z not in ready_by_zone])
    # Upstream walks its zones in map order and stops at the first one not fully
    # disrupted; with the zones that are gone dropped first, that is "all of them".
    all_were_full = all(s is ZoneState.FULL_DISRUPTION for s in states.values())
    if all_are_full and all_were_full:
        return plan
    if all_are_full:
        plan.entered_full_disruption = True
        for zone in states:
            plan.rates[zone] = 0.0
            plan.changed[zone] = ZoneState.FULL_DISRUPTION
            states[zone] = ZoneState.FULL_DISRUPTION
        return plan
    if all_were_full:
        plan.left_full_disruption = True
        for zone in states:
            qps = rates.qps(new[zone], len(ready_by_zone[zone]))
            if qps is not None:
                plan.rates[zone] = qps
            plan.changed[zone] = new[zone]
            states[zone] = new[zone]
        return plan
    for zone, state in list(states.items()):
        if state is new[zone]:
            continue
        qps = rates.qps(new[zone], len(ready_by_zone[zone]))
        if qps is not None:
            plan.rates[zone] = qps
        plan.changed[zone] = new[zone]
        states[zone] = new[zone]
    return plan


def health_gauges(ready: list[Any]) -> tuple[int, float, int]:
    """(zone size, percentage of healthy nodes, unhealthy nodes) of a zone's Ready
    statuses: upstream's three gauges."""
    unhealthy = sum(1 for s in ready if s != "True")
    size = len(ready)
    return size, (100.0 * (size - unhealthy) / size if size else 100.0), unhealthy
