"""The same Jobs under upstream's job controller and under Steward's, final statuses
compared field by field."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from steward.kube import KubeClient
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


def comparable(job: dict[str, Any]) -> dict[str, Any]:
    """What must be identical: counts, condition types/statuses/reasons/messages,
    completed and failed indexes, uncounted pods (absent fields as their zero value)."""
    st = job.get("status") or {}
    uncounted = st.get("uncountedTerminatedPods") or {}
    return {
        "active": st.get("active", 0),
        "ready": st.get("ready", 0),
        "terminating": st.get("terminating", 0),
        "succeeded": st.get("succeeded", 0),
        "failed": st.get("failed", 0),
        "completedIndexes": st.get("completedIndexes", ""),
        "failedIndexes": st.get("failedIndexes"),
        "uncounted": (uncounted.get("succeeded") or [], uncounted.get("failed") or []),
        "conditions": [
            (c["type"], c["status"], c.get("reason"), c.get("message"))
            for c in st.get("conditions") or ()
        ],
        "hasStartTime": "startTime" in st,
        "hasCompletionTime": "completionTime" in st,
    }


async def run_both(
    kube: KubeClient, ns: str, name: str, spec: dict[str, Any], ending: str, fail: int = 0
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Create the Job twice (upstream's, Steward's), failing ``fail`` pods of each as
    they appear, and wait for both to reach the ``ending`` condition."""
    names = {False: f"{name}-upstream", True: f"{name}-steward"}
    for managed, job_name in names.items():
        kube.request(
            "POST",
            f"/apis/batch/v1/namespaces/{ns}/jobs",
            job_body(job_name, managed=managed, **spec),
        )
    results = []
    for job_name in names.values():
        failed: set[str] = set()

        def step(job_name: str = job_name, failed: set[str] = failed) -> dict[str, Any] | None:
            job = get_job(kube, ns, job_name)
            if condition(job, ending):
                return job
            for p in job_pods(kube, ns, job_name):
                pname = p["metadata"]["name"]
                if (
                    len(failed) < fail
                    and p["status"].get("phase") == "Pending"
                    and pname not in failed
                ):
                    fail_pod(kube, p)
                    failed.add(pname)
            return None

        results.append(await eventually(step, f"{job_name} {ending}", within=180.0))
    return results[0], results[1]


@pytest.mark.parametrize(
    ("spec", "ending", "fail"),
    [
        ({"parallelism": 2, "completions": 3}, "Complete", 0),
        ({"parallelism": 3, "completions": 3, "completionMode": "Indexed"}, "Complete", 0),
        ({"parallelism": 2}, "Complete", 0),
        ({"completions": 1, "backoffLimit": 0, "pod_spec": UNSCHEDULABLE}, "Failed", 1),
    ],
    ids=["parallel", "indexed", "work-queue", "backoff-limit-0"],
)
async def test_same_final_status(
    kube: KubeClient,
    namespace: str,
    job_controller: Running,
    spec: dict[str, Any],
    ending: str,
    fail: int,
) -> None:
    upstream, steward = await run_both(kube, namespace, "diff", dict(spec), ending, fail)
    await asyncio.sleep(0)
    assert comparable(steward) == comparable(upstream)
