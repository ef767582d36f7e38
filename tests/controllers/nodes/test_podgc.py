"""The pod garbage collector on a cluster: each of its four passes under Steward's
collector (``nodes_cluster``) and under upstream's at once, what each did compared: the
three that act on single pods in the session's cluster, the threshold of terminated pods
in a control plane of its own (:mod:`tests.controllers.nodes.podgc`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import REGISTRY

from steward.kube import KubeClient
from tests.controllers.harness import Starter, upstream_kube, upstream_namespace
from tests.controllers.nodes.podgc import (
    HOLD,
    THRESHOLD,
    WITHIN_STEWARD,
    WITHIN_UPSTREAM,
    GCSide,
    all_cases,
    gc_namespace,
    over_threshold,
    podgc,
    threshold_cluster,
    threshold_kube,
    threshold_namespace,
)

__all__ = [
    "gc_namespace",
    "podgc",
    "threshold_cluster",
    "threshold_kube",
    "threshold_namespace",
    "upstream_kube",
    "upstream_namespace",
]

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

DISRUPTION_TARGET = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "DeletionByPodGC",
    "message": "PodGC: node no longer exists",
    "observedGeneration": 1,
    "lastProbeTime": None,
}


def collected(disruption: list[dict[str, Any]], generation: int) -> dict[str, Any]:
    """A pod marked Failed at ``generation`` (a deletion raises a pod's generation) and
    force-deleted, still held by the test's finalizer."""
    return {
        "phase": "Failed",
        "observed_generation": generation,
        "deleting": True,
        "grace": 0,
        "disruption_target": disruption,
        "finalizers": [HOLD],
    }


async def test_each_case_as_upstream(
    upstream_kube: KubeClient,
    upstream_namespace: str,
    nodes_kube: KubeClient,
    gc_namespace: str,
    podgc: Starter,
) -> None:
    """An orphaned pod, an unscheduled terminating pod and a terminating pod on an
    out-of-service node (beside one on a node merely not Ready), at once under upstream's
    collector and under Steward's: each pod marked and deleted the same way."""
    podgc.start()
    upstream = GCSide("upstream", upstream_kube, upstream_namespace, WITHIN_UPSTREAM)
    steward = GCSide("steward", nodes_kube, gc_namespace, WITHIN_STEWARD)
    theirs, ours = await asyncio.gather(all_cases(upstream), all_cases(steward))
    assert ours == theirs
    # Spelled out, so that both sides cannot agree on something else.
    assert ours["orphaned"] == collected([DISRUPTION_TARGET], 1)
    assert ours["unscheduled"] == collected([], 2)
    control = ours["out-of-service"].pop("control")
    assert ours["out-of-service"] == collected([], 2)
    assert control["phase"] == "Pending" and control["grace"] == 30


def sample(metric: str, ns: str, reason: str) -> float | None:
    return REGISTRY.get_sample_value(metric, {"namespace": ns, "reason": reason})


def held_pod(phase: str, *, collected: bool) -> dict[str, Any]:
    """A pod held by the test's finalizer with the status the test gave it, neither that
    nor its conditions changed; force-deleted when ``collected`` (with a grace period of
    0, which the API server gives a pod unscheduled or terminated whatever is asked)."""
    return {
        "phase": phase,
        "observed_generation": None,
        "deleting": collected,
        "grace": 0 if collected else None,
        "disruption_target": [],
        "finalizers": [HOLD],
    }


OVER_THRESHOLD = {
    "pods": {
        "v-running": held_pod("Running", collected=False),
        "w-evicted": held_pod("Failed", collected=True),
        "x-newest": held_pod("Failed", collected=False),
        "y-middle": held_pod("Succeeded", collected=False),
        "z-oldest": held_pod("Succeeded", collected=True),
    },
    "left": ["v-running", "x-newest", "y-middle"],
}
"""What :func:`over_threshold` sees on either side."""


async def test_terminated_pods_over_the_threshold_go_evicted_then_oldest_first(
    threshold_kube: KubeClient,
    threshold_namespace: str,
    nodes_kube: KubeClient,
    gc_namespace: str,
    podgc: Starter,
) -> None:
    """Four terminated pods and a running one, threshold 2, at once under upstream's
    collector (a control plane of its own, where no other pod counts) and under
    Steward's: on both, the evicted pod and the oldest are force-deleted as they are and
    the others stay; under Steward's, in one sweep and both deletions counted."""
    everywhere = threshold_kube.request("GET", "/api/v1/pods").get("items") or ()
    assert [p["metadata"]["name"] for p in everywhere] == []
    upstream = GCSide("upstream", threshold_kube, threshold_namespace, WITHIN_UPSTREAM)
    steward = GCSide("steward", nodes_kube, gc_namespace, WITHIN_STEWARD)
    theirs, ours = await asyncio.gather(
        over_threshold(upstream),
        over_threshold(steward, lambda: podgc.start(f"--terminated-pod-gc-threshold={THRESHOLD}")),
    )
    assert ours == theirs
    # Spelled out, so that both sides cannot agree on something else.
    assert ours == OVER_THRESHOLD
    deleted = sample("pod_gc_collector_force_delete_pods_total", gc_namespace, "terminated")
    errors = sample("pod_gc_collector_force_delete_pod_errors_total", gc_namespace, "terminated")
    assert (deleted, errors) == (2.0, None)
