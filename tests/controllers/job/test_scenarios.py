"""Upstream's Job controller integration scenarios, ported: Steward's Job controller
against the real control plane, the test deciding how each pod ends (its pods are never
scheduled, so kwok does not run them)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

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
from tests.controllers.job.test_job_controller import condition_types, no_tracking_finalizers
from tests.controllers.job.test_job_policies import (
    HOLD,
    UNSCHEDULABLE,
    create_job,
    finished,
    index_of,
    patch,
    pending,
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

COMPLETED = [
    ("SuccessCriteriaMet", "True", "CompletionsReached"),
    ("Complete", "True", "CompletionsReached"),
]


def counts(job: dict[str, Any]) -> tuple[int, int, int]:
    """The Job's (active, succeeded, failed)."""
    st = job.get("status") or {}
    return st.get("active", 0), st.get("succeeded", 0), st.get("failed", 0)


async def pending_count(kube: KubeClient, ns: str, name: str, n: int) -> list[dict[str, Any]]:
    """Wait until the Job has exactly ``n`` Pending pods not being deleted; return them."""
    check = pending(kube, ns, name)
    found: list[dict[str, Any]] = await eventually(
        lambda: (p := check()) and len(p) == n and p, f"{n} pending pods of {name}"
    )
    return found


async def status_counts(
    kube: KubeClient, ns: str, name: str, want: tuple[int, int, int]
) -> dict[str, Any]:
    """Wait until the Job's (active, succeeded, failed) is ``want``; return the Job."""
    job: dict[str, Any] = await eventually(
        lambda: (j := get_job(kube, ns, name)) and counts(j) == want and j,
        f"{name} with (active, succeeded, failed) = {want}",
    )
    return job


NOWHERE = "steward-test-nowhere"
"""A node that does not exist: pods bound to it are left alone by kwok and the scheduler."""


def hold(kube: KubeClient, pod: dict[str, Any]) -> str:
    """Add the test's finalizer to the pending pod, keeping it terminating once deleted;
    return the pod's path.

    The pod is also bound to :data:`NOWHERE`: kube-controller-manager's PodGC marks a
    terminating pod that is not bound to any node Failed within its 20 s period, which would
    end the terminating state the test holds on to; a pod of a missing node it leaves alone
    for a 40 s quarantine first."""
    meta = pod["metadata"]
    path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
    kube.request(
        "POST",
        f"{path}/binding",
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": NOWHERE},
        },
    )
    current = kube.request("GET", path)
    finalizers = list(current["metadata"].get("finalizers") or ())
    patch(kube, path, {"metadata": {"finalizers": [*finalizers, HOLD]}})
    return path


def release(kube: KubeClient, path: str) -> None:
    """Remove the test's finalizer from the pod at ``path``, if it is still there. A pod
    being deleted is then removed at once, as its kubelet would confirm it (a pod bound
    to a node waits for that, and :data:`NOWHERE` has no kubelet)."""
    with contextlib.suppress(NotFoundError):
        current = kube.request("GET", path)
        finalizers = current["metadata"].get("finalizers") or []
        if HOLD in finalizers:
            kept = [f for f in finalizers if f != HOLD]
            patch(kube, path, {"metadata": {"finalizers": kept}})
        if current["metadata"].get("deletionTimestamp"):
            kube.request("DELETE", path, {"gracePeriodSeconds": 0})


async def test_non_parallel_job_with_a_failure(
    kube: KubeClient, namespace: str, job_controller: Running
) -> None:
    create_job(kube, namespace, job_body("np", backoffLimit=2, pod_spec=UNSCHEDULABLE))
    (first,) = await pending_count(kube, namespace, "np", 1)
    await status_counts(kube, namespace, "np", (1, 0, 0))
    fail_pod(kube, first)

    def replacement() -> list[dict[str, Any]]:
        return [
            p
            for p in pending(kube, namespace, "np")()
            if p["metadata"]["uid"] != first["metadata"]["uid"]
        ]

    (second,) = await eventually(replacement, "a replacement for the failed pod")
    job = await status_counts(kube, namespace, "np", (1, 0, 1))
    assert not condition(job, "FailureTarget")
    fail_pod(kube, second, exit_code=0)
    job = await finished(kube, namespace, "np", "Complete")
    assert counts(job) == (0, 1, 1)
    assert condition_types(job) == COMPLETED
    assert job["status"].get("terminating", 0) == 0
    assert job["status"]["completionTime"] >= job["status"]["startTime"]
    assert len(job_pods(kube, namespace, "np")) == 2
    await eventually(lambda: no_tracking_finalizers(kube, namespace, "np"), "finalizers gone")


async def test_parallel_job_with_failures(
    kube: KubeClient, namespace: str, job_controller: Running
) -> None:
    body = job_body("pf", parallelism=2, completions=3, pod_spec=UNSCHEDULABLE)
    create_job(kube, namespace, body)
    first = await pending_count(kube, namespace, "pf", 2)
    await status_counts(kube, namespace, "pf", (2, 0, 0))
    for p in first:
        fail_pod(kube, p)
    # Both replaced (after the backoff), the two failures counted.
    second = await pending_count(kube, namespace, "pf", 2)
    assert {p["metadata"]["uid"] for p in second}.isdisjoint(p["metadata"]["uid"] for p in first)
    await status_counts(kube, namespace, "pf", (2, 0, 2))
    for p in second:
        fail_pod(kube, p, exit_code=0)
    # One completion left: one more pod, not two.
    (last,) = await pending_count(kube, namespace, "pf", 1)
    await status_counts(kube, namespace, "pf", (1, 2, 2))
    fail_pod(kube, last, exit_code=0)
    job = await finished(kube, namespace, "pf", "Complete")
    assert counts(job) == (0, 3, 2)
    assert condition_types(job) == COMPLETED
    assert job["status"].get("terminating", 0) == 0
    assert len(job_pods(kube, namespace, "pf")) == 5
    await eventually(lambda: no_tracking_finalizers(kube, namespace, "pf"), "finalizers gone")


