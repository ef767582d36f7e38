"""The EndpointSlice controller's decisions as pure functions: the endpoints a Service's
pods give (one per pod and address type), how they are packed into slices starting from
the slices that exist (upstream's ``reconcileByPortMapping``), the labels, owner and
trigger time of each slice, and which slices to create, update and delete
(:func:`plan`).

Nothing here talks to the API server; :mod:`.controller` feeds these the mirror's objects
and performs the writes. Objects are the API server's JSON (dicts); a missing field
counts as absent. The mirror's objects are never changed: a slice to update is a copy.

# Order
Where upstream takes endpoints out of a Go map (any order), endpoints are taken here in
the order of the pods given; slices of equal size are filled in the order given. So a
sync is deterministic, and it writes the same slices upstream could have written.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import steward
from steward import SERVICES, copy_json
from steward.controllers.endpointslice import hints
from steward.controllers.endpointslice.hints import Event, TopologyCache

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
"""The Service a slice belongs to."""
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
"""Who writes a slice; the controller touches only slices carrying its own value."""
UPSTREAM_MANAGED_BY = "endpointslice-controller.k8s.io"
"""kube-controller-manager's value of :data:`MANAGED_BY_LABEL`."""
STEWARD_MANAGED_BY = "endpointslice-controller.steward.io"
"""Steward's own value, for running beside kube-controller-manager's endpointslice-controller
(each keeping to its own slices)."""
MANAGED_BY = UPSTREAM_MANAGED_BY
"""The default of ``--managed-by``: upstream's value, as a drop-in replacement writes it
(clients such as upstream's conformance specs look for it)."""
HEADLESS_LABEL = steward.endpoints.HEADLESS_LABEL
TRIGGER_TIME_ANNOTATION = steward.endpoints.TRIGGER_TIME_ANNOTATION
ZONE_LABEL = hints.ZONE_LABEL
MAX_ENDPOINTS_PER_SLICE = 100
"""Upstream's default of ``--max-endpoints-per-slice``."""
IPV4, IPV6 = "IPv4", "IPv6"
_RESERVED_LABELS = (SERVICE_NAME_LABEL, MANAGED_BY_LABEL, HEADLESS_LABEL)

Slice = dict[str, Any]
Endpoint = dict[str, Any]
Port = dict[str, Any]
NodeLookup = Callable[[str], Mapping[str, Any] | None]
"""A node by name, or None when there is no such node."""


# Address types ----------------------------------------------------------------------------
def address_types(service: Mapping[str, Any]) -> list[str]:
    """The slices' address types the Service needs (upstream's getAddressTypesForService):
    those of ``spec.ipFamilies``, in that order; without them the cluster IP's family, and
    for a headless Service both."""
    spec = service.get("spec") or {}
    found: list[str] = []
    for family in spec.get("ipFamilies") or ():
        if family in (IPV4, IPV6) and family not in found:
            found.append(family)
    if found:
        return found
    cluster_ip = spec.get("clusterIP") or ""
    if cluster_ip and cluster_ip != "None":
        ip = steward.endpoints.parse_ip(cluster_ip)
        return [IPV6 if ip is not None and ip.version == 6 else IPV4]
    return [IPV4, IPV6]


def _family(text: str) -> str:
    ip = steward.endpoints.parse_ip(text)
    return IPV6 if ip is not None and ip.version == 6 else IPV4


# Endpoints ----------------------------------------------------------------------------------
def endpoint_addresses(pod: Mapping[str, Any], address_type: str) -> list[str]:
    """The pod's IPs of one address type, in canonical text, in the pod's order."""
    found = []
    for entry in (pod.get("status") or {}).get("podIPs") or ():
        ip = steward.endpoints.parse_ip(str(entry.get("ip") or ""))
        if ip is not None and _family(str(ip)) == address_type:
            found.append(str(ip))
    return found


