"""Steward's resourcequota controller against upstream's: the same quotas and objects in a
namespace of ``quota_cluster`` (Steward's controller) and of the session's ``cluster``
(kube-controller-manager's), every quota's status compared field by field
(:func:`tests.controllers.quota.quotas.scenario`)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from steward.kube import KubeClient
from tests.controllers.harness import upstream_kube, upstream_namespace
from tests.controllers.quota.quotas import Side, quota_host, scenario, steward_ns

__all__ = ["quota_host", "steward_ns", "upstream_kube", "upstream_namespace"]

pytestmark = pytest.mark.integration


def test_statuses_match_upstream(
    steward_ns: str, quota_kube: KubeClient, upstream_kube: KubeClient, upstream_namespace: str
) -> None:
    """Every evaluator (pods with init containers, a sidecar, pod-level resources,
    hugepages and extended resources; services; claims by storage class, two of them
    mid-resize with status.allocatedResources above and below the request; object
    counts, count/deployments.apps, count/jobs.batch), every pod scope, replenishment on
    deletion and on a pod turning Failed, and used keys following a change of hard: both
    sides' statuses, at both points of the scenario, are the same.

    Catches: any difference between Steward's status and upstream's (a name computed
    differently, a format, a zero written otherwise, a key kept or left out; a resized
    claim charged its request alone, or what its status allocated when that is less),
    and, since the scenario spells out upstream's values, which side moved."""
    sides = [
        Side("steward", quota_kube, steward_ns),
        Side("upstream", upstream_kube, upstream_namespace),
    ]
    try:
        with ThreadPoolExecutor(2) as pool:
            steward, upstream = pool.map(scenario, sides)
    finally:
        for side in sides:
            side.cleanup()
    assert steward == upstream
