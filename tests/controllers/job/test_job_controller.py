"""Steward's Job controller against the real control plane, Jobs naming it in
spec.managedBy, kwok running (and completing) their pods."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from steward.controllers.job.pods import TRACKING_FINALIZER
from steward.kube import KubeClient
from tests.controllers.job.conftest import (
    Running,
    Starter,
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


def create_job(kube: KubeClient, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    return kube.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", body)


async def finished(kube: KubeClient, ns: str, name: str, ctype: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        job = get_job(kube, ns, name)
        return job if condition(job, ctype) else None

    result: dict[str, Any] = await eventually(check, f"job {name} {ctype}")
    return result


def no_tracking_finalizers(kube: KubeClient, ns: str, name: str) -> bool:
    return all(
        TRACKING_FINALIZER not in (p["metadata"].get("finalizers") or ())
        for p in job_pods(kube, ns, name)
    )


def condition_types(job: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (c["type"], c["status"], c.get("reason", ""))
        for c in (job.get("status") or {}).get("conditions") or ()
    ]


async def test_parallel_job_completes(
    kube: KubeClient, namespace: str, job_controller: Running
) -> None:
    create_job(kube, namespace, job_body("par", parallelism=2, completions=3))
    job = await finished(kube, namespace, "par", "Complete")
    st = job["status"]
    assert st["succeeded"] == 3
    assert st.get("failed", 0) == 0
    assert st.get("active", 0) == 0
    assert condition_types(job) == [
        ("SuccessCriteriaMet", "True", "CompletionsReached"),
        ("Complete", "True", "CompletionsReached"),
    ]
    assert st["completionTime"] >= st["startTime"]
    await eventually(lambda: no_tracking_finalizers(kube, namespace, "par"), "finalizers gone")
    assert len(job_pods(kube, namespace, "par")) == 3


async def test_indexed_job_completes(
    kube: KubeClient, namespace: str, job_controller: Running
) -> None:
    create_job(
        kube,
        namespace,
        job_body("idx", parallelism=3, completions=3, completionMode="Indexed"),
    )
    job = await finished(kube, namespace, "idx", "Complete")
    assert job["status"]["completedIndexes"] == "0-2"
    assert job["status"]["succeeded"] == 3
    found = job_pods(kube, namespace, "idx")
    index_key = "batch.kubernetes.io/job-completion-index"
    assert sorted(p["metadata"]["annotations"][index_key] for p in found) == ["0", "1", "2"]
    for p in found:
        ix = p["metadata"]["labels"][index_key]
        assert p["spec"]["hostname"] == f"idx-{ix}"
        env = p["spec"]["containers"][0]["env"]
        assert env[0]["name"] == "JOB_COMPLETION_INDEX"


async def test_backoff_limit_exceeded(
    kube: KubeClient, namespace: str, job_controller: Running
) -> None:
    body = job_body("fails", completions=1, backoffLimit=1, pod_spec=UNSCHEDULABLE)
    create_job(kube, namespace, body)
    failed_names: set[str] = set()

    def fail_next() -> bool:
        for p in job_pods(kube, namespace, "fails"):
            if p["status"].get("phase") == "Pending" and p["metadata"]["name"] not in failed_names:
                fail_pod(kube, p)
                failed_names.add(p["metadata"]["name"])
                return True
        return False

    await eventually(fail_next, "the first pod")
    # Re-created after the backoff (1 s here), then it fails too: limit 1 is exceeded.
    await eventually(fail_next, "the second pod")
    job = await finished(kube, namespace, "fails", "Failed")
    assert condition_types(job) == [
        ("FailureTarget", "True", "BackoffLimitExceeded"),
        ("Failed", "True", "BackoffLimitExceeded"),
    ]
    assert job["status"]["failed"] == 2
    assert job["status"].get("succeeded", 0) == 0
    assert "completionTime" not in job["status"]
    await eventually(lambda: no_tracking_finalizers(kube, namespace, "fails"), "finalizers gone")


async def test_suspend_and_resume(
    kube: KubeClient, namespace: str, job_controller: Running
) -> None:
    body = job_body("sus", parallelism=2, completions=2, suspend=True, pod_spec=UNSCHEDULABLE)
    create_job(kube, namespace, body)
    job = await finished(kube, namespace, "sus", "Suspended")
    assert condition_types(job) == [("Suspended", "True", "JobSuspended")]
    assert "startTime" not in job["status"]
    await asyncio.sleep(1.0)
    assert job_pods(kube, namespace, "sus") == []

    kube.request(
        "PATCH",
        f"/apis/batch/v1/namespaces/{namespace}/jobs/sus",
        {"spec": {"suspend": False}},
        content_type="application/merge-patch+json",
    )

    def resumed() -> bool:
        job = get_job(kube, namespace, "sus")
        active = [
            p
            for p in job_pods(kube, namespace, "sus")
            if not p["metadata"].get("deletionTimestamp")
        ]
        return (
            ("Suspended", "False", "JobResumed") in condition_types(job)
            and job["status"].get("active") == 2
            and len(active) == 2
            and "startTime" in job["status"]
        )

    await eventually(resumed, "the job to resume with 2 pods")

    kube.request(
        "PATCH",
        f"/apis/batch/v1/namespaces/{namespace}/jobs/sus",
        {"spec": {"suspend": True}},
        content_type="application/merge-patch+json",
    )

    def suspended_again() -> bool:
        job = get_job(kube, namespace, "sus")
        return (
            ("Suspended", "True", "JobSuspended") in condition_types(job)
            and job["status"].get("active", 0) == 0
            and not job_pods(kube, namespace, "sus")
        )

    await eventually(suspended_again, "the pods to be deleted on suspend")
    job = get_job(kube, namespace, "sus")
    assert job["status"].get("failed", 0) == 0  # deleted pods are not failures


async def test_other_managers_jobs_are_untouched(
    kube: KubeClient, namespace: str, job_controller: Running
) -> None:
    """A Job naming another manager gets no pods and no status. The controller's sight of
    it is proven by a Job of its own created after it: the informer delivers the
    namespace's Jobs in the order the API server wrote them, so once the later Job is
    complete (pod created, counted, finalizer removed) the foreign one had been seen."""
    body = job_body("theirs", managed=False, completions=1)
    body["spec"]["managedBy"] = "example.com/someone-else"
    create_job(kube, namespace, body)
    create_job(kube, namespace, job_body("ours", completions=1))
    await finished(kube, namespace, "ours", "Complete")
    await eventually(lambda: no_tracking_finalizers(kube, namespace, "ours"), "finalizers gone")
    assert len(job_pods(kube, namespace, "ours")) == 1
    job = get_job(kube, namespace, "theirs")
    assert not (job.get("status") or {})
    assert job_pods(kube, namespace, "theirs") == []


async def test_orphan_finalizers_cleared_after_job_deleted(
    kube: KubeClient, namespace: str, job_controller: Running
) -> None:
    body = job_body("orphans", parallelism=2, completions=2, pod_spec=UNSCHEDULABLE)
    create_job(kube, namespace, body)
    await eventually(
        lambda: get_job(kube, namespace, "orphans")["status"].get("active") == 2, "2 active pods"
    )
    # Delete the Job but keep its pods: they must not keep the tracking finalizer.
    kube.request(
        "DELETE",
        f"/apis/batch/v1/namespaces/{namespace}/jobs/orphans",
        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Orphan"},
    )
    await eventually(
        lambda: no_tracking_finalizers(kube, namespace, "orphans"), "orphans' finalizers gone"
    )
    assert len(job_pods(kube, namespace, "orphans")) == 2


async def test_restart_in_the_middle(
    kube: KubeClient, namespace: str, job_controllers: Starter
) -> None:
    first = job_controllers.start()
    body = job_body("restart", parallelism=2, completions=3, pod_spec=UNSCHEDULABLE)
    create_job(kube, namespace, body)
    await eventually(
        lambda: get_job(kube, namespace, "restart")["status"].get("active") == 2, "2 active pods"
    )
    await first.stop()
    # While no controller runs, both pods succeed.
    for p in job_pods(kube, namespace, "restart"):
        fail_pod(kube, p, exit_code=0)
    await asyncio.sleep(1.0)
    job_controllers.start()

    def third_pod() -> list[dict[str, Any]]:
        pending = [
            p for p in job_pods(kube, namespace, "restart") if p["status"].get("phase") == "Pending"
        ]
        return pending

    (last,) = await eventually(third_pod, "one more pod for the third completion")
    fail_pod(kube, last, exit_code=0)
    job = await finished(kube, namespace, "restart", "Complete")
    assert job["status"]["succeeded"] == 3
    assert job["status"].get("failed", 0) == 0
    assert len(job_pods(kube, namespace, "restart")) == 3  # nothing created twice
    await eventually(lambda: no_tracking_finalizers(kube, namespace, "restart"), "finalizers gone")
