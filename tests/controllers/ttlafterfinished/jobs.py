"""Jobs for the TTL-after-finished controller's tests, and the scenario both sides run.

The Jobs name a ``spec.managedBy`` no controller owns (:data:`NOBODY`), so no Job
controller touches them (neither upstream's nor Steward's makes their pods or writes
their status): the test writes their status as their manager would (a finished Job needs
``startTime``, and ``SuccessCriteriaMet`` with ``completionTime`` beside ``Complete``, or
``FailureTarget`` beside ``Failed``), with the finish time it chooses. A Job's pod is made
by the test, controlled by the Job (``blockOwnerDeletion``) and held by the test's
finalizer (:data:`HOLD`), so that a foreground deletion shows: the Job stays, being
deleted with the ``foregroundDeletion`` finalizer, while the garbage collector has
deleted its pod and the pod waits for the test.

# The scenario
:func:`scenario` makes, in one namespace of either side: ``complete`` (TTL 2 s, a held
pod), ``failed`` (TTL 0), ``raised`` (TTL 4 s, raised to an hour just after it finished),
``running`` (TTL 0, never finished), ``untimed`` (finished, no TTL) and ``skewed``
(finished an hour from now, TTL 0). It returns what became of each (:func:`fate`), so
the differential test compares the two sides' results.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from steward.kube import KubeClient, NotFoundError
from tests.controllers.harness import eventually, stays

NOBODY = "steward.test/nobody"
"""A ``spec.managedBy`` no controller answers to."""
HOLD = "steward.test/hold"
"""The test's finalizer on a Job's pod."""
NO_SCHEDULER = "steward-test-no-scheduler"
"""A scheduler name no scheduler answers to: the pod stays unscheduled."""
FOREGROUND = "foregroundDeletion"


def jobs_path(ns: str, name: str = "") -> str:
    base = f"/apis/batch/v1/namespaces/{ns}/jobs"
    return f"{base}/{name}" if name else base


def pods_path(ns: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{ns}/pods"
    return f"{base}/{name}" if name else base


def job_body(name: str, ttl: int | None) -> dict[str, Any]:
    """A Job managed by :data:`NOBODY`, with ``ttl`` as ``spec.ttlSecondsAfterFinished``."""
    spec: dict[str, Any] = {
        "managedBy": NOBODY,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            }
        },
    }
    if ttl is not None:
        spec["ttlSecondsAfterFinished"] = ttl
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def stamp(offset: float = 0.0) -> str:
    """A time as the API server writes it, ``offset`` seconds from now."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + offset))


def finished_status(kind: str, at: str, started: str | None = None) -> dict[str, Any]:
    """The status of a Job that finished (``Complete`` or ``Failed``) at ``at``."""
    started = started or at
    if kind == "Complete":
        pairs = [("SuccessCriteriaMet", "Succeeded"), ("Complete", "Succeeded")]
        status: dict[str, Any] = {"succeeded": 1, "completionTime": at}
    else:
        pairs = [("FailureTarget", "BackoffLimitExceeded"), ("Failed", "BackoffLimitExceeded")]
        status = {"failed": 1}
    status["startTime"] = started
    status["conditions"] = [
        {
            "type": kind_,
            "status": "True",
            "reason": reason,
            "message": "set by the test",
            "lastProbeTime": at,
            "lastTransitionTime": at,
        }
        for kind_, reason in pairs
    ]
    return status


def create_job(kube: KubeClient, ns: str, name: str, ttl: int | None) -> dict[str, Any]:
    job: dict[str, Any] = kube.request("POST", jobs_path(ns), job_body(name, ttl))
    return job


def finish(kube: KubeClient, ns: str, name: str, kind: str, at: str, started: str) -> None:
    """Write the Job's status as finished at ``at`` (a merge patch of the status)."""
    kube.request(
        "PATCH",
        jobs_path(ns, name) + "/status",
        {"status": finished_status(kind, at, started)},
        content_type="application/merge-patch+json",
    )


