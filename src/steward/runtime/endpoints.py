"""Service endpoint facts that the EndpointSlice and Endpoints controllers both decide on,
as upstream defines them (``k8s.io/endpointslice/util`` and the endpoints controller):
which pods back a Service, the port a Service port resolves to on a pod, whether a pod's
hostname is published, how a pod IP is read, which pod changes can move endpoints, and
the ``endpoints.kubernetes.io/last-change-trigger-time`` annotation's value.

Each function takes objects as the API server's JSON (dicts) and is total: missing fields
count as absent.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from steward.runtime import pods
from steward.runtime.mirror import Change, ChangeKind, Mirror, MirrorObject
from steward.runtime.reconcile import Request
from steward.runtime.resources import PODS, SERVICES
from steward.runtime.selectors import selector_matches
from steward.runtime.times import parse_time

HEADLESS_LABEL = "service.kubernetes.io/headless"
"""Set (empty value) on the endpoints of a Service without a cluster IP."""
TRIGGER_TIME_ANNOTATION = "endpoints.kubernetes.io/last-change-trigger-time"
"""When the change that led to an endpoints object's last write happened."""

POD_FIELDS = (
    "metadata.labels",
    "metadata.deletionTimestamp",
    "spec.hostname",
    "spec.subdomain",
    "spec.containers.ports",
    "spec.initContainers.ports",
    "spec.initContainers.restartPolicy",
    "status.phase",
    "status.podIP",
    "status.podIPs",
    "status.conditions.type",
    "status.conditions.status",
    "status.conditions.lastTransitionTime",
)
"""The paths of a pod the functions here read (a projection, steward.projection): the
labels and deletion mark, the hostname and subdomain, the containers' ports and the init
containers' restart policy (named target ports), the phase, the IPs, and each
condition's type, status and transition time (readiness and the trigger time). A
controller watching pods for these adds the paths its own code reads
(``.watches(PODS, ..., fields=[*POD_FIELDS, "spec.nodeName"])``); a MODIFIED touching
none of them is then never sent to it."""


def format_trigger_time(when: datetime) -> str:
    """Go's RFC 3339 with nanoseconds in UTC (fractions only when present, trailing zeros
    dropped), as upstream writes the trigger-time annotation."""
    when = when.astimezone(UTC)
    text = when.strftime("%Y-%m-%dT%H:%M:%S")
    if when.microsecond:
        text += f".{when.microsecond:06d}".rstrip("0")
    return text + "Z"


def set_trigger_time(annotations: dict[str, str], trigger_time: datetime | None) -> None:
    """Set the last-change trigger-time annotation in ``annotations``, or remove it when
    there is none (both controllers' rule)."""
    if trigger_time is not None:
        annotations[TRIGGER_TIME_ANNOTATION] = format_trigger_time(trigger_time)
    else:
        annotations.pop(TRIGGER_TIME_ANNOTATION, None)


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("spec") or {}


def service_selector(service: Mapping[str, Any]) -> dict[str, str] | None:
    """The Service's pod selector; None for a selector-less Service (its endpoints are
    written by someone else)."""
    selector = _spec(service).get("selector")
    return None if selector is None else dict(selector)


