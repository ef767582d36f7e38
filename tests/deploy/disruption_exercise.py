"""One short piece of real work for the disruption controller, as
:mod:`tests.deploy.cronjob_exercise` has for the CronJob controller (a
:class:`tests.deploy.exercises.Run`: None when the work was done, else what did not
happen).

It runs in ``apps_cluster`` (tests/deploy/conftest.py), where upstream's disruption,
ReplicaSet, Deployment and garbage collector controllers are off, so nothing but the
controller under test writes a budget's status, and the pods and the ReplicaSet made here
stay as they are made. The pods are never scheduled (the nodes' taint keeps them off).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from steward.cluster import LocalCluster
from tests.deploy.exercises import GiveUp, _never, _poll

LABELS = {"app": "budgeted"}
REPLICAS = 3
"""The ReplicaSet's ``spec.replicas``: the budget's ``expectedPods`` when its scale
subresource was read."""


def _pod(name: str, labels: dict[str, str], owner: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
    }


def _budget(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}},
    }


def run_disruption(
    cluster: LocalCluster, namespace: str, *, deadline: float = 30.0, give_up: GiveUp = _never
) -> str | None:
    """A budget (``maxUnavailable: 1``) over two pods of a ReplicaSet of 3 replicas whose
    Deployment does not exist (so no mirrored kind accounts for it and its ``scale``
    subresource is read), a budget selecting no pod, and a pod whose ``DisruptionTarget``
    condition has been True for ten minutes: the first budget's status says 3 expected,
    2 desired; the second gets a ``NoPods`` Event; the condition is set False.

    That uses every permission of the controller's role: budgets, pods and the workloads
    come through the informer (their list and watch), the ReplicaSet's scale is read
    (``*/scale`` get), the statuses written (poddisruptionbudgets/status update), the
    condition cleared (pods/status patch), the Event recorded (events create)."""
    core = f"/api/v1/namespaces/{namespace}"
    policy = f"/apis/policy/v1/namespaces/{namespace}"
    gone = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "gone",
        "uid": "00000000-0000-0000-0000-000000000000",
        "controller": True,
    }
    rs = cluster.api(
        "POST",
        f"/apis/apps/v1/namespaces/{namespace}/replicasets",
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "orphaned", "ownerReferences": [gone]},
            "spec": {
                "replicas": REPLICAS,
                "selector": {"matchLabels": LABELS},
                "template": {
                    "metadata": {"labels": LABELS},
                    "spec": _pod("", LABELS)["spec"],
                },
            },
        },
        ok=(201,),
    )
    for name in ("a", "b"):
        cluster.api("POST", f"{core}/pods", _pod(name, LABELS, rs), ok=(201,))
    cluster.api("POST", f"{core}/pods", _pod("stale", {"app": "alone"}), ok=(201,))
    since = (datetime.now(UTC) - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting",
        "lastTransitionTime": since,
    }
    cluster.api(
        "PATCH",
        f"{core}/pods/stale/status",
        {"status": {"conditions": [condition]}},
    )
    cluster.api("POST", f"{policy}/poddisruptionbudgets", _budget("budget", LABELS), ok=(201,))
    cluster.api(
        "POST", f"{policy}/poddisruptionbudgets", _budget("empty", {"app": "none"}), ok=(201,)
    )
    end = time.monotonic() + deadline
    missing = _poll(partial(_synced_missing, cluster, namespace), end, give_up)
    return f"disruption {namespace}: {missing}" if missing else None


def _synced_missing(cluster: LocalCluster, namespace: str) -> str:
    core = f"/api/v1/namespaces/{namespace}"
    budget = cluster.api(
        "GET", f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/budget"
    )
    status = budget.get("status") or {}
    counts = (status.get("expectedPods"), status.get("desiredHealthy"))
    if counts != (REPLICAS, REPLICAS - 1):
        return f"budget expectedPods, desiredHealthy {counts}"
    pod = cluster.api("GET", f"{core}/pods/stale")
    conditions = (pod.get("status") or {}).get("conditions") or ()
    target: dict[str, Any] = next(
        (c for c in conditions if c.get("type") == "DisruptionTarget"), {}
    )
    if target.get("status") != "False":
        return f"the stale DisruptionTarget condition is {target.get('status')}"
    events = cluster.api("GET", f"{core}/events")
    reasons = {
        e.get("reason")
        for e in events.get("items") or ()
        if (e.get("involvedObject") or {}).get("name") == "empty"
    }
    return "" if "NoPods" in reasons else f"Events of the empty budget {sorted(reasons)}"
