"""The pod garbage collector on a cluster: each of its four passes under Steward's
collector (``nodes_cluster``), and the three that act on single pods compared with
upstream's in the session's cluster (:mod:`tests.controllers.nodes.podgc`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import REGISTRY

from steward.kube import KubeClient
from tests.controllers.harness import Starter, stays, upstream_kube, upstream_namespace
from tests.controllers.nodes.podgc import (
    HOLD,
    WITHIN_STEWARD,
    WITHIN_UPSTREAM,
    GCSide,
    all_cases,
    gc_namespace,
    podgc,
)

__all__ = ["gc_namespace", "podgc", "upstream_kube", "upstream_namespace"]

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


async def test_terminated_pods_over_the_threshold_go_evicted_then_oldest_first(
    nodes_kube: KubeClient, gc_namespace: str, podgc: Starter
) -> None:
    """Four terminated pods and a running one, threshold 2: the evicted pod and the
    oldest go (not the first two by name, nor the two oldest), in one sweep; the others
    stay; both deletions counted."""
    side = GCSide("steward", nodes_kube, gc_namespace, WITHIN_STEWARD)
    # Created a second apart at least (creation times are whole seconds), names in the
    # opposite order.
    for name in ("z-oldest", "y-middle", "x-newest"):
        await side.make_pod(name, held=False)
        await asyncio.sleep(1.1)
    await side.make_pod("w-evicted", held=False)
    await side.make_pod("v-running", held=False)
    for name, status in (
        ("z-oldest", {"phase": "Succeeded"}),
        ("y-middle", {"phase": "Succeeded"}),
        ("x-newest", {"phase": "Failed"}),
        ("w-evicted", {"phase": "Failed", "reason": "Evicted"}),
        ("v-running", {"phase": "Running"}),
    ):
        await side.call(
            "PATCH",
            side.pod_path(name) + "/status",
            {"status": status},
            content_type="application/merge-patch+json",
        )
    podgc.start("--terminated-pod-gc-threshold=2")
    await side.wait_gone("z-oldest")
    await side.wait_gone("w-evicted")

    def remaining() -> bool:
        items = nodes_kube.request("GET", side.pod_path()).get("items") or ()
        return sorted(p["metadata"]["name"] for p in items) == ["v-running", "x-newest", "y-middle"]

    await stays(remaining, "the three other pods", 1.5)
    deleted = sample("pod_gc_collector_force_delete_pods_total", gc_namespace, "terminated")
    errors = sample("pod_gc_collector_force_delete_pod_errors_total", gc_namespace, "terminated")
    assert (deleted, errors) == (2.0, None)