def endpoint_for(
    pod: dict[str, Any],
    node: Mapping[str, Any] | None,
    service: Mapping[str, Any],
    address_type: str,
) -> Endpoint:
    """The pod's endpoint (upstream's podToEndpoint): its addresses of the type (sorted,
    as upstream's hashing leaves them); conditions serving = Ready, terminating = being
    deleted, ready = ``publishNotReadyAddresses`` or serving and not terminating; node
    name; the node's zone; the hostname when the pod publishes it for the Service; a
    reference to the pod (no resource version)."""
    publish = bool((service.get("spec") or {}).get("publishNotReadyAddresses"))
    serving = steward.pods.is_ready(pod)
    terminating = steward.pods.is_deleting(pod)
    meta = pod.get("metadata") or {}
    endpoint: Endpoint = {
        "addresses": sorted(endpoint_addresses(pod, address_type)),
        "conditions": {
            "ready": publish or (serving and not terminating),
            "serving": serving,
            "terminating": terminating,
        },
        "targetRef": {
            "kind": "Pod",
            "namespace": meta.get("namespace", ""),
            "name": meta.get("name", ""),
            "uid": meta.get("uid", ""),
        },
    }
    node_name = (pod.get("spec") or {}).get("nodeName")
    if node_name:
        endpoint["nodeName"] = node_name
    zone = (((node or {}).get("metadata") or {}).get("labels") or {}).get(ZONE_LABEL)
    if zone:
        endpoint["zone"] = zone
    if steward.endpoints.sets_hostname(pod, service):
        endpoint["hostname"] = (pod.get("spec") or {}).get("hostname")
    return endpoint


EndpointKey = tuple[tuple[str, ...], str, str, str]


def endpoint_key(endpoint: Mapping[str, Any]) -> EndpointKey:
    """What identifies an endpoint across syncs (upstream's endpoint hash): its addresses,
    hostname and the namespace and name of its target. Everything else may change in
    place."""
    ref = endpoint.get("targetRef") or {}
    return (
        tuple(sorted(str(a) for a in endpoint.get("addresses") or ())),
        str(endpoint.get("hostname") or ""),
        str(ref.get("namespace") or ""),
        str(ref.get("name") or ""),
    )


_REF_FIELDS = ("kind", "namespace", "name", "uid", "apiVersion", "fieldPath")


def _ref_value(ref: Mapping[str, Any] | None) -> tuple[str, ...] | None:
    if ref is None:
        return None
    return tuple(str(ref.get(k) or "") for k in _REF_FIELDS)


def endpoints_equal_beyond_key(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Upstream's EndpointsEqualBeyondHash: node name, zone, the three conditions (unset
    differs from false) and the target reference (its resourceVersion aside) are equal.
    Hints are not compared: they are the hint heuristics' business."""
    ca, cb = a.get("conditions") or {}, b.get("conditions") or {}
    return (
        a.get("nodeName") == b.get("nodeName")
        and a.get("zone") == b.get("zone")
        and all(ca.get(k) == cb.get(k) for k in ("ready", "serving", "terminating"))
        and _ref_value(a.get("targetRef")) == _ref_value(b.get("targetRef"))
    )


# Ports ------------------------------------------------------------------------------------
def endpoint_ports(service: Mapping[str, Any], pod: Mapping[str, Any]) -> list[Port]:
    """The slice ports the pod serves the Service on (upstream's getEndpointPorts): each
    Service port whose target the pod resolves, with the Service port's name (empty
    included), protocol and appProtocol; none for a headless Service without ports."""
    spec = service.get("spec") or {}
    found: list[Port] = []
    for service_port in spec.get("ports") or ():
        number = steward.endpoints.find_port(pod, service_port)
        if number is None:
            continue
        port: Port = {
            "name": str(service_port.get("name") or ""),
            "port": int(number),
            "protocol": str(service_port.get("protocol") or ""),
        }
        if service_port.get("appProtocol") is not None:
            port["appProtocol"] = service_port["appProtocol"]
        found.append(port)
    return found


PortKey = tuple[tuple[str, int, str, bool, str], ...]


def port_key(ports: Iterable[Mapping[str, Any]] | None) -> PortKey:
    """The identity of a set of ports, whatever their order (upstream's PortMapKey)."""
    return tuple(
        sorted(
            (
                str(p.get("name") or ""),
                int(p.get("port") or 0),
                str(p.get("protocol") or ""),
                p.get("appProtocol") is None,
                str(p.get("appProtocol") or ""),
            )
            for p in ports or ()
        )
    )


