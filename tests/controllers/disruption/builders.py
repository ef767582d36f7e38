"""Objects for the disruption decisions' unit tests, as the API serves them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from steward import format_time

Obj = dict[str, Any]

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def ref(
    kind: str, name: str, uid: str, api_version: str = "apps/v1", controller: bool = True
) -> Obj:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": controller,
    }


def pod(
    name: str,
    *,
    owner: Obj | None = None,
    ready: bool = True,
    deleting: bool = False,
    phase: str = "Running",
    conditions: list[Obj] | None = None,
    generation: int = 1,
) -> Obj:
    meta: Obj = {"name": name, "namespace": "ns", "uid": f"pod-{name}", "generation": generation}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    if deleting:
        meta["deletionTimestamp"] = format_time(NOW)
    status: Obj = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    status["conditions"] += conditions or []
    return {"metadata": meta, "status": status}


def workload(name: str, uid: str, replicas: int | None, owner: Obj | None = None) -> Obj:
    meta: Obj = {"name": name, "namespace": "ns", "uid": uid}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    spec: Obj = {} if replicas is None else {"replicas": replicas}
    return {"metadata": meta, "spec": spec}


def budget(
    *,
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
    generation: int = 1,
    status: Obj | None = None,
    policy: str | None = None,
) -> Obj:
    spec: Obj = {"selector": {"matchLabels": {"app": "web"}}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    if policy is not None:
        spec["unhealthyPodEvictionPolicy"] = policy
    meta: Obj = {"name": "pdb", "namespace": "ns", "uid": "pdb-uid", "generation": generation}
    return {"metadata": meta, "spec": spec, "status": status or {}}
