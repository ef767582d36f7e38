"""StatefulSets and their pods as the API server returns them, for the unit tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from steward.controllers.statefulset import history, plan

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
OLD = "web-old"
NEW = "web-new"


def stamp(ago: float) -> str:
    return (NOW - timedelta(seconds=ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def statefulset(
    replicas: int = 3,
    *,
    policy: str = "OrderedReady",
    strategy: str = "RollingUpdate",
    partition: int | None = 0,
    max_unavailable: int | str | None = None,
    start: int | None = None,
    min_ready: int = 0,
    claims: tuple[str, ...] = (),
    current_replicas: int = 0,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicas": replicas,
        "serviceName": "web",
        "selector": {"matchLabels": {"app": "web"}},
        "podManagementPolicy": policy,
        "updateStrategy": {"type": strategy},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "v1"}]},
        },
        "minReadySeconds": min_ready,
        "volumeClaimTemplates": [
            {"metadata": {"name": c}, "spec": {"accessModes": ["ReadWriteOnce"]}} for c in claims
        ],
    }
    if strategy == "RollingUpdate" and partition is not None:
        rolling: dict[str, Any] = {"partition": partition}
        if max_unavailable is not None:
            rolling["maxUnavailable"] = max_unavailable
        spec["updateStrategy"]["rollingUpdate"] = rolling
    if start is not None:
        spec["ordinals"] = {"start": start}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": "ns", "uid": "set-uid", "generation": 4},
        "spec": spec,
        "status": {"currentReplicas": current_replicas},
    }


def pod(
    ordinal: int,
    *,
    revision: str = OLD,
    phase: str = "Running",
    ready: bool = True,
    ready_for: float = 3600,
    deleting: bool = False,
    claims: tuple[str, ...] = (),
) -> dict[str, Any]:
    name = f"web-{ordinal}"
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "uid": f"pod-uid-{ordinal}",
        "labels": {
            "app": "web",
            "statefulset.kubernetes.io/pod-name": name,
            "apps.kubernetes.io/pod-index": str(ordinal),
            "controller-revision-hash": revision,
        },
    }
    if deleting:
        meta["deletionTimestamp"] = stamp(1)
    conditions = [
        {
            "type": "Ready",
            "status": "True" if ready else "False",
            "lastTransitionTime": stamp(ready_for),
        }
    ]
    return {
        "metadata": meta,
        "spec": {
            "volumes": [
                {"name": c, "persistentVolumeClaim": {"claimName": f"{c}-web-{ordinal}"}}
                for c in claims
            ]
        },
        "status": {"phase": phase, "conditions": conditions},
    }


def sync(
    sts: dict[str, Any],
    pods: list[dict[str, Any]],
    *,
    now: datetime = NOW,
    **extra: Any,
) -> plan.SyncPlan:
    updated = {
        **sts,
        "spec": {
            **sts["spec"],
            "template": {
                **sts["spec"]["template"],
                "spec": {"containers": [{"name": "c", "image": "v2"}]},
            },
        },
    }
    return plan.decide(
        plan.SyncInput(
            statefulset=sts,
            current_set=sts,
            update_set=history.apply_revision(sts, {"data": history.patch(updated)}),
            current_revision=OLD,
            update_revision=NEW,
            collision_count=0,
            pods=pods,
            now=now,
            **extra,
        )
    )


def verbs(result: plan.SyncPlan) -> list[tuple[str, str]]:
    return [(a.verb.value, a.name) for a in result.actions]
