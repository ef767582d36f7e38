"""Which pods a ReplicaSet deletes first when it scales down (upstream's
``ActivePodsWithRanks`` ordering), as pure functions of the pods and the time.

A pod sorts earlier — is deleted sooner — when, comparing two pods criterion by criterion
and stopping at the first that differs:

1. it is not assigned to a node and the other is;
2. its phase is earlier: Pending < Unknown < Running;
3. it is not ready and the other is;
4. its ``controller.kubernetes.io/pod-deletion-cost`` annotation is lower (absent or
   malformed counts as 0);
5. more pods related to it (of every ReplicaSet with the same controller) run on its node;
6. both ready: it has been ready for less time, compared on a log2 scale of the time since
   it became ready (a pod without a ready time first; same bucket: by UID);
7. a container of it restarted more often (then sidecar restarts, likewise);
8. it is newer, on the same log2 scale of its age (no creation time first; same bucket:
   by UID).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import steward

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
"""The annotation that lowers (or raises) a pod's place in the deletion order."""

_COST = re.compile(r"0|-[0-9]+|[1-9][0-9]*")
_PHASES = {"Pending": 0, "Unknown": 1, "Running": 2}


def deletion_cost(pod: dict[str, Any]) -> int:
    """The pod's deletion cost: its annotation as a 32-bit integer, 0 when absent or
    malformed (a leading ``+`` or a leading zero is malformed, as upstream)."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(DELETION_COST)
    if not isinstance(value, str) or not _COST.fullmatch(value):
        return 0
    number = int(value)
    return number if -(2**31) <= number < 2**31 else 0


def _max_restarts(pod: dict[str, Any]) -> tuple[int, int]:
    """(most restarts of a regular container, most restarts of a sidecar)."""
    status = pod.get("status") or {}
    regular = max(
        (int(c.get("restartCount", 0)) for c in status.get("containerStatuses") or ()),
        default=0,
    )
    sidecars = {
        c.get("name")
        for c in (pod.get("spec") or {}).get("initContainers") or ()
        if c.get("restartPolicy") == "Always"
    }
    sidecar = max(
        (
            int(c.get("restartCount", 0))
            for c in status.get("initContainerStatuses") or ()
            if c.get("name") in sidecars
        ),
        default=0,
    )
    return regular, sidecar


def _log_rank(when: datetime, now: datetime) -> int:
    """floor(log2(nanoseconds since ``when``)), -1 when not in the past."""
    nanos = (now - when).total_seconds() * 1e9
    return int(math.log2(nanos)) if nanos >= 1 else -1


def _node(pod: dict[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _uid(pod: dict[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def _by_time(
    ti: datetime | None, tj: datetime | None, uid_i: str, uid_j: str, now: datetime | None
) -> int | None:
    """Newer (or missing) time first; same log2 bucket of age: by UID. None when equal."""
    if ti == tj:
        return None
    if now is None or ti is None or tj is None:
        # The missing one counts as the newest.
        if ti is None:
            return -1
        if tj is None:
            return 1
        return -1 if ti > tj else 1
    diff = _log_rank(ti, now) - _log_rank(tj, now)
    if diff == 0:
        return -1 if uid_i < uid_j else (1 if uid_i > uid_j else 0)
    return -1 if diff < 0 else 1


def compare(
    pi: dict[str, Any], pj: dict[str, Any], rank_i: int, rank_j: int, now: datetime | None
) -> int:
    """-1 when ``pi`` is to be deleted before ``pj``, 1 when after, 0 when either may go
    first. ``rank_*`` are the numbers of related active pods on each pod's node."""
    ni, nj = _node(pi), _node(pj)
    if ni != nj and (not ni or not nj):
        return -1 if not ni else 1
    phi = _PHASES.get(str((pi.get("status") or {}).get("phase", "")), 0)
    phj = _PHASES.get(str((pj.get("status") or {}).get("phase", "")), 0)
    if phi != phj:
        return -1 if phi < phj else 1
    ri, rj = steward.pods.is_ready(pi), steward.pods.is_ready(pj)
    if ri != rj:
        return -1 if not ri else 1
    ci, cj = deletion_cost(pi), deletion_cost(pj)
    if ci != cj:
        return -1 if ci < cj else 1
    if rank_i != rank_j:
        return -1 if rank_i > rank_j else 1
    if ri and rj:
        ti = steward.parse_time(steward.pods.ready_condition(pi).get("lastTransitionTime"))
        tj = steward.parse_time(steward.pods.ready_condition(pj).get("lastTransitionTime"))
        order = _by_time(ti, tj, _uid(pi), _uid(pj), now)
        if order:
            return order
    mi, mj = _max_restarts(pi), _max_restarts(pj)
    if mi[0] != mj[0]:
        return -1 if mi[0] > mj[0] else 1
    if mi[1] != mj[1]:
        return -1 if mi[1] > mj[1] else 1
    ti = steward.parse_time((pi.get("metadata") or {}).get("creationTimestamp"))
    tj = steward.parse_time((pj.get("metadata") or {}).get("creationTimestamp"))
    return _by_time(ti, tj, _uid(pi), _uid(pj), now) or 0


def ranked(
    pods: Sequence[dict[str, Any]], related: Iterable[dict[str, Any]], now: datetime | None
) -> list[dict[str, Any]]:
    """``pods`` in deletion order (first to go first). A pod's rank is the number of
    active pods of ``related`` on its node (``related`` is generally a superset of
    ``pods``: the pods of every ReplicaSet with the same controller)."""
    on_node: dict[str, int] = {}
    for pod in related:
        if steward.pods.is_active(pod):
            on_node[_node(pod)] = on_node.get(_node(pod), 0) + 1
    entries = [(pod, on_node.get(_node(pod), 0)) for pod in pods]

    def cmp(a: tuple[dict[str, Any], int], b: tuple[dict[str, Any], int]) -> int:
        return compare(a[0], b[0], a[1], b[1], now)

    return [pod for pod, _ in sorted(entries, key=functools.cmp_to_key(cmp))]


def pods_to_delete(
    active: Sequence[dict[str, Any]],
    related: Iterable[dict[str, Any]],
    count: int,
    now: datetime | None,
) -> list[dict[str, Any]]:
    """The ``count`` pods of ``active`` to delete first (all of them, unsorted, when
    ``count`` covers them all)."""
    if count >= len(active):
        return list(active)
    return ranked(active, related, now)[:count]
