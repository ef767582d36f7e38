"""The Endpoints controller's decisions as pure functions: the addresses and ports a
Service's pods give, their canonical layout (upstream's ``RepackSubsets`` and
``SortSubsets``), the truncation past :data:`MAX_CAPACITY` addresses, the labels and
annotations of the object, and whether the object as it is needs a write at all.

Nothing here talks to the API server; :mod:`.controller` feeds these the mirror's objects
and performs the writes. Objects are the API server's JSON (dicts); a missing field
counts as absent.

# Canonical order
Upstream orders a subset's ports, and the subsets themselves, by the FNV-128a hash of
their Go ``%#v`` rendering (go-spew, as ``k8s.io/utils/dump.ForHash`` configures it).
:func:`sort_subsets` renders the same text for the three types involved
(``EndpointSubset``, ``EndpointAddress``, ``EndpointPort``), so Steward writes the same
order as kube-controller-manager, and an object one of them wrote compares equal for
the other.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import steward
from steward import copy_json

MAX_CAPACITY = 1000
"""Most addresses (ready and not ready) one Endpoints object holds (upstream's maxCapacity)."""
OVER_CAPACITY_ANNOTATION = "endpoints.kubernetes.io/over-capacity"
"""Set to :data:`TRUNCATED` while addresses were left out."""
TRUNCATED = "truncated"
TRIGGER_TIME_ANNOTATION = steward.endpoints.TRIGGER_TIME_ANNOTATION
HEADLESS_LABEL = steward.endpoints.HEADLESS_LABEL
MANAGED_BY_LABEL = "endpoints.kubernetes.io/managed-by"
"""Upstream's ``LabelManagedBy``: set on every Endpoints object the controller writes."""
MANAGED_BY = "endpoint-controller"
"""The label's value (upstream's ``ControllerName``; Steward writes the same, since it
takes the place of upstream's controller)."""
LEADER_ANNOTATION = "control-plane.alpha.kubernetes.io/leader"
"""Endpoints carrying it are leader-election records: never queued as leftovers."""

Subset = dict[str, Any]
Address = dict[str, Any]
Port = dict[str, Any]


# Addresses and ports ------------------------------------------------------------------
def _is_ipv6(text: str) -> bool:
    return isinstance(steward.endpoints.parse_ip(text), ipaddress.IPv6Address)


def endpoint_address(service: Mapping[str, Any], pod: Mapping[str, Any]) -> Address | None:
    """The pod's address for the Service: the pod IP of the Service's (first) IP family,
    its node name and a reference to the pod; None when the pod has no IP of that
    family. Without ``spec.ipFamilies`` the family is the cluster IP's, or for a
    headless Service the pod's primary IP's (upstream's podToEndpointAddressForService)."""
    spec = service.get("spec") or {}
    status = pod.get("status") or {}
    families = spec.get("ipFamilies") or ()
    cluster_ip = spec.get("clusterIP") or ""
    if families:
        want_v6 = families[0] == "IPv6"
    elif cluster_ip and cluster_ip != "None":
        want_v6 = _is_ipv6(cluster_ip)
    else:
        want_v6 = _is_ipv6(status.get("podIP") or "")
    found = None
    for entry in status.get("podIPs") or ():
        ip = steward.endpoints.parse_ip(str(entry.get("ip") or ""))
        if ip is not None and isinstance(ip, ipaddress.IPv6Address) == want_v6:
            found = str(ip)
            break
    if found is None:
        return None
    meta = pod.get("metadata") or {}
    return {
        "ip": found,
        "nodeName": str((pod.get("spec") or {}).get("nodeName") or ""),
        "targetRef": {
            "kind": "Pod",
            "namespace": meta.get("namespace", ""),
            "name": meta.get("name", ""),
            "uid": meta.get("uid", ""),
        },
    }


def endpoint_port(service_port: Mapping[str, Any], number: int) -> Port:
    """The Endpoints port of a Service port resolved to ``number`` on a pod."""
    port: Port = {"port": int(number)}
    if service_port.get("name"):
        port["name"] = service_port["name"]
    if service_port.get("protocol"):
        port["protocol"] = service_port["protocol"]
    if service_port.get("appProtocol") is not None:
        port["appProtocol"] = service_port["appProtocol"]
    return port


def desired_subsets(service: Mapping[str, Any], pods: Iterable[dict[str, Any]]) -> list[Subset]:
    """The Service's subsets from the pods its selector matches, repacked and sorted.

    A pod counts as upstream's ShouldPodBeInEndpoints says (terminating pods only with
    ``publishNotReadyAddresses``); it is ready with ``publishNotReadyAddresses`` or a
    True Ready condition, else not ready. Each Service port the pod resolves (named
    ports by name and protocol) gives a subset; a headless Service without ports gives
    one without ports; a Service port the pod lacks leaves that pod out of that port."""
    spec = service.get("spec") or {}
    publish = bool(spec.get("publishNotReadyAddresses"))
    service_ports = spec.get("ports") or ()
    subsets: list[Subset] = []
    for pod in pods:
        if not steward.endpoints.pod_in_endpoints(pod, publish):
            continue
        address = endpoint_address(service, pod)
        if address is None:
            continue
        if steward.endpoints.sets_hostname(pod, service):
            address["hostname"] = (pod.get("spec") or {}).get("hostname")
        field = "addresses" if publish or steward.pods.is_ready(pod) else "notReadyAddresses"
        if not service_ports:
            if spec.get("clusterIP") == "None":
                subsets.append({field: [address]})
            continue
        for service_port in service_ports:
            number = steward.endpoints.find_port(pod, service_port)
            if number is None:
                continue
            subsets.append({field: [address], "ports": [endpoint_port(service_port, number)]})
    return repack(subsets)


# Repacking and sorting -----------------------------------------------------------------
_PortKey = tuple[str, int, str, str | None]
_SENTINEL: _PortKey = ("", -1, "", None)
"""Stands for "no ports" while repacking (upstream's ``EndpointPort{Port: -1}``)."""


def _port_key(port: Mapping[str, Any]) -> _PortKey:
    return (
        str(port.get("name") or ""),
        int(port.get("port") or 0),
        str(port.get("protocol") or ""),
        port.get("appProtocol"),
    )


def _port_dict(key: _PortKey) -> Port:
    name, number, protocol, app = key
    port: Port = {"port": number}
    if name:
        port["name"] = name
    if protocol:
        port["protocol"] = protocol
    if app is not None:
        port["appProtocol"] = app
    return port


def _address_key(address: Mapping[str, Any]) -> tuple[str, str]:
    ref = address.get("targetRef")
    return (str(address.get("ip") or ""), str((ref or {}).get("uid") or ""))


def repack(subsets: Sequence[Mapping[str, Any]]) -> list[Subset]:
    """Upstream's RepackSubsets: every address once (by IP and target UID), grouped with
    exactly the ports it serves — addresses that serve the same ports with the same
    readiness share a subset — then :func:`sort_subsets`. An address not ready on some
    port stays not ready there however often it is listed ready."""
    addresses: dict[tuple[str, str], Address] = {}
    by_port: dict[_PortKey, dict[tuple[str, str], bool]] = {}
    for subset in subsets:
        ports = [_port_key(p) for p in subset.get("ports") or ()] or [_SENTINEL]
        listed = [(a, True) for a in subset.get("addresses") or ()]
        listed += [(a, False) for a in subset.get("notReadyAddresses") or ()]
        for port in ports:
            readiness = by_port.setdefault(port, {})
            for address, ready in listed:
                key = _address_key(address)
                addresses.setdefault(key, dict(address))
                if readiness.get(key, True):
                    readiness[key] = ready
    groups: dict[frozenset[tuple[tuple[str, str], bool]], list[_PortKey]] = {}
    for port, readiness in by_port.items():
        ports = groups.setdefault(frozenset(readiness.items()), [])
        if port[1] > 0:
            ports.append(port)
    final: list[Subset] = []
    for group, served in groups.items():
        packed: Subset = {}
        ready_ones = [addresses[k] for k, r in group if r]
        not_ready_ones = [addresses[k] for k, r in group if not r]
        if ready_ones:
            packed["addresses"] = ready_ones
        if not_ready_ones:
            packed["notReadyAddresses"] = not_ready_ones
        if served:
            packed["ports"] = [_port_dict(p) for p in served]
        final.append(packed)
    return sort_subsets(final)


def _address_order(address: Mapping[str, Any]) -> tuple[bytes, int, str]:
    """Upstream's LessEndpointAddress: by IP (bytewise), an address without a target
    before one with, then by target UID."""
    ref = address.get("targetRef")
    uid = str((ref or {}).get("uid") or "")
    return (str(address.get("ip") or "").encode(), 0 if ref is None else 1, uid)


_FNV128_OFFSET = 0x6C62272E07BB014262B821756295C58D
_FNV128_PRIME = 0x0000000001000000000000000000013B
_MASK128 = (1 << 128) - 1


def fnv128a(data: bytes) -> int:
    """FNV-1a, 128 bits (Go's ``hash/fnv.New128a``), as a big-endian integer."""
    value = _FNV128_OFFSET
    for byte in data:
        value = ((value ^ byte) * _FNV128_PRIME) & _MASK128
    return value


def _spew_ptr(type_name: str, value: str | None) -> str:
    return f"(*{type_name})" + ("<nil>" if value is None else value)


def _spew_address(address: Mapping[str, Any]) -> str:
    ref = address.get("targetRef")
    node = address.get("nodeName")
    text = (
        f"{{IP:(string){address.get('ip') or ''}"
        f" Hostname:(string){address.get('hostname') or ''}"
        f" NodeName:{_spew_ptr('string', None if node is None else str(node))}"
        " TargetRef:"
    )
    if ref is None:
        return text + "(*v1.ObjectReference)<nil>}"
    fields = (
        ("Kind", "string", "kind"),
        ("Namespace", "string", "namespace"),
        ("Name", "string", "name"),
        ("UID", "types.UID", "uid"),
        ("APIVersion", "string", "apiVersion"),
        ("ResourceVersion", "string", "resourceVersion"),
        ("FieldPath", "string", "fieldPath"),
    )
    body = " ".join(f"{name}:({kind}){ref.get(key) or ''}" for name, kind, key in fields)
    return f"{text}(*v1.ObjectReference){{{body}}}}}"


def _spew_port(port: Mapping[str, Any]) -> str:
    app = port.get("appProtocol")
    return (
        f"{{Name:(string){port.get('name') or ''}"
        f" Port:(int32){int(port.get('port') or 0)}"
        f" Protocol:(v1.Protocol){port.get('protocol') or ''}"
        f" AppProtocol:{_spew_ptr('string', None if app is None else str(app))}}}"
    )


def _spew_list(type_name: str, items: Sequence[str] | None) -> str:
    if not items:
        return f"([]{type_name})<nil>"
    return f"([]{type_name})[{' '.join(items)}]"


def port_hash(port: Mapping[str, Any]) -> int:
    """The hash upstream orders a subset's ports by."""
    return fnv128a(f"(v1.EndpointPort){_spew_port(port)}".encode())


def subset_hash(subset: Mapping[str, Any]) -> int:
    """The hash upstream orders subsets by (of the subset with its lists sorted)."""
    text = (
        "(v1.EndpointSubset){Addresses:"
        + _spew_list(
            "v1.EndpointAddress", [_spew_address(a) for a in subset.get("addresses") or ()]
        )
        + " NotReadyAddresses:"
        + _spew_list(
            "v1.EndpointAddress", [_spew_address(a) for a in subset.get("notReadyAddresses") or ()]
        )
        + " Ports:"
        + _spew_list("v1.EndpointPort", [_spew_port(p) for p in subset.get("ports") or ()])
        + "}"
    )
    return fnv128a(text.encode())


def sort_subsets(subsets: list[Subset]) -> list[Subset]:
    """Upstream's SortSubsets, in place (and returned): each subset's addresses by
    IP and UID, its ports by hash, then the subsets by hash."""
    for subset in subsets:
        for field in ("addresses", "notReadyAddresses"):
            if subset.get(field):
                subset[field] = sorted(subset[field], key=_address_order)
        if subset.get("ports"):
            subset["ports"] = sorted(subset["ports"], key=port_hash)
    subsets.sort(key=subset_hash)
    return subsets


# Comparing ------------------------------------------------------------------------------
def _address_value(address: Mapping[str, Any]) -> tuple[Any, ...]:
    ref = address.get("targetRef")
    node = address.get("nodeName")
    ref_value = None
    if ref is not None:
        ref_value = tuple(
            str(ref.get(k) or "")
            for k in ("kind", "namespace", "name", "uid", "apiVersion", "fieldPath")
        )
    return (
        str(address.get("ip") or ""),
        str(address.get("hostname") or ""),
        None if node is None else str(node),
        ref_value,
    )


def _subset_value(subset: Mapping[str, Any]) -> tuple[Any, ...]:
    return (
        tuple(_address_value(a) for a in subset.get("addresses") or ()),
        tuple(_address_value(a) for a in subset.get("notReadyAddresses") or ()),
        tuple(_port_key(p) for p in subset.get("ports") or ()),
    )


def subsets_equal(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> bool:
    """Upstream's semantic equality of subsets (order matters; an empty list equals a
    missing one), ignoring the target references' resourceVersion."""
    return [_subset_value(s) for s in a] == [_subset_value(s) for s in b]


def labels_correct(ep_labels: Mapping[str, str], svc_labels: Mapping[str, str]) -> bool:
    """Upstream's labelsCorrectForEndpoints: the managed-by label is ours, and apart from
    it and the headless label the labels are exactly the Service's."""
    if ep_labels.get(MANAGED_BY_LABEL) != MANAGED_BY:
        return False
    skipped = 0
    for key, value in ep_labels.items():
        if key in (HEADLESS_LABEL, MANAGED_BY_LABEL):
            skipped += 1
        elif svc_labels.get(key) != value:
            return False
    return len(svc_labels) == len(ep_labels) - skipped


def _count(subsets: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    ready = not_ready = 0
    for subset in subsets:
        ready += len(subset.get("addresses") or ())
        not_ready += len(subset.get("notReadyAddresses") or ())
    return ready, not_ready


def capacity_annotation_correct(
    annotations: Mapping[str, str], subsets: Sequence[Mapping[str, Any]]
) -> bool:
    """Upstream's capacityAnnotationSetCorrectly: False over capacity (it must be
    truncated), else whether the over-capacity annotation is absent."""
    if sum(_count(subsets)) > MAX_CAPACITY:
        return False
    return OVER_CAPACITY_ANNOTATION not in annotations


# Truncating -------------------------------------------------------------------------------
def truncate(subsets: list[Subset]) -> bool:
    """Upstream's truncateEndpoints, in place: past :data:`MAX_CAPACITY` addresses, keep
    ready ones first; the kept ones are shared among the subsets in proportion to their
    size (rounded up, the last subsets getting what is left). When the ready addresses
    alone exceed the capacity, every not-ready one goes. Whether it truncated."""
    total_ready, total_not_ready = _count(subsets)
    if total_ready + total_not_ready <= MAX_CAPACITY:
        return False
    truncate_ready = total_ready > MAX_CAPACITY
    room = MAX_CAPACITY if truncate_ready else MAX_CAPACITY - total_ready
    total = total_ready if truncate_ready else total_not_ready
    left = room
    for subset in subsets:
        field = "addresses" if truncate_ready else "notReadyAddresses"
        listed = subset.get(field) or []
        share = min(math.ceil((float(len(listed)) / float(total)) * float(room)), left)
        kept = listed[:share] if len(listed) > share else listed
        if kept:
            subset[field] = kept
        else:
            subset.pop(field, None)
        if truncate_ready:
            subset.pop("notReadyAddresses", None)
        left -= len(kept)
    return True


# The object ---------------------------------------------------------------------------------
def desired_labels(service: Mapping[str, Any]) -> dict[str, str]:
    """The Service's labels, the headless label when it has no cluster IP (removed
    otherwise) and the managed-by label."""
    labels = dict((service.get("metadata") or {}).get("labels") or {})
    if steward.endpoints.has_cluster_ip(service):
        labels.pop(HEADLESS_LABEL, None)
    else:
        labels[HEADLESS_LABEL] = ""
    labels[MANAGED_BY_LABEL] = MANAGED_BY
    return labels


def up_to_date(
    current: Mapping[str, Any], service: Mapping[str, Any], subsets: Sequence[Mapping[str, Any]]
) -> bool:
    """Whether the existing Endpoints needs no write: its subsets are the desired ones
    (as they are, or once repacked: an older writer may have ordered them differently),
    its labels are right and its over-capacity annotation is right."""
    meta = current.get("metadata") or {}
    have = current.get("subsets") or []
    return (
        (subsets_equal(have, subsets) or subsets_equal(repack(have), subsets))
        and labels_correct(
            meta.get("labels") or {}, (service.get("metadata") or {}).get("labels") or {}
        )
        and capacity_annotation_correct(meta.get("annotations") or {}, have)
    )


def endpoints_for(
    service: Mapping[str, Any],
    pods: Iterable[dict[str, Any]],
    current: Mapping[str, Any] | None,
    trigger_time: datetime | None,
) -> dict[str, Any] | None:
    """The Endpoints object to write for the Service (a new one when ``current`` is None,
    else ``current`` changed), or None when ``current`` needs no write.

    The write carries the desired subsets (truncated past capacity, with the
    over-capacity annotation, which is removed otherwise), the :func:`desired_labels`
    and, when ``trigger_time`` is set, the last-change trigger time (removed when it is
    None); its other metadata is ``current``'s."""
    subsets = desired_subsets(service, pods)
    if current is not None and up_to_date(current, service, subsets):
        return None
    smeta = service.get("metadata") or {}
    if current is None:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": smeta.get("name", ""), "namespace": smeta.get("namespace", "")},
        }
    else:
        body = copy_json(dict(current))
        body.setdefault("apiVersion", "v1")
        body.setdefault("kind", "Endpoints")
    meta = body["metadata"]
    annotations = dict(meta.get("annotations") or {})
    steward.endpoints.set_trigger_time(annotations, trigger_time)
    if truncate(subsets):
        annotations[OVER_CAPACITY_ANNOTATION] = TRUNCATED
    else:
        annotations.pop(OVER_CAPACITY_ANNOTATION, None)
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    meta["labels"] = desired_labels(service)
    if subsets:
        body["subsets"] = subsets
    else:
        body.pop("subsets", None)
    return body
