"""Steward's Job controller against the real control plane: pod failure policy, backoff
limit per index, success policy and elastic Indexed Jobs, the test ending the pods itself.
(podReplacementPolicy is covered by test_differential.py's "replacement-failed" case.)"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import pytest

from steward.controllers.job import indexes
from steward.kube import KubeClient, NotFoundError
from tests.controllers.job.conftest import (
    Running,
    condition,
    eventually,
    fail_pod,
    get_job,
    job_body,
    job_pods,
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

UNSCHEDULABLE = {"nodeSelector": {"steward.io/no-such-node": "true"}}
"""Pods that stay Pending (kwok never runs them), so the test decides how they end."""
HOLD = "steward.io/test-hold"
"""A finalizer the test puts on a pod to keep it terminating."""


def create_job(kube: KubeClient, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    return kube.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", body)


def patch(kube: KubeClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    return kube.request("PATCH", path, body, content_type="application/merge-patch+json")


def disrupt_pod(kube: KubeClient, pod: dict[str, Any]) -> None:
    """End the pod the way an eviction does: phase Failed with a DisruptionTarget
    condition, no container exit code."""
    meta = pod["metadata"]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {
        "status": {
            "phase": "Failed",
            "conditions": [
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "EvictionByEvictionAPI",
                    "lastTransitionTime": now,
                }
            ],
        }
    }
    with contextlib.suppress(NotFoundError):
        patch(kube, f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status", status)


def index_of(pod: dict[str, Any]) -> int:
    return indexes.pod_index(pod)


def pending(kube: KubeClient, ns: str, name: str) -> Callable[[], list[dict[str, Any]]]:
    """A check returning the Job's Pending pods not being deleted, by index."""

    def check() -> list[dict[str, Any]]:
        found = [
            p
            for p in job_pods(kube, ns, name)
            if p["status"].get("phase") == "Pending" and not p["metadata"].get("deletionTimestamp")
        ]
        return sorted(found, key=index_of)

    return check


async def finished(kube: KubeClient, ns: str, name: str, ctype: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        job = get_job(kube, ns, name)
        return job if condition(job, ctype) else None

    result: dict[str, Any] = await eventually(check, f"job {name} {ctype}")
    return result


def reasons(job: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["type"], c.get("reason", "")) for c in job["status"].get("conditions") or ()]


async def test_pod_failure_policy_ignore_then_fail_job(
    kube: KubeClient, namespace: str, job_controller: Running
) -> None:
    policy = {
        "rules": [
            {
                "action": "Ignore",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            },
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
        ]
    }
    body = job_body(
        "pfp", completions=1, backoffLimit=0, podFailurePolicy=policy, pod_spec=UNSCHEDULABLE
    )
    create_job(kube, namespace, body)
    (first,) = await eventually(pending(kube, namespace, "pfp"), "the first pod")
    disrupt_pod(kube, first)  # ignored: backoffLimit 0 is not exceeded

    def replacement() -> list[dict[str, Any]]:
        return [
            p
            for p in pending(kube, namespace, "pfp")()
            if p["metadata"]["uid"] != first["metadata"]["uid"]
        ]

    (second,) = await eventually(replacement, "a replacement for the ignored failure")
    assert get_job(kube, namespace, "pfp")["status"].get("failed", 0) == 0
    fail_pod(kube, second, exit_code=42)
    job = await finished(kube, namespace, "pfp", "Failed")
    message = (
        f"Container main for pod {namespace}/{second['metadata']['name']} failed with exit "
        "code 42 matching FailJob rule at index 1"
    )
    assert [(c["type"], c["reason"], c["message"]) for c in job["status"]["conditions"]] == [
        ("FailureTarget", "PodFailurePolicy", message),
        ("Failed", "PodFailurePolicy", message),
    ]
    assert job["status"]["failed"] == 1