def held_pod(kube: KubeClient, ns: str, job: dict[str, Any]) -> str:
    """An unscheduled pod the Job controls (blocking its owner's deletion), held by
    :data:`HOLD`; its name."""
    name = f"{job['metadata']['name']}-pod"
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": job["metadata"]["name"],
        "uid": job["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "ownerReferences": [owner], "finalizers": [HOLD]},
        "spec": {
            "schedulerName": NO_SCHEDULER,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    kube.request("POST", pods_path(ns), body)
    return name


def release(kube: KubeClient, ns: str, pod: str) -> None:
    """Drop the test's finalizer from the pod."""
    kube.request(
        "PATCH",
        pods_path(ns, pod),
        {"metadata": {"finalizers": None}},
        content_type="application/merge-patch+json",
    )


def get(kube: KubeClient, path: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = kube.request("GET", path)
    except NotFoundError:
        return None
    return found


def fate(job: dict[str, Any] | None) -> str:
    """``gone``, ``foreground`` (being deleted, held by ``foregroundDeletion``),
    ``deleting`` (being deleted otherwise) or ``kept``."""
    if job is None:
        return "gone"
    meta = job["metadata"]
    if not meta.get("deletionTimestamp"):
        return "kept"
    return "foreground" if FOREGROUND in (meta.get("finalizers") or ()) else "deleting"


@dataclass
class Side:
    """One side of the scenario: a cluster's admin client, the namespace, how long its
    controller may take (a deadline, not a measurement)."""

    name: str
    kube: KubeClient
    ns: str
    within: float = 60.0


RAISED_FIRST_TTL = 4
"""``raised``'s TTL when it finishes: at least 3 s until it expires (the finish time is
written in whole seconds) for the one request that raises it."""
SCENARIO = {
    "complete": ("Complete", 2),
    "failed": ("Failed", 0),
    "raised": ("Complete", RAISED_FIRST_TTL),
    "running": (None, 0),
    "untimed": ("Complete", None),
    "skewed": ("Failed", 0),
}
"""Each Job of :func:`scenario`: how it finishes (None: never) and its TTL."""
RAISED_TTL = 3600
KEPT_FOR = 5.0
"""Seconds the kept Jobs are watched past the last expiry (``raised``'s first one)."""


async def scenario(side: Side) -> dict[str, Any]:
    """The scenario of the module docs on ``side``: what became of each Job, and of
    ``complete``'s pod while the Job was held (``pod_deleted``)."""
    kube, ns = side.kube, side.ns
    jobs = {name: create_job(kube, ns, name, ttl) for name, (_, ttl) in SCENARIO.items()}
    pod = held_pod(kube, ns, jobs["complete"])
    started = stamp(-10)
    for name, (kind, _) in SCENARIO.items():
        if kind is not None and name != "raised":
            at = stamp(3600) if name == "skewed" else stamp()
            finish(kube, ns, name, kind, at, started)
    # raised: finished last, its TTL raised by the very next request.
    finish(kube, ns, "raised", "Complete", stamp(), started)
    finished_at = time.monotonic()
    kube.request(
        "PATCH",
        jobs_path(ns, "raised"),
        {"spec": {"ttlSecondsAfterFinished": RAISED_TTL}},
        content_type="application/merge-patch+json",
    )

    def deleted() -> str | None:
        now = fate(get(kube, jobs_path(ns, "complete")))
        return now if now != "kept" else None

    result: dict[str, Any] = {
        "complete_held": await eventually(deleted, f"{side.name}: complete deleted", side.within)
    }
    await eventually(
        lambda: get(kube, jobs_path(ns, "failed")) is None, f"{side.name}: failed gone", side.within
    )

    def pod_deleted() -> bool:
        found = get(kube, pods_path(ns, pod))
        return found is not None and bool(found["metadata"].get("deletionTimestamp"))

    # The garbage collector deletes the pod (it is held by the test's finalizer) while the
    # Job waits for it.
    result["pod_deleted"] = await eventually(pod_deleted, f"{side.name}: the pod", side.within)
    result["complete_while_pod_held"] = fate(get(kube, jobs_path(ns, "complete")))
    release(kube, ns, pod)
    await eventually(
        lambda: get(kube, jobs_path(ns, "complete")) is None,
        f"{side.name}: complete gone once its pod is",
        side.within,
    )
    kept = [name for name in SCENARIO if name not in ("complete", "failed")]
    # Past raised's first expiry, and then some.
    await asyncio.sleep(max(0.0, finished_at + RAISED_FIRST_TTL - time.monotonic()))
    await stays(
        lambda: all(fate(get(kube, jobs_path(ns, name))) == "kept" for name in kept),
        f"{side.name}: {kept} kept",
        KEPT_FOR,
    )
    result["fates"] = {name: fate(get(kube, jobs_path(ns, name))) for name in SCENARIO}
    return result
