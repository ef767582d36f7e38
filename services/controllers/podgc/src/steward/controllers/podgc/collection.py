"""The pod garbage collector's decisions, without I/O: which pods each of its four
passes collects, in which order, the status a pod is marked with before it goes, and the
quarantine of nodes missing from the mirror (pkg/controller/podgc/gc_controller.go).

Each function takes pods and nodes as the API server's JSON (dicts, or the mirror's
projections of them) and is total: a missing field counts as absent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from steward.runtime.times import format_time, parse_time

Obj = Mapping[str, Any]

OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"
"""The taint that says a node is out of service (upstream's ``v1.TaintNodeOutOfService``);
only its key is compared, as upstream's ``TaintKeyExists``."""
EVICTED = "Evicted"
"""The status reason the kubelet's eviction manager gives a pod it evicted."""
DISRUPTION_TARGET = "DisruptionTarget"
"""The condition an orphaned pod is given before it goes."""
DELETION_BY_POD_GC = "DeletionByPodGC"
ORPHANED_MESSAGE = "PodGC: node no longer exists"

# The ``reason`` label of the metrics, upstream's values.
TERMINATED = "terminated"
OUT_OF_SERVICE = "out-of-service"
ORPHANED = "orphaned"
UNSCHEDULED = "unscheduled"

_NOT_TERMINATED = frozenset({"Pending", "Running", "Unknown"})


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _status(obj: Obj) -> Obj:
    return obj.get("status") or {}


def phase(pod: Obj) -> str:
    return str(_status(pod).get("phase") or "")


def node_name(pod: Obj) -> str:
    """The node the pod is bound to ("" when unscheduled)."""
    return str((pod.get("spec") or {}).get("nodeName") or "")


def is_terminated(pod: Obj) -> bool:
    """Upstream's ``isPodTerminated``: any phase but Pending, Running and Unknown (so a
    pod without a phase counts too)."""
    return phase(pod) not in _NOT_TERMINATED


def is_terminating(pod: Obj) -> bool:
    """Upstream's ``isPodTerminating``: the pod has a deletion timestamp."""
    return bool(_meta(pod).get("deletionTimestamp"))


def is_evicted(pod: Obj) -> bool:
    """Failed with the reason ``Evicted`` (the kubelet's ``PodIsEvicted``)."""
    return phase(pod) == "Failed" and _status(pod).get("reason") == EVICTED


def deletion_order(pod: Obj) -> tuple[bool, datetime, str]:
    """The sort key of upstream's ``byEvictionAndCreationTimestamp``: evicted pods first,
    then the oldest by creation (to the second, as the API server writes it), then by
    name (not namespace)."""
    created = parse_time(_meta(pod).get("creationTimestamp")) or datetime.min
    if created.tzinfo is not None:
        created = created.replace(tzinfo=None)
    return (not is_evicted(pod), created, str(_meta(pod).get("name", "")))


def terminated_over_threshold(pods: Iterable[Obj], threshold: int) -> list[Obj]:
    """Pass 1: the terminated pods beyond ``threshold``, those to delete, in upstream's
    order; none when ``threshold`` is 0 or less (the pass is off)."""
    if threshold <= 0:
        return []
    terminated = [p for p in pods if is_terminated(p)]
    excess = len(terminated) - threshold
    if excess <= 0:
        return []
    return sorted(terminated, key=deletion_order)[:excess]


def node_ready(node: Obj) -> bool:
    """The node's Ready condition is True (upstream's ``IsNodeReady``: the first Ready
    condition decides; none counts as not ready)."""
    for condition in _status(node).get("conditions") or ():
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def out_of_service(node: Obj) -> bool:
    """Not Ready and tainted ``node.kubernetes.io/out-of-service`` (any effect)."""
    taints = (node.get("spec") or {}).get("taints") or ()
    return not node_ready(node) and any(t.get("key") == OUT_OF_SERVICE_TAINT for t in taints)


def terminating_out_of_service(
    pods: Iterable[Obj], node_of: Callable[[str], Obj | None]
) -> list[Obj]:
    """Pass 2: terminating pods bound to a node that is out of service (``node_of``: the
    node of that name, None when the mirror holds none), in upstream's order."""
    found = []
    for pod in pods:
        if not is_terminating(pod):
            continue
        node = node_of(node_name(pod))
        if node is not None and out_of_service(node):
            found.append(pod)
    return sorted(found, key=deletion_order)


def missing_nodes(pods: Iterable[Obj], existing: set[str]) -> set[str]:
    """The names of the nodes pods are bound to that ``existing`` lacks."""
    return {name for pod in pods if (name := node_name(pod)) and name not in existing}


def unscheduled_terminating(pods: Iterable[Obj]) -> list[Obj]:
    """Pass 4: terminating pods bound to no node."""
    return [p for p in pods if is_terminating(p) and not node_name(p)]


class Quarantine:
    """Upstream's delaying queue of node names (``orphaned_pods_nodes``): a node missing
    from the mirror is checked with the API server only once it has been missing for
    ``period`` seconds. Adding a node already waiting keeps its earlier time."""

    def __init__(self, period: float, clock: Callable[[], float]) -> None:
        self.period = period
        self.clock = clock
        self.waiting: dict[str, float] = {}

    def add(self, names: Iterable[str]) -> None:
        """Start the quarantine of each name not already in it."""
        ready_at = self.clock() + self.period
        for name in names:
            self.waiting.setdefault(name, ready_at)

    def due(self) -> list[str]:
        """Take out every name whose quarantine is over (sorted, for stable logs)."""
        now = self.clock()
        ready = sorted(n for n, at in self.waiting.items() if at <= now)
        for name in ready:
            del self.waiting[name]
        return ready

    def __len__(self) -> int:
        return len(self.waiting)


def failed_status_patch(
    pod: Obj, now: datetime, condition: Mapping[str, str] | None = None
) -> dict[str, Any] | None:
    """The strategic merge patch of the pod's status that marks it Failed before it is
    deleted, as upstream's ``markFailedAndDeletePodWithCondition`` (the UID as a
    precondition; ``status.observedGeneration`` to the pod's generation when it differs;
    ``condition`` — type, status, reason, message — set with ``observedGeneration`` and
    ``lastTransitionTime``, the latter kept from a condition of the same type and status).
    None for a pod that has finished (Succeeded or Failed): it is deleted as it is."""
    if phase(pod) in ("Succeeded", "Failed"):
        return None
    meta = _meta(pod)
    status = _status(pod)
    generation = int(meta.get("generation") or 0)
    new: dict[str, Any] = {"phase": "Failed"}
    if int(status.get("observedGeneration") or 0) != generation:
        new["observedGeneration"] = generation
    if condition is not None:
        transition = format_time(now)
        for old in status.get("conditions") or ():
            if old.get("type") == condition["type"]:
                if old.get("status") == condition["status"] and old.get("lastTransitionTime"):
                    transition = old["lastTransitionTime"]
                break
        new["conditions"] = [
            {
                **condition,
                "observedGeneration": generation,
                "lastTransitionTime": transition,
            }
        ]
    return {"metadata": {"uid": meta.get("uid", "")}, "status": new}


def orphaned_condition() -> dict[str, str]:
    """The DisruptionTarget condition of a pod whose node no longer exists."""
    return {
        "type": DISRUPTION_TARGET,
        "status": "True",
        "reason": DELETION_BY_POD_GC,
        "message": ORPHANED_MESSAGE,
    }


def pod_key(pod: Obj) -> tuple[str, str]:
    meta = _meta(pod)
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


def names(pods: Sequence[Obj]) -> list[str]:
    """``namespace/name`` of each pod, for logs."""
    return ["/".join(pod_key(p)) for p in pods]
