"""Steward's TTL-after-finished controller on a control plane without upstream's
(``ttlaf_cluster``), beside upstream's in the session's cluster: the same Jobs on both
sides, what became of each compared (:mod:`.jobs`); and the fresh read of an expired Job
before its deletion, with the mirror held still."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from prometheus_client import REGISTRY

from steward import JOBS, Request, Result
from steward.kube import KubeClient
from tests.controllers.harness import Starter, eventually, upstream_kube, upstream_namespace
from tests.controllers.ttlafterfinished.jobs import (
    RAISED_TTL,
    Side,
    create_job,
    finish,
    get,
    jobs_path,
    scenario,
    stamp,
)

__all__ = ["upstream_kube", "upstream_namespace"]

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

HISTOGRAM = "ttl_after_finished_controller_job_deletion_duration_seconds"

EXPECTED = {
    "complete_held": "foreground",
    "pod_deleted": True,
    "complete_while_pod_held": "foreground",
    "fates": {
        "complete": "gone",
        "failed": "gone",
        "raised": "kept",
        "running": "kept",
        "untimed": "kept",
        "skewed": "kept",
    },
}
"""What the scenario comes to under upstream's controller, spelled out."""


def deletions() -> float:
    return REGISTRY.get_sample_value(f"{HISTOGRAM}_count") or 0.0


async def test_the_same_jobs_go_as_under_upstream(
    upstream_kube: KubeClient,
    upstream_namespace: str,
    ttlaf_kube: KubeClient,
    ttlaf_namespace: str,
    ttlaf: Starter,
) -> None:
    """Finished Jobs (Complete with a held pod, Failed with TTL 0) deleted after their TTL
    with foreground propagation (the Job waits, ``foregroundDeletion``, while its pod is
    deleted first); a Job whose TTL was raised before it expired, one never finished, one
    without a TTL and one finished in the future (a clock skew) kept: at once under
    upstream's controller and under Steward's, the same on both, each deletion observed
    in upstream's histogram."""
    before = deletions()
    ttlaf.start()
    upstream = Side("upstream", upstream_kube, upstream_namespace)
    steward = Side("steward", ttlaf_kube, ttlaf_namespace)
    theirs, ours = await asyncio.gather(scenario(upstream), scenario(steward))
    assert ours == theirs
    assert ours == EXPECTED
    assert deletions() - before == 2


async def test_an_expired_job_is_read_afresh_before_its_deletion(
    ttlaf_kube: KubeClient, ttlaf_namespace: str, ttlaf: Starter
) -> None:
    """With the mirror held still on a Job whose TTL has expired, its TTL raised meanwhile
    on the API server: a sync reads the Job afresh, keeps it and asks to come back for
    the new expiry; with the TTL lowered back, the next sync (the mirror still stale)
    deletes it, foreground."""
    ns = ttlaf_namespace
    controller = ttlaf.new()
    mirror = controller.mirror
    task = ttlaf.run_mirror(controller)
    create_job(ttlaf_kube, ns, "stale", 0)
    finish(ttlaf_kube, ns, "stale", "Complete", stamp(-5), stamp(-10))

    def mirrored_finished() -> bool:
        held = mirror.get(JOBS, ns, "stale")
        return held is not None and bool((held.object.get("status") or {}).get("conditions"))

    await eventually(mirrored_finished, "the finished Job in the mirror", 30.0, 0.05)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    ttlaf_kube.request(
        "PATCH",
        jobs_path(ns, "stale"),
        {"spec": {"ttlSecondsAfterFinished": RAISED_TTL}},
        content_type="application/merge-patch+json",
    )
    result = await controller.reconcile_once(Request(ns, "stale"))
    assert RAISED_TTL - 60 < result.requeue_after <= RAISED_TTL
    job = get(ttlaf_kube, jobs_path(ns, "stale"))
    assert job is not None and not job["metadata"].get("deletionTimestamp")

    ttlaf_kube.request(
        "PATCH",
        jobs_path(ns, "stale"),
        {"spec": {"ttlSecondsAfterFinished": 1}},
        content_type="application/merge-patch+json",
    )
    assert await controller.reconcile_once(Request(ns, "stale")) == Result()
    job = get(ttlaf_kube, jobs_path(ns, "stale"))
    assert job is None or job["metadata"].get("deletionTimestamp")