# Slices -----------------------------------------------------------------------------------
def service_key(service: Mapping[str, Any]) -> str:
    meta = service.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def slice_labels(
    current: Mapping[str, str], service: Mapping[str, Any], managed_by: str
) -> tuple[dict[str, str], bool]:
    """Upstream's setEndpointSliceLabels: the slice's labels (the Service's except the
    reserved ones, the headless label for a Service without cluster IP, the Service's name
    and ``managed_by``) and whether the non-reserved ones differ from ``current``'s."""
    have = {k: v for k, v in current.items() if k not in _RESERVED_LABELS}
    svc_labels = (service.get("metadata") or {}).get("labels") or {}
    want = {k: v for k, v in svc_labels.items() if k not in _RESERVED_LABELS}
    changed = have != want
    if steward.endpoints.has_cluster_ip(service):
        want.pop(HEADLESS_LABEL, None)
    else:
        want[HEADLESS_LABEL] = ""
    want[SERVICE_NAME_LABEL] = str((service.get("metadata") or {}).get("name", ""))
    want[MANAGED_BY_LABEL] = managed_by
    return want, changed


_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def name_prefix(service_name: str) -> str:
    """The slices' ``generateName``: ``<service>-`` when that is a valid name prefix
    (a DNS subdomain once suffixed), else the bare name."""
    prefix = f"{service_name}-"
    masked = prefix[:-1] + "a"
    if len(masked) <= 253 and _DNS_SUBDOMAIN.match(masked):
        return prefix
    return service_name


def new_slice(
    service: Mapping[str, Any], ports: Sequence[Port], address_type: str, managed_by: str
) -> Slice:
    """A slice to create for the Service (no endpoints yet): generated name, the
    Service's controller reference, labels, ports and address type."""
    meta = service.get("metadata") or {}
    labels, _ = slice_labels({}, service, managed_by)
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "generateName": name_prefix(str(meta.get("name", ""))),
            "namespace": meta.get("namespace", ""),
            "labels": labels,
            "ownerReferences": [steward.controller_ref(service, SERVICES)],
        },
        "addressType": address_type,
        "endpoints": [],
        "ports": [dict(p) for p in ports],
    }


def owned_by(slice_: Mapping[str, Any], service: Mapping[str, Any]) -> bool:
    """Whether the slice's controller reference names the Service (by UID)."""
    ref = steward.owner_of(slice_, SERVICES)
    return ref is not None and ref.uid == (service.get("metadata") or {}).get("uid")


def _name(slice_: Mapping[str, Any]) -> str:
    return str((slice_.get("metadata") or {}).get("name") or "")


def _count(slice_: Mapping[str, Any]) -> int:
    return len(slice_.get("endpoints") or ())


def slice_to_fill(slices: Iterable[Slice], count: int, most: int) -> Slice | None:
    """Upstream's getSliceToFill: the slice closest to full once ``count`` endpoints are
    added without going over ``most``; None when none has room."""
    closest, best = most, None
    for slice_ in slices:
        diff = most - (count + _count(slice_))
        if 0 <= diff < closest:
            closest, best = diff, slice_
            if diff == 0:
                break
    return best