async def test_backoff_limit_per_index(
    kube: KubeClient, namespace: str, job_controller: Running
) -> None:
    body = job_body(
        "bpi",
        completions=2,
        parallelism=2,
        completionMode="Indexed",
        backoffLimitPerIndex=1,
        pod_spec=UNSCHEDULABLE,
    )
    create_job(kube, namespace, body)
    first = await eventually(
        lambda: [p for p in pending(kube, namespace, "bpi")() if index_of(p) == 0], "index 0"
    )
    assert first[0]["metadata"]["annotations"][indexes.FAILURE_COUNT_KEY] == "0"
    fail_pod(kube, first[0])

    def retried() -> list[dict[str, Any]]:
        return [
            p
            for p in pending(kube, namespace, "bpi")()
            if index_of(p) == 0 and p["metadata"]["uid"] != first[0]["metadata"]["uid"]
        ]

    (second,) = await eventually(retried, "index 0 retried after its backoff")
    assert second["metadata"]["annotations"][indexes.FAILURE_COUNT_KEY] == "1"
    fail_pod(kube, second)  # the second failure exceeds the index's limit of 1
    await eventually(
        lambda: get_job(kube, namespace, "bpi")["status"].get("failedIndexes") == "0",
        "index 0 failed",
    )
    for p in pending(kube, namespace, "bpi")():
        assert index_of(p) == 1  # a failed index is not retried
        fail_pod(kube, p, exit_code=0)
    job = await finished(kube, namespace, "bpi", "Failed")
    st = job["status"]
    assert reasons(job) == [("FailureTarget", "FailedIndexes"), ("Failed", "FailedIndexes")]
    assert (st["failedIndexes"], st["completedIndexes"]) == ("0", "1")
    assert (st["failed"], st["succeeded"]) == (2, 1)


async def test_max_failed_indexes(
    kube: KubeClient, namespace: str, job_controller: Running
) -> None:
    body = job_body(
        "mfi",
        completions=3,
        parallelism=3,
        completionMode="Indexed",
        backoffLimitPerIndex=0,
        maxFailedIndexes=0,
        pod_spec=UNSCHEDULABLE,
    )
    create_job(kube, namespace, body)
    pods_ = await eventually(
        lambda: (found := pending(kube, namespace, "mfi")()) and len(found) == 3 and found,
        "3 pods",
    )
    fail_pod(kube, pods_[1])
    job = await finished(kube, namespace, "mfi", "Failed")
    assert reasons(job) == [
        ("FailureTarget", "MaxFailedIndexesExceeded"),
        ("Failed", "MaxFailedIndexesExceeded"),
    ]
    assert job["status"]["failedIndexes"] == "1"
    assert job["status"]["failed"] == 3  # the failed pod and the two it terminated


async def test_success_policy(kube: KubeClient, namespace: str, job_controller: Running) -> None:
    body = job_body(
        "sp",
        completions=3,
        parallelism=3,
        completionMode="Indexed",
        successPolicy={"rules": [{"succeededIndexes": "0", "succeededCount": 1}]},
        pod_spec=UNSCHEDULABLE,
    )
    create_job(kube, namespace, body)
    pods_ = await eventually(
        lambda: (found := pending(kube, namespace, "sp")()) and len(found) == 3 and found,
        "3 pods",
    )
    fail_pod(kube, pods_[0], exit_code=0)
    job = await finished(kube, namespace, "sp", "Complete")
    st = job["status"]
    assert [(c["type"], c["reason"], c["message"]) for c in st["conditions"]] == [
        ("SuccessCriteriaMet", "SuccessPolicy", "Matched rules at index 0"),
        ("Complete", "SuccessPolicy", "Matched rules at index 0"),
    ]
    assert (st["succeeded"], st.get("failed", 0), st["completedIndexes"]) == (1, 0, "0")
    assert st.get("active", 0) == 0 and st.get("terminating", 0) == 0
    await eventually(lambda: len(job_pods(kube, namespace, "sp")) == 1, "the rest removed")


async def test_elastic_indexed_job(
    kube: KubeClient, namespace: str, job_controller: Running
) -> None:
    body = job_body(
        "ela", completions=4, parallelism=4, completionMode="Indexed", pod_spec=UNSCHEDULABLE
    )
    create_job(kube, namespace, body)
    pods_ = await eventually(
        lambda: (found := pending(kube, namespace, "ela")()) and len(found) == 4 and found,
        "4 pods",
    )
    fail_pod(kube, pods_[0], exit_code=0)
    fail_pod(kube, pods_[3], exit_code=0)
    await eventually(
        lambda: get_job(kube, namespace, "ela")["status"].get("completedIndexes") == "0,3",
        "indexes 0 and 3 done",
    )
    patch(
        kube,
        f"/apis/batch/v1/namespaces/{namespace}/jobs/ela",
        {"spec": {"completions": 2, "parallelism": 2}},
    )

    def scaled_down() -> list[dict[str, Any]] | None:
        job = get_job(kube, namespace, "ela")
        left = pending(kube, namespace, "ela")()
        if job["status"].get("completedIndexes") != "0" or [index_of(p) for p in left] != [1]:
            return None
        return left

    (last,) = await eventually(scaled_down, "index 2 removed, index 3 no longer counted")
    fail_pod(kube, last, exit_code=0)
    job = await finished(kube, namespace, "ela", "Complete")
    st = job["status"]
    assert (st["completedIndexes"], st["succeeded"], st.get("failed", 0)) == ("0,1", 2, 0)
