"""The replica controller's decisions as pure functions: which pods match, how many to
create or delete, the pods it creates, the status it writes and when to look again.

Nothing here talks to the API server; :mod:`.controller` feeds these the mirror's objects
and performs the writes. The owner is a ReplicaSet or a ReplicationController (a
:class:`~.kinds.Kind` says which, where it matters); "rs" names either.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import steward
from steward import copy_json
from steward.controllers.replicaset.kinds import REPLICA_SET, Kind

BURST_REPLICAS = 500
"""Most pods one sync creates or deletes (upstream's burstReplicas)."""
REPLICA_FAILURE = "ReplicaFailure"
"""The condition set while pods cannot be created or deleted."""


def replicas(rs: dict[str, Any]) -> int:
    """``spec.replicas`` (1 when unset, the API's default)."""
    value = (rs.get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


def min_ready_seconds(rs: dict[str, Any]) -> int:
    return int((rs.get("spec") or {}).get("minReadySeconds") or 0)


def scale_diff(rs: dict[str, Any], active: int) -> int:
    """Pods to create (> 0) or delete (< 0) now, at most :data:`BURST_REPLICAS` either way."""
    diff = replicas(rs) - active
    return max(-BURST_REPLICAS, min(BURST_REPLICAS, diff))


def pod_from_template(rs: dict[str, Any], kind: Kind = REPLICA_SET) -> dict[str, Any]:
    """A new pod of the owner (of ``kind``): the template's labels, annotations,
    finalizers and spec, ``generateName`` ``<name>-``, the owner as controlling owner."""
    template = (rs.get("spec") or {}).get("template") or {}
    return steward.pods.from_template(rs, kind.resource, template)


def is_available(pod: dict[str, Any], min_ready: int, now: datetime) -> bool:
    """Ready for at least ``min_ready`` seconds (just ready when 0)."""
    return steward.pods.is_available(pod, min_ready, now)


def template_labels_match(rs: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether the pod carries every label of the ReplicaSet's template."""
    tlabels = (((rs.get("spec") or {}).get("template") or {}).get("metadata") or {}).get(
        "labels"
    ) or {}
    return all(labels.get(k) == v for k, v in tlabels.items())


@dataclass(frozen=True)
class Failure:
    """A failed creation or deletion of this sync: which, and the API server's message."""

    creating: bool
    message: str


def calculate_status(
    rs: dict[str, Any],
    active: list[dict[str, Any]],
    terminating: list[dict[str, Any]],
    failure: Failure | None,
    now: datetime,
    kind: Kind = REPLICA_SET,
) -> dict[str, Any]:
    """The status the owner should have (``observedGeneration`` is set by the writer).
    The ``ReplicaFailure`` condition is added on a failure (reason FailedCreate or
    FailedDelete, the error as message) unless present, and removed when a sync
    succeeds. ``terminatingReplicas`` only where ``kind`` has it."""
    status = copy_json(rs.get("status") or {})
    min_ready = min_ready_seconds(rs)
    fully = ready = available = 0
    for pod in active:
        if template_labels_match(rs, (pod.get("metadata") or {}).get("labels") or {}):
            fully += 1
        if steward.pods.is_ready(pod):
            ready += 1
            if is_available(pod, min_ready, now):
                available += 1
    conditions = list(status.get("conditions") or [])
    current = next((c for c in conditions if c.get("type") == REPLICA_FAILURE), None)
    if failure is not None and current is None:
        diff = len(active) - replicas(rs)
        reason = "FailedCreate" if diff < 0 else "FailedDelete" if diff > 0 else ""
        conditions.append(
            {
                "type": REPLICA_FAILURE,
                "status": "True",
                "lastTransitionTime": steward.format_time(now),
                "reason": reason,
                "message": failure.message,
            }
        )
    elif failure is None and current is not None:
        conditions = [c for c in conditions if c.get("type") != REPLICA_FAILURE]
    if conditions:
        status["conditions"] = conditions
    else:
        status.pop("conditions", None)
    status["replicas"] = len(active)
    status["fullyLabeledReplicas"] = fully
    status["readyReplicas"] = ready
    status["availableReplicas"] = available
    if kind.terminating_replicas:
        status["terminatingReplicas"] = len(terminating)
    return status


_COUNTS = ("replicas", "fullyLabeledReplicas", "readyReplicas", "availableReplicas")


def status_current(rs: dict[str, Any], status: dict[str, Any]) -> bool:
    """Whether writing ``status`` would change nothing: the same counts and conditions,
    and the generation already observed."""
    old = rs.get("status") or {}
    meta = rs.get("metadata") or {}
    return (
        all(int(old.get(k) or 0) == int(status.get(k) or 0) for k in _COUNTS)
        and old.get("terminatingReplicas") == status.get("terminatingReplicas")
        and int(meta.get("generation") or 0) == int(old.get("observedGeneration") or 0)
        and (old.get("conditions") or []) == (status.get("conditions") or [])
    )


def next_check(rs: dict[str, Any], active: list[dict[str, Any]], now: datetime) -> float | None:
    """Seconds until the next ready pod becomes available (minReadySeconds), so that the
    status counts it; None when no pod is waiting for that. Never negative."""
    min_ready = min_ready_seconds(rs)
    if min_ready <= 0:
        return None
    waits = []
    for pod in active:
        if not steward.pods.is_ready(pod) or is_available(pod, min_ready, now):
            continue
        since = steward.parse_time(steward.pods.ready_condition(pod).get("lastTransitionTime"))
        if since is None:
            continue
        waits.append((since + timedelta(seconds=min_ready) - now).total_seconds())
    if not waits:
        return None
    return max(0.0, min(waits))