def selects(service: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether the Service's selector matches ``labels`` (an empty selector matches every
    pod, a missing one none)."""
    selector = service_selector(service)
    if selector is None:
        return False
    return selector_matches({"matchLabels": selector}, labels, empty_matches_all=True)


LABEL_INDEX = "steward.io/pod-label"
"""The mirror index :func:`index_pod_labels` keeps: a pod is found under
``<namespace>/<key>=<value>`` for each of its labels."""


def index_pod_labels(obj: MirrorObject) -> list[str]:
    """Index values of :data:`LABEL_INDEX` (pods only; other types are not indexed).
    Declare it with ``.with_index(LABEL_INDEX, index_pod_labels)``."""
    if obj.type != PODS:
        return []
    ns = obj.namespace
    return [f"{ns}/{key}={value}" for key, value in obj.meta.labels.items()]


def services_selecting(mirror: Mirror, pod: MirrorObject) -> list[Request]:
    """The Services of the pod's namespace whose selector matches its labels (a pod
    watch's mapper: given the old and the new state, it queues both labels' Services)."""
    labels = pod.meta.labels
    return [
        Request(svc.namespace, svc.name)
        for svc in mirror.objects(SERVICES, pod.namespace)
        if selects(svc.object, labels)
    ]


def pod_change_matters(change: Change) -> bool:
    """Whether a pod change can move endpoints (upstream's GetPodUpdateProjectionKey):
    additions and deletions, and updates with a new resource version that changed the
    deletion mark, readiness, IPs, labels, hostname or subdomain."""
    old = change.old
    if change.kind is not ChangeKind.MODIFIED or old is None:
        return True
    if old.resource_version == change.obj.resource_version:
        return False
    pod_changed, labels_changed = endpoints_changed(old.object, change.obj.object)
    return pod_changed or labels_changed


def selected_pods(mirror: Mirror, service: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pods of the Service's namespace its selector matches (any state), found
    through :data:`LABEL_INDEX`: only the pods carrying the rarest of the selector's
    labels are checked, not every pod of the namespace."""
    selector = service_selector(service)
    if selector is None:
        return []
    ns = str((service.get("metadata") or {}).get("namespace", ""))
    candidates: list[MirrorObject] | None = None
    for key, value in selector.items():
        found = mirror.by_index(PODS, LABEL_INDEX, f"{ns}/{key}={value}")
        if candidates is None or len(found) < len(candidates):
            candidates = found
        if not candidates:
            return []
    if candidates is None:  # the empty selector: every pod of the namespace
        candidates = mirror.objects(PODS, ns)
    return [pod.object for pod in candidates if selects(service, pod.meta.labels)]


def managed(service: Mapping[str, Any]) -> bool:
    """Whether the endpoint controllers write this Service's endpoints: it has a selector
    and is not of type ExternalName."""
    return _spec(service).get("type") != "ExternalName" and service_selector(service) is not None


def has_cluster_ip(service: Mapping[str, Any]) -> bool:
    """Whether the Service has a cluster IP (not headless)."""
    ip = _spec(service).get("clusterIP") or ""
    return ip not in ("", "None")


def pod_in_endpoints(pod: dict[str, Any], include_terminating: bool) -> bool:
    """Whether the pod backs its Services at all: not finished, has an IP, and (unless
    ``include_terminating``) is not being deleted."""
    if pods.is_terminal(pod):
        return False
    status = pod.get("status") or {}
    if not status.get("podIP") and not status.get("podIPs"):
        return False
    return include_terminating or not pods.is_deleting(pod)


def sets_hostname(pod: Mapping[str, Any], service: Mapping[str, Any]) -> bool:
    """Whether the pod's hostname is published for the Service: ``spec.hostname`` is set
    and ``spec.subdomain`` names the Service, in the same namespace."""
    spec = _spec(pod)
    pmeta, smeta = pod.get("metadata") or {}, service.get("metadata") or {}
    return (
        bool(spec.get("hostname"))
        and spec.get("subdomain") == smeta.get("name")
        and pmeta.get("namespace") == smeta.get("namespace")
    )


def find_port(pod: Mapping[str, Any], service_port: Mapping[str, Any]) -> int | None:
    """The port a Service port's ``targetPort`` means on the pod: a number as it is, a name
    looked up among the containers' ports (then restartable init containers') with the
    same protocol; None when the name is not found."""
    target = service_port.get("targetPort", service_port.get("port"))
    if isinstance(target, int):
        return target
    if target is None:
        return None
    protocol = service_port.get("protocol") or "TCP"
    spec = _spec(pod)
    sidecars = [c for c in spec.get("initContainers") or () if c.get("restartPolicy") == "Always"]
    for container in [*(spec.get("containers") or ()), *sidecars]:
        for port in container.get("ports") or ():
            if port.get("name") == target and (port.get("protocol") or "TCP") == protocol:
                return int(port["containerPort"])
    return None


def parse_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """A pod IP as upstream reads it (Go's ``ParseIPSloppy``): IPv4 octets may carry
    leading zeros (read as decimal), an IPv4-mapped IPv6 address is the IPv4 address; None
    when it is no IP at all. ``str()`` of the result is the canonical text endpoints carry."""
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        parts = text.split(".")
        if len(parts) != 4 or not all(p.isdigit() and int(p) < 256 for p in parts):
            return None
        ip = ipaddress.IPv4Address(".".join(str(int(p)) for p in parts))
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _ips(pod: Mapping[str, Any]) -> list[str]:
    status = pod.get("status") or {}
    return [str(p.get("ip", "")) for p in status.get("podIPs") or ()]


def endpoints_changed(old: dict[str, Any], new: dict[str, Any]) -> tuple[bool, bool]:
    """(pod changed, labels changed) between two states of a pod, as far as endpoints
    care: the deletion mark, readiness or IPs changed; the labels, hostname or subdomain
    changed (those can change which Services select it)."""
    ometa, nmeta = old.get("metadata") or {}, new.get("metadata") or {}
    ospec, nspec = _spec(old), _spec(new)
    labels_changed = (
        (ometa.get("labels") or {}) != (nmeta.get("labels") or {})
        or ospec.get("hostname") != nspec.get("hostname")
        or ospec.get("subdomain") != nspec.get("subdomain")
    )
    pod_changed = (
        ometa.get("deletionTimestamp") != nmeta.get("deletionTimestamp")
        or pods.is_ready(old) != pods.is_ready(new)
        or _ips(old) != _ips(new)
    )
    return pod_changed, labels_changed


def _ready_transition(pod: dict[str, Any]) -> datetime | None:
    value = pods.ready_condition(pod).get("lastTransitionTime")
    return parse_time(value) if value else None


@dataclass
class _ServiceTimes:
    pods: dict[str, datetime] = field(default_factory=dict)
    service: datetime | None = None


class TriggerTimes:
    """The last-change trigger time of each Service's endpoints, as upstream's trigger
    time tracker computes it: for a Service seen for the first time, its creation time;
    afterwards the earliest of the changes since the previous sync (a pod's Ready
    condition's ``lastTransitionTime`` that moved on, the Service's creation time if it
    changed), or None when nothing moved. Calls for one Service must not overlap (a
    work queue never hands one key to two workers)."""

    def __init__(self) -> None:
        self._states: dict[tuple[str, str], _ServiceTimes] = {}

    def compute(
        self, service: Mapping[str, Any], selected: Iterable[dict[str, Any]]
    ) -> datetime | None:
        """The trigger time for this sync of ``service`` given the pods its selector
        matches (before any filtering), and remember their times for the next sync."""
        meta = service.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        known = self._states.get(key)
        state = known or _ServiceTimes()
        earliest: datetime | None = None
        times: dict[str, datetime] = {}
        for pod in selected:
            at = _ready_transition(pod)
            if at is None:
                continue
            name = str((pod.get("metadata") or {}).get("name", ""))
            times[name] = at
            before = state.pods.get(name)
            if before is None or at > before:
                earliest = at if earliest is None else min(earliest, at)
        created = meta.get("creationTimestamp")
        created_at = parse_time(created) if created else None
        if created_at is not None and (state.service is None or created_at > state.service):
            earliest = created_at if earliest is None else min(earliest, created_at)
        self._states[key] = _ServiceTimes(times, created_at)
        if known is None:
            return created_at
        return earliest

    def forget(self, namespace: str, name: str) -> None:
        """Drop a deleted Service's state."""
        self._states.pop((namespace, name), None)