def _placeholder_equal(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Upstream's placeholderSliceCompare: namespace, labels, address type, endpoints and
    ports (empty equals missing); names, owners and annotations aside."""
    ma, mb = a.get("metadata") or {}, b.get("metadata") or {}
    return (
        ma.get("namespace") == mb.get("namespace")
        and (ma.get("labels") or {}) == (mb.get("labels") or {})
        and a.get("addressType") == b.get("addressType")
        and (a.get("endpoints") or []) == (b.get("endpoints") or [])
        and (a.get("ports") or []) == (b.get("ports") or [])
    )


def stamp_trigger_time(slice_: Slice, trigger_time: datetime | None) -> None:
    """Set the last-change trigger time annotation, or remove it when there is none."""
    meta = slice_.setdefault("metadata", {})
    annotations = dict(meta.get("annotations") or {})
    steward.endpoints.set_trigger_time(annotations, trigger_time)
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)


# Planning ---------------------------------------------------------------------------------
@dataclass
class Plan:
    """What one sync writes: slices to create, to update (copies carrying their names) and
    to delete (as the mirror holds them), Events for the Service, and why pods were left
    out (their node is missing), which makes the sync end in an error after writing."""

    create: list[Slice] = field(default_factory=list)
    update: list[Slice] = field(default_factory=list)
    delete: list[Slice] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.create or self.update or self.delete)


@dataclass(frozen=True)
class Settings:
    """The controller-wide inputs of a plan."""

    managed_by: str = MANAGED_BY
    max_endpoints: int = MAX_ENDPOINTS_PER_SLICE
    prefer_same: bool = True
    """Whether PreferSameZone / PreferSameNode count as close distributions (upstream's
    PreferSameTrafficDistribution gate, on by default)."""


def _by_port_mapping(
    service: Mapping[str, Any],
    existing: Sequence[Slice],
    desired: dict[EndpointKey, Endpoint],
    ports: Sequence[Port],
    address_type: str,
    settings: Settings,
) -> tuple[list[Slice], list[Slice], list[Slice]]:
    """Upstream's reconcileByPortMapping for one set of ports: (create, update, delete).

    1. Existing slices keep their desired endpoints (in the desired version), lose the
       others, and are updated when that changed anything or their labels are wrong;
       emptied ones are deleted.
    2. Endpoints still to place fill the slices being updated anyway, fullest first.
    3. The rest go to the unchanged slice they fit best (when fewer than a slice holds),
       else to new slices.
    """
    most = settings.max_endpoints
    by_name: dict[str, Slice] = {}
    unchanged: dict[str, None] = {}
    to_update: dict[str, None] = {}
    to_delete: dict[str, None] = {}
    for slice_ in existing:
        name = _name(slice_)
        by_name[name] = slice_
        kept: list[Endpoint] = []
        changed = False
        for endpoint in slice_.get("endpoints") or ():
            want = desired.pop(endpoint_key(endpoint), None)
            if want is not None:
                kept.append(copy_json(want))
                changed = changed or not endpoints_equal_beyond_key(want, endpoint)
        labels, labels_changed = slice_labels(
            (slice_.get("metadata") or {}).get("labels") or {}, service, settings.managed_by
        )
        if changed or len(kept) != _count(slice_):
            if not kept:
                to_delete[name] = None
                continue
            copy = copy_json(slice_)
            copy["endpoints"] = kept
            copy["metadata"]["labels"] = labels
            by_name[name] = copy
            to_update[name] = None
        elif labels_changed:
            copy = copy_json(slice_)
            copy["metadata"]["labels"] = labels
            by_name[name] = copy
            to_update[name] = None
        else:
            unchanged[name] = None

    def take() -> Endpoint:
        return desired.pop(next(iter(desired)))

    if desired and to_update:
        fullest_first = sorted((by_name[n] for n in to_update), key=_count, reverse=True)
        for slice_ in fullest_first:
            while desired and _count(slice_) < most:
                slice_.setdefault("endpoints", []).append(take())

    create: list[Slice] = []
    while desired:
        target = None
        if len(desired) < most and unchanged:
            target = slice_to_fill((by_name[n] for n in unchanged), len(desired), most)
        if target is None:
            target = new_slice(service, ports, address_type, settings.managed_by)
        else:
            target = copy_json(target)
            by_name[_name(target)] = target
        while desired and _count(target) < most:
            target.setdefault("endpoints", []).append(take())
        if _name(target):
            to_update[_name(target)] = None
            unchanged.pop(_name(target), None)
        else:
            create.append(target)
    return (
        create,
        [by_name[n] for n in to_update],
        [by_name[n] for n in to_delete],
    )


def _unchanged(
    existing: Iterable[Slice], update: Iterable[Slice], delete: Iterable[Slice]
) -> list[Slice]:
    changed = {_name(s) for s in [*update, *delete]}
    return [s for s in existing if _name(s) not in changed]


def _plan_address_type(
    service: dict[str, Any],
    pods: Iterable[dict[str, Any]],
    existing: Sequence[Slice],
    nodes: NodeLookup,
    address_type: str,
    settings: Settings,
    topology: TopologyCache | None,
    trigger_time: datetime | None,
) -> Plan:
    """Upstream's reconcileByAddressType and finalize, for one address type."""
    result = Plan()
    spec = service.get("spec") or {}
    meta = service.get("metadata") or {}
    publish = bool(spec.get("publishNotReadyAddresses"))
    create: list[Slice] = []
    update: list[Slice] = []
    delete: list[Slice] = []
    existing_by_ports: dict[PortKey, list[Slice]] = {}
    for slice_ in existing:
        if owned_by(slice_, service):
            existing_by_ports.setdefault(port_key(slice_.get("ports")), []).append(slice_)
        else:
            delete.append(slice_)
    desired: dict[PortKey, dict[EndpointKey, Endpoint]] = {}
    desired_ports: dict[PortKey, list[Port]] = {}
    for pod in pods:
        if not steward.endpoints.pod_in_endpoints(pod, include_terminating=True):
            continue
        ports = endpoint_ports(service, pod)
        key = port_key(ports)
        wanted = desired.setdefault(key, {})
        desired_ports.setdefault(key, ports)
        node_name = str((pod.get("spec") or {}).get("nodeName") or "")
        node = nodes(node_name)
        if node is None and not publish:
            pmeta = pod.get("metadata") or {}
            result.errors.append(
                f"skipping Pod {pmeta.get('name', '')} for Service {service_key(service)}: "
                f"Node {node_name} Not Found"
            )
            continue
        endpoint = endpoint_for(pod, node, service, address_type)
        if endpoint["addresses"]:
            wanted[endpoint_key(endpoint)] = endpoint
    for key, wanted in desired.items():
        c, u, d = _by_port_mapping(
            service,
            existing_by_ports.get(key, []),
            wanted,
            desired_ports[key],
            address_type,
            settings,
        )
        create += c
        update += u
        delete += d
    for key, slices in existing_by_ports.items():
        if key not in desired:
            delete += slices
    if len(existing) == len(delete) and not create:
        placeholder = new_slice(service, [], address_type, settings.managed_by)
        if len(delete) == 1 and _placeholder_equal(delete[0], placeholder):
            delete = []
        else:
            create.append(placeholder)

    skey = service_key(service)
    annotations = meta.get("annotations") or {}
    auto = hints.hints_annotation_enabled(annotations)
    distribution = spec.get("trafficDistribution")
    use_distribution = (
        hints.valid_traffic_distribution(distribution, settings.prefer_same) and not auto
    )
    unchanged = _unchanged(existing, update, delete)
    if topology is not None and auto:
        create, update, events = topology.add_hints(skey, address_type, create, update, unchanged)
        result.events += events
    else:
        if topology is not None:
            if topology.has_populated_hints(skey):
                message = hints.with_address_type(hints.HINTS_DISABLED, address_type)
                result.events.append(Event("Warning", hints.DISABLED_REASON, message))
            topology.remove_service_hints(skey, address_type)
        if not use_distribution:
            create, update = hints.remove_hints(create, update, unchanged)
    if use_distribution:
        create, update = hints.traffic_distribution_hints(
            distribution, create, update, _unchanged(existing, update, delete)
        )

    # finalize: a slice to create takes the place of one to delete (same address type,
    # owned by this Service) rather than deleting one and creating another.
    i = 0
    while i < len(delete) and create:
        gone, new = delete[i], create[-1]
        if gone.get("addressType") == new.get("addressType") and owned_by(gone, service):
            new["metadata"]["name"] = _name(gone)
            create.pop()
            update.append(new)
            delete.pop(i)
        else:
            i += 1
    if meta.get("deletionTimestamp"):
        create = []  # the garbage collector is deleting what we would create
    for slice_ in [*create, *update]:
        stamp_trigger_time(slice_, trigger_time)
    result.create, result.update, result.delete = create, update, delete
    return result


def plan(
    service: dict[str, Any],
    pods: Iterable[dict[str, Any]],
    existing: Sequence[Slice],
    nodes: NodeLookup,
    *,
    settings: Settings | None = None,
    topology: TopologyCache | None = None,
    trigger_time: datetime | None = None,
) -> Plan:
    """What to write so the Service's slices show its pods (upstream's Reconcile).

    ``pods`` are those its selector matches (any state); ``existing`` the slices managed
    by this controller for the Service, without those being deleted. Slices of address
    types the Service no longer has are deleted, as are slices it does not own; per
    address type the endpoints are packed as :func:`_by_port_mapping` says, a Service
    without endpoints gets one empty placeholder slice, and hints follow
    ``trafficDistribution`` or the topology annotation. Every slice written carries the
    trigger time (or loses the annotation when it is None)."""
    settings = settings or Settings()
    wanted = address_types(service)
    pods = list(pods)
    result = Plan()
    by_type: dict[str, list[Slice]] = {t: [] for t in wanted}
    stale: list[Slice] = []
    for slice_ in existing:
        address_type = str(slice_.get("addressType") or "")
        if address_type in by_type:
            by_type[address_type].append(slice_)
        else:
            if topology is not None:
                topology.remove_service_hints(service_key(service), address_type)
            stale.append(slice_)
    for address_type in wanted:
        part = _plan_address_type(
            service,
            pods,
            by_type[address_type],
            nodes,
            address_type,
            settings,
            topology,
            trigger_time,
        )
        result.create += part.create
        result.update += part.update
        result.delete += part.delete
        result.events += part.events
        result.errors += part.errors
    result.delete += stale
    return result
