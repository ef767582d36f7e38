"""Topology hints on EndpointSlice endpoints, as upstream assigns them: the heuristics of a
Service's ``spec.trafficDistribution`` (k8s.io/endpointslice/trafficdist), and the
topology cache behind the ``service.kubernetes.io/topology-mode: Auto`` annotation
(k8s.io/endpointslice/topologycache), which shares each zone's endpoints out in
proportion to the zone's allocatable CPU.

Slices are the API server's JSON (dicts). Slices to create or update are this sync's own
copies and are changed in place; unchanged slices are the mirror's and are never
changed: one that needs new hints is copied onto the list of updates.

Where upstream walks a Go map (zones to receive endpoints, allocations), zones are taken
in name order here, so the same inputs always give the same hints.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import steward
from steward import copy_json

Slice = dict[str, Any]
Endpoint = dict[str, Any]

PREFER_CLOSE = "PreferClose"
PREFER_SAME_ZONE = "PreferSameZone"
PREFER_SAME_NODE = "PreferSameNode"
TOPOLOGY_MODE_ANNOTATION = "service.kubernetes.io/topology-mode"
DEPRECATED_HINTS_ANNOTATION = "service.kubernetes.io/topology-aware-hints"
"""Takes precedence over :data:`TOPOLOGY_MODE_ANNOTATION` when both are set (upstream)."""
ZONE_LABEL = "topology.kubernetes.io/zone"
OVERLOAD_THRESHOLD = 0.2
"""The most overload any endpoint should see (upstream's overloadThreshold)."""
_EXCLUDED_NODE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")

# The Events' messages (upstream's topologycache/event.go).
NO_ZONE_SPECIFIED = "One or more endpoints do not have a zone specified"
NO_ALLOCATED_HINTS = "No hints allocated for zones"
HINTS_ENABLED = "Topology Aware Hints has been enabled"
HINTS_DISABLED = "Topology Aware Hints has been disabled"
INSUFFICIENT_NODE_INFO = (
    "Insufficient Node information: allocatable CPU or zone not specified on one or more nodes"
)
ONE_ZONE_ONLY = "Nodes only ready in one zone"
TOO_FEW_ENDPOINTS = "Insufficient number of endpoints"
OVER_THRESHOLD = (
    "Unable to allocate minimum required endpoints to each zone without exceeding overload "
    "threshold"
)
DISABLED_REASON = "TopologyAwareHintsDisabled"
ENABLED_REASON = "TopologyAwareHintsEnabled"


@dataclass(frozen=True)
class Event:
    """An Event to record on the Service."""

    type: str
    reason: str
    message: str


def with_address_type(message: str, address_type: str) -> str:
    """Upstream's FormatWithAddressType."""
    return f"{message}, addressType: {address_type}"


def hints_annotation_enabled(annotations: Mapping[str, str]) -> bool:
    """Whether the Service asks for topology-aware hints (``Auto`` or ``auto`` in the
    deprecated annotation if present, else in ``topology-mode``)."""
    value = annotations.get(DEPRECATED_HINTS_ANNOTATION)
    if value is None:
        value = annotations.get(TOPOLOGY_MODE_ANNOTATION)
    return value in ("Auto", "auto")


def valid_traffic_distribution(value: str | None, prefer_same: bool = True) -> bool:
    """Whether ``spec.trafficDistribution`` asks for close endpoints: PreferClose, or (with
    ``prefer_same``, upstream's PreferSameTrafficDistribution gate) PreferSameZone or
    PreferSameNode."""
    if value == PREFER_CLOSE:
        return True
    return prefer_same and value in (PREFER_SAME_ZONE, PREFER_SAME_NODE)


def endpoint_ready(endpoint: Mapping[str, Any]) -> bool:
    return (endpoint.get("conditions") or {}).get("ready") is True


def _endpoints(slice_: Mapping[str, Any]) -> list[Endpoint]:
    return list(slice_.get("endpoints") or ())


# trafficDistribution ----------------------------------------------------------------------
def _close_hints(endpoint: Mapping[str, Any], node_hints: bool) -> dict[str, Any] | None:
    hints: dict[str, Any] = {}
    if endpoint.get("zone") is not None:
        hints["forZones"] = [{"name": endpoint["zone"]}]
    if endpoint.get("nodeName") is not None and node_hints:
        hints["forNodes"] = [{"name": endpoint["nodeName"]}]
    return hints or None


def _close_needs_update(slice_: Mapping[str, Any], node_hints: bool) -> bool:
    for endpoint in _endpoints(slice_):
        if not endpoint_ready(endpoint):
            continue
        hints = endpoint.get("hints") or {}
        zones, nodes = hints.get("forZones") or [], hints.get("forNodes") or []
        zone, node = endpoint.get("zone"), endpoint.get("nodeName")
        if zone is not None:
            if "hints" not in endpoint or len(zones) != 1 or zones[0].get("name") != zone:
                return True
        elif zones:
            return True
        if node is not None and node_hints:
            if "hints" not in endpoint or len(nodes) != 1 or nodes[0].get("name") != node:
                return True
        elif nodes:
            return True
    return False


def _set_close_hints(slice_: Slice, node_hints: bool) -> None:
    for endpoint in slice_.get("endpoints") or ():
        if not endpoint_ready(endpoint):
            continue
        hints = _close_hints(endpoint, node_hints)
        if hints is None:
            endpoint.pop("hints", None)
        else:
            endpoint["hints"] = hints


def _drop_hints(slice_: Slice) -> None:
    for endpoint in slice_.get("endpoints") or ():
        endpoint.pop("hints", None)


def traffic_distribution_hints(
    distribution: str | None,
    create: list[Slice],
    update: list[Slice],
    unchanged: Iterable[Slice],
) -> tuple[list[Slice], list[Slice]]:
    """Upstream's trafficdist.ReconcileHints: with a "close" distribution every ready
    endpoint is hinted to its own zone (and, for PreferSameNode, its own node); otherwise
    hints are removed. Unchanged slices whose hints are wrong join the updates (copied)."""
    close = distribution in (PREFER_CLOSE, PREFER_SAME_ZONE, PREFER_SAME_NODE)
    node_hints = distribution == PREFER_SAME_NODE
    for slice_ in unchanged:
        if close:
            stale = _close_needs_update(slice_, node_hints)
        else:
            stale = any("hints" in e for e in _endpoints(slice_))
        if stale:
            update.append(copy_json(slice_))
    for slice_ in [*create, *update]:
        if close:
            _set_close_hints(slice_, node_hints)
        else:
            _drop_hints(slice_)
    return create, update


def remove_hints(
    create: list[Slice], update: list[Slice], unchanged: Iterable[Slice]
) -> tuple[list[Slice], list[Slice]]:
    """Upstream's RemoveHintsFromSlices: no endpoint keeps a hint; unchanged slices that
    had one join the updates (copied)."""
    for slice_ in [*create, *update]:
        _drop_hints(slice_)
    for slice_ in unchanged:
        if any("hints" in e for e in _endpoints(slice_)):
            copy = copy_json(slice_)
            _drop_hints(copy)
            update.append(copy)
    return create, update


# The topology cache -------------------------------------------------------------------------
def cpu_millis(quantity: Any) -> int:
    """A CPU quantity (``"4"``, ``"3500m"``, ``"1.5"``) in millicores, rounded up as
    ``Quantity.MilliValue``; 0 when absent or unreadable."""
    try:
        return steward.parse_quantity_milli(str(quantity if quantity is not None else "").strip())
    except ValueError:
        return 0


def _node_ready(node: Mapping[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def node_topology(node: Mapping[str, Any]) -> tuple[bool, str]:
    """What of a node the topology cache depends on: readiness and zone (upstream queues
    a topology check when either changes)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return _node_ready(node), str(labels.get(ZONE_LABEL) or "")


@dataclass
class _Allocation:
    minimum: int
    maximum: int
    desired: float


class TopologyCache:
    """Upstream's TopologyCache: the share of allocatable CPU of each zone (from ready
    nodes that are not control-plane nodes) and, per Service and address type, the hints
    last allocated to each zone. Not thread-safe: use it from the event loop.

    Until :meth:`set_nodes` is first called it knows no zone (hints are refused with
    "Nodes only ready in one zone", as upstream's before its first node event)."""

    def __init__(self) -> None:
        self.ratios: dict[str, float] | None = {}
        """Each zone's share of the CPU; None when some node lacks a zone or CPU."""
        self._by_service: dict[str, dict[str, dict[str, int]]] = {}
        self._populated: set[str] = set()

    # Nodes ----------------------------------------------------------------------------------
    def set_nodes(self, nodes: Iterable[Mapping[str, Any]]) -> None:
        """Recompute the zones' CPU shares from all nodes (upstream's SetNodes): a ready
        node without a zone or allocatable CPU makes the information insufficient, as
        do fewer than two zones."""
        cpu_by_zone: dict[str, int] = {}
        sufficient = True
        for node in nodes:
            labels = (node.get("metadata") or {}).get("labels") or {}
            if any(label in labels for label in _EXCLUDED_NODE_LABELS):
                continue
            if not _node_ready(node):
                continue
            zone = str(labels.get(ZONE_LABEL) or "")
            cpu = cpu_millis(((node.get("status") or {}).get("allocatable") or {}).get("cpu"))
            if not zone or cpu == 0:
                cpu_by_zone, sufficient = {}, False
                break
            cpu_by_zone[zone] = cpu_by_zone.get(zone, 0) + cpu
        total = sum(cpu_by_zone.values())
        if total == 0 or not sufficient or len(cpu_by_zone) < 2:
            self.ratios = None
        else:
            self.ratios = {zone: cpu / total for zone, cpu in cpu_by_zone.items()}

    def overloaded_services(self) -> list[str]:
        """``namespace/name`` of the Services whose hints overload a zone given the
        current CPU shares (upstream queues them after a node change)."""
        return [
            key
            for key, by_type in self._by_service.items()
            if any(_overloaded(zones, self.ratios) for zones in by_type.values())
        ]

    # Services ---------------------------------------------------------------------------------
    def has_populated_hints(self, service_key: str) -> bool:
        return service_key in self._populated

    def remove_service_hints(self, service_key: str, address_type: str) -> None:
        """Forget the hints allocated to one address type of the Service."""
        by_type = self._by_service.get(service_key)
        if by_type is not None:
            by_type.pop(address_type, None)
            if not by_type:
                del self._by_service[service_key]
        self._populated.discard(service_key)

    def forget(self, service_key: str) -> None:
        """Drop a deleted Service."""
        self._by_service.pop(service_key, None)
        self._populated.discard(service_key)

    def _allocations(self, endpoints: int) -> tuple[dict[str, _Allocation] | None, Event | None]:
        ratios = self.ratios
        if ratios is None:
            return None, Event("Warning", DISABLED_REASON, INSUFFICIENT_NODE_INFO)
        if len(ratios) < 2:
            return None, Event("Warning", DISABLED_REASON, ONE_ZONE_ONLY)
        if len(ratios) > endpoints:
            message = f"{TOO_FEW_ENDPOINTS} ({endpoints} endpoints, {len(ratios)} zones)"
            return None, Event("Warning", DISABLED_REASON, message)
        remaining, minimum_total = endpoints, 0
        allocations: dict[str, _Allocation] = {}
        for zone in sorted(ratios):
            desired = ratios[zone] * endpoints
            minimum = math.ceil(desired * (1 / (1 + OVERLOAD_THRESHOLD)))
            allocations[zone] = _Allocation(minimum, 0, max(desired, float(minimum)))
            minimum_total += minimum
            remaining -= minimum
            if remaining < 0:
                message = f"{OVER_THRESHOLD} ({endpoints} endpoints, {len(ratios)} zones)"
                return None, Event("Warning", DISABLED_REASON, message)
        for allocation in allocations.values():
            allocation.maximum = allocation.minimum + endpoints - minimum_total
        return allocations, None

    def add_hints(
        self,
        service_key: str,
        address_type: str,
        create: list[Slice],
        update: list[Slice],
        unchanged: list[Slice],
    ) -> tuple[list[Slice], list[Slice], list[Event]]:
        """Upstream's AddHints: every ready endpoint is hinted to a zone so that each zone
        gets endpoints in proportion to its CPU (its own zone first, then some moved from
        zones with too many to zones with too few). When that is impossible (see the
        Events' messages) every hint is removed and a Warning says why; the first time
        hints are given, a Normal Event says so."""
        ready = sum(
            1 for s in [*create, *update, *unchanged] for e in _endpoints(s) if endpoint_ready(e)
        )
        allocations, refused = self._allocations(ready)
        if allocations is None:
            assert refused is not None
            event = Event(
                refused.type, refused.reason, with_address_type(refused.message, address_type)
            )
            return self._give_up(service_key, address_type, create, update, unchanged, event)
        allocated: dict[str, int] = {}
        still_unchanged: list[Slice] = []
        for slice_ in unchanged:
            by_zone = _hints_by_zone(slice_, allocated, allocations)
            if by_zone is None:
                update.append(copy_json(slice_))
            else:
                still_unchanged.append(slice_)
                for zone, count in by_zone.items():
                    allocated[zone] = allocated.get(zone, 0) + count
        allocatable = [*create, *update]
        for slice_ in allocatable:
            for endpoint in slice_.get("endpoints") or ():
                if not endpoint_ready(endpoint):
                    continue  # keeps what it had, as upstream's (which clears a copy)
                zone = endpoint.get("zone")
                if not zone:
                    event = Event(
                        "Warning",
                        DISABLED_REASON,
                        with_address_type(NO_ZONE_SPECIFIED, address_type),
                    )
                    return self._give_up(
                        service_key, address_type, create, update, still_unchanged, event
                    )
                allocated[zone] = allocated.get(zone, 0) + 1
                endpoint["hints"] = {"forZones": [{"name": zone}]}
        giving, receiving = _giving_and_receiving(allocations, allocated)
        for zone, diff in _redistribute(allocatable, giving, receiving).items():
            allocated[zone] = allocated.get(zone, 0) + diff
        if not allocated:
            event = Event(
                "Warning", DISABLED_REASON, with_address_type(NO_ALLOCATED_HINTS, address_type)
            )
            return self._give_up(service_key, address_type, create, update, still_unchanged, event)
        events: list[Event] = []
        if service_key not in self._populated:
            events.append(
                Event("Normal", ENABLED_REASON, with_address_type(HINTS_ENABLED, address_type))
            )
        self._by_service.setdefault(service_key, {})[address_type] = allocated
        self._populated.add(service_key)
        return create, update, events

    def _give_up(
        self,
        service_key: str,
        address_type: str,
        create: list[Slice],
        update: list[Slice],
        unchanged: list[Slice],
        event: Event,
    ) -> tuple[list[Slice], list[Slice], list[Event]]:
        self.remove_service_hints(service_key, address_type)
        create, update = remove_hints(create, update, unchanged)
        return create, update, [event]


def _hints_by_zone(
    slice_: Mapping[str, Any], allocated: Mapping[str, int], allocations: Mapping[str, _Allocation]
) -> dict[str, int] | None:
    """The hints per zone of an unchanged slice, or None when it must be rewritten (a
    ready endpoint without hints, a hint for a zone no longer allocated, or more hints
    than a zone's maximum)."""
    by_zone: dict[str, int] = {}
    for endpoint in _endpoints(slice_):
        if not endpoint_ready(endpoint):
            continue
        zones = (endpoint.get("hints") or {}).get("forZones") or []
        if not zones:
            return None
        for hint in zones:
            zone = hint.get("name")
            if zone not in allocations:
                return None
            by_zone[zone] = by_zone.get(zone, 0) + 1
    for zone, count in by_zone.items():
        if count + allocated.get(zone, 0) > allocations[zone].maximum:
            return None
    return by_zone


def _most(zones: Mapping[str, float]) -> tuple[str, float]:
    best, most = "", 0.0
    for zone in sorted(zones):
        if zones[zone] > most:
            best, most = zone, zones[zone]
    return best, most


def _giving_and_receiving(
    allocations: Mapping[str, _Allocation], allocated: Mapping[str, int]
) -> tuple[dict[str, int], dict[str, int]]:
    """How many endpoints each zone gives away and receives (upstream's
    getGivingAndReceivingZones)."""
    giving_wanted: dict[str, float] = {}
    receiving_wanted: dict[str, float] = {}
    for zone, allocation in allocations.items():
        have = float(allocated.get(zone, 0))
        if have > allocation.desired:
            giving_wanted[zone] = have - allocation.desired
        elif have < allocation.desired:
            receiving_wanted[zone] = allocation.desired - have
    giving: dict[str, int] = {}
    receiving: dict[str, int] = {}
    while True:
        give_zone, to_give = _most(giving_wanted)
        take_zone, to_take = _most(receiving_wanted)
        if (
            not give_zone
            or not take_zone
            or (to_give < 1.0 and to_take < 1.0)
            or to_give < 0.5
            or to_take < 0.5
        ):
            return giving, receiving
        giving[give_zone] = giving.get(give_zone, 0) + 1
        giving_wanted[give_zone] -= 1
        receiving[take_zone] = receiving.get(take_zone, 0) + 1
        receiving_wanted[take_zone] -= 1


def _redistribute(
    slices: Iterable[Slice], giving: dict[str, int], receiving: dict[str, int]
) -> dict[str, int]:
    """Re-hint endpoints of giving zones to receiving zones; the change per zone."""
    changes: dict[str, int] = {}
    for slice_ in slices:
        for endpoint in slice_.get("endpoints") or ():
            if not endpoint_ready(endpoint):
                continue
            if not giving or not receiving:
                return changes
            zone = endpoint.get("zone")
            if not zone or giving.get(zone, 0) <= 0:
                continue
            for target in sorted(receiving):
                if receiving[target] <= 0:
                    continue
                endpoint["hints"] = {"forZones": [{"name": target}]}
                giving[zone] -= 1
                if giving[zone] == 0:
                    del giving[zone]
                receiving[target] -= 1
                if receiving[target] == 0:
                    del receiving[target]
                changes[target] = changes.get(target, 0) + 1
                changes[zone] = changes.get(zone, 0) - 1
                break
    return changes


def _overloaded(zones: Mapping[str, int], ratios: Mapping[str, float] | None) -> bool:
    """Whether the hints per zone leave some zone below its share (upstream's
    serviceOverloaded)."""
    if not zones:
        return False
    if not ratios:
        return True
    total = float(sum(zones.values()))
    for zone, ratio in ratios.items():
        if zone not in zones:
            return True
        if zones[zone] < math.ceil(total * ratio * (1 / (1 + OVERLOAD_THRESHOLD))):
            return True
    return False