async def test_changing_parallelism(
    kube: KubeClient, namespace: str, job_controller: Running
) -> None:
    body = job_body("cp", parallelism=1, completions=4, pod_spec=UNSCHEDULABLE)
    create_job(kube, namespace, body)
    path = f"/apis/batch/v1/namespaces/{namespace}/jobs/cp"
    await pending_count(kube, namespace, "cp", 1)
    await status_counts(kube, namespace, "cp", (1, 0, 0))

    patch(kube, path, {"spec": {"parallelism": 3}})
    await pending_count(kube, namespace, "cp", 3)
    await status_counts(kube, namespace, "cp", (3, 0, 0))

    # Scaling down removes active pods without counting them as failures.
    patch(kube, path, {"spec": {"parallelism": 2}})
    running = await pending_count(kube, namespace, "cp", 2)
    await status_counts(kube, namespace, "cp", (2, 0, 0))

    for p in running:
        fail_pod(kube, p, exit_code=0)
    rest = await pending_count(kube, namespace, "cp", 2)
    assert {p["metadata"]["uid"] for p in rest}.isdisjoint(p["metadata"]["uid"] for p in running)
    await status_counts(kube, namespace, "cp", (2, 2, 0))
    for p in rest:
        fail_pod(kube, p, exit_code=0)
    job = await finished(kube, namespace, "cp", "Complete")
    assert counts(job) == (0, 4, 0)
    assert condition_types(job) == COMPLETED
    assert job["status"].get("terminating", 0) == 0
    await eventually(lambda: no_tracking_finalizers(kube, namespace, "cp"), "finalizers gone")


async def test_delayed_failed_condition(
    kube: KubeClient, namespace: str, job_controller: Running
) -> None:
    body = job_body("dfail", parallelism=2, completions=2, backoffLimit=0, pod_spec=UNSCHEDULABLE)
    create_job(kube, namespace, body)
    doomed, held = await pending_count(kube, namespace, "dfail", 2)
    path = hold(kube, held)
    try:
        fail_pod(kube, doomed)

        def failure_target() -> dict[str, Any] | None:
            job = get_job(kube, namespace, "dfail")
            return job if condition(job, "FailureTarget") else None

        job = await eventually(failure_target, "FailureTarget")
        assert not condition(job, "Failed")
        # The held pod is deleted by the controller; it stays terminating.
        job = await eventually(
            lambda: (
                (j := get_job(kube, namespace, "dfail"))["status"].get("terminating") == 1 and j
            ),
            "the held pod counted as terminating",
        )
        assert condition_types(job) == [("FailureTarget", "True", "BackoffLimitExceeded")]
        await asyncio.sleep(2.0)
        job = get_job(kube, namespace, "dfail")
        assert condition_types(job) == [("FailureTarget", "True", "BackoffLimitExceeded")]
        assert job["status"].get("terminating") == 1
        release(kube, path)
    finally:
        release(kube, path)
    job = await finished(kube, namespace, "dfail", "Failed")
    assert condition_types(job) == [
        ("FailureTarget", "True", "BackoffLimitExceeded"),
        ("Failed", "True", "BackoffLimitExceeded"),
    ]
    assert counts(job) == (0, 0, 2)
    assert job["status"].get("terminating", 0) == 0
    assert "completionTime" not in job["status"]
    await eventually(lambda: no_tracking_finalizers(kube, namespace, "dfail"), "finalizers gone")


async def test_delayed_complete_condition(
    kube: KubeClient, namespace: str, job_controller: Running
) -> None:
    body = job_body(
        "dok",
        completions=3,
        parallelism=3,
        completionMode="Indexed",
        successPolicy={"rules": [{"succeededIndexes": "0", "succeededCount": 1}]},
        pod_spec=UNSCHEDULABLE,
    )
    create_job(kube, namespace, body)
    pods_ = await pending_count(kube, namespace, "dok", 3)
    assert [index_of(p) for p in pods_] == [0, 1, 2]
    path = hold(kube, pods_[2])
    try:
        fail_pod(kube, pods_[0], exit_code=0)

        def criteria_met() -> dict[str, Any] | None:
            job = get_job(kube, namespace, "dok")
            st = job.get("status") or {}
            return job if condition(job, "SuccessCriteriaMet") and st.get("terminating") else None

        job = await eventually(criteria_met, "SuccessCriteriaMet with the held pod terminating")
        assert condition_types(job) == [("SuccessCriteriaMet", "True", "SuccessPolicy")]
        assert job["status"]["terminating"] == 1
        await asyncio.sleep(2.0)
        job = get_job(kube, namespace, "dok")
        assert condition_types(job) == [("SuccessCriteriaMet", "True", "SuccessPolicy")]
        assert "completionTime" not in job["status"]
        release(kube, path)
    finally:
        release(kube, path)
    job = await finished(kube, namespace, "dok", "Complete")
    assert condition_types(job) == [
        ("SuccessCriteriaMet", "True", "SuccessPolicy"),
        ("Complete", "True", "SuccessPolicy"),
    ]
    st = job["status"]
    assert (st["succeeded"], st.get("failed", 0), st["completedIndexes"]) == (1, 0, "0")
    assert st.get("active", 0) == 0 and st.get("terminating", 0) == 0
    assert st["completionTime"] >= st["startTime"]
    await eventually(lambda: len(job_pods(kube, namespace, "dok")) == 1, "the rest removed")
