"""Steward's Job controller given a mirror that is behind the API server: a Job status
read before its pods lost the tracking finalizer must not make it create pods beyond
the completions (the pods no longer count, the status does not count them yet). The
mirror is fed by hand, so the stale view is exact; everything else is the real API
server."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import orjson
import pytest
import pytest_asyncio

from steward.cluster import LocalCluster
from steward.controllers.job.controller import (
    JOBS,
    PODS,
    JobControllerOptions,
    JobReconciler,
    _by_job,
    _orphans,
)
from steward.informer import wire
from steward.informer.store import EventKind, StoredObject
from steward.kube import KubeClient, load_access
from steward.runtime import Request, Result
from steward.runtime.mirror import Mirror
from steward.v1 import informer_pb2 as pb
from tests.controllers.job.conftest import fail_pod, get_job, job_body, job_pods

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

UNSCHEDULABLE = {"nodeSelector": {"steward.io/no-such-node": "true"}}
"""Pods that stay Pending (kwok never runs them), so the test decides how they end."""


@pytest.fixture
def controller_api(cluster: LocalCluster) -> Iterator[KubeClient]:
    """The Job controller's own identity."""
    api = KubeClient(
        load_access(str(cluster.component_kubeconfig("controller-job"))),
        user_agent="steward-job",
    )
    try:
        yield api
    finally:
        api.close()


@pytest_asyncio.fixture
async def mirror() -> AsyncIterator[Mirror]:
    """A mirror of Jobs and pods that no stream feeds: the test applies events itself."""
    channel = grpc.aio.insecure_channel("127.0.0.1:9")  # never dialled
    yield Mirror(channel, [JOBS, PODS], indexers={"job": _by_job, "orphan": _orphans})
    await channel.close()


def show(mirror: Mirror, rtype: pb.ResourceType, *objects: dict[str, Any]) -> None:
    """Let the mirror show these versions of the objects."""
    events = []
    for obj in objects:
        stored = StoredObject(orjson.dumps(obj), obj)
        kind = (
            EventKind.MODIFIED
            if mirror.get(rtype, stored.namespace, stored.name)
            else EventKind.ADDED
        )
        events.append(wire.event(kind, rtype, stored, stored.resource_version))
    mirror._apply(events)


def wait_for_service_account(kube: KubeClient, ns: str, within: float = 60.0) -> None:
    """Pods of a fresh namespace are admitted once its default ServiceAccount exists."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = kube.request("GET", f"/api/v1/namespaces/{ns}/serviceaccounts")
        if any(sa["metadata"]["name"] == "default" for sa in found.get("items") or ()):
            return
        time.sleep(0.2)
    pytest.fail(f"no default ServiceAccount in {ns} after {within:.0f}s")


def finished_pods(kube: KubeClient, job: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """``count`` pods of the Job, Succeeded and without the tracking finalizer (as the
    controller leaves them once the status counts them)."""
    meta = job["metadata"]
    template = job["spec"]["template"]
    wait_for_service_account(kube, meta["namespace"])
    for i in range(count):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{meta['name']}-done-{i}",
                "labels": dict(template["metadata"]["labels"]),
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": template["spec"],
        }
        created = kube.request("POST", f"/api/v1/namespaces/{meta['namespace']}/pods", pod)
        fail_pod(kube, created, exit_code=0)
    return job_pods(kube, meta["namespace"], meta["name"])


def create_job(kube: KubeClient, ns: str, name: str, completions: int) -> dict[str, Any]:
    body = job_body(
        name, completions=completions, parallelism=completions, pod_spec=dict(UNSCHEDULABLE)
    )
    return kube.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", body)


async def test_no_pods_from_a_status_older_than_the_pods(
    kube: KubeClient, controller_api: KubeClient, mirror: Mirror, namespace: str
) -> None:
    stale = create_job(kube, namespace, "stale", 2)
    done = finished_pods(kube, stale, 2)
    assert all(p["status"]["phase"] == "Succeeded" for p in done)
    # The API server's Job counts both pods; the mirror still shows the version before.
    counted = dict(stale)
    counted["status"] = {
        "startTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "succeeded": 2,
        "uncountedTerminatedPods": {},
    }
    kube.request("PUT", f"/apis/batch/v1/namespaces/{namespace}/jobs/stale/status", counted)
    show(mirror, JOBS, stale)
    show(mirror, PODS, *done)
    reconciler = JobReconciler(mirror, controller_api, JobControllerOptions(take_unmanaged=False))

    result = await reconciler.reconcile(Request(namespace, "stale"), [])

    assert len(job_pods(kube, namespace, "stale")) == 2  # no pod beyond the completions
    assert result == Result()  # the newer Job's own event brings it back
    assert get_job(kube, namespace, "stale")["status"]["succeeded"] == 2

    # Once the mirror shows the current Job, the sync goes on: nothing more to run.
    show(mirror, JOBS, get_job(kube, namespace, "stale"))
    await reconciler.reconcile(Request(namespace, "stale"), [])
    assert len(job_pods(kube, namespace, "stale")) == 2
    status = get_job(kube, namespace, "stale")["status"]
    assert status["succeeded"] == 2
    assert status.get("active", 0) == 0


async def test_finished_pods_without_finalizer_on_a_current_job_do_not_wedge_it(
    kube: KubeClient, controller_api: KubeClient, mirror: Mirror, namespace: str
) -> None:
    # A pod that finished without ever carrying the finalizer is not counted (as
    # upstream); with the mirror current, the Job still gets its own pod.
    job = create_job(kube, namespace, "current", 1)
    done = finished_pods(kube, job, 1)
    show(mirror, JOBS, get_job(kube, namespace, "current"))
    show(mirror, PODS, *done)
    reconciler = JobReconciler(mirror, controller_api, JobControllerOptions(take_unmanaged=False))

    await reconciler.reconcile(Request(namespace, "current"), [])

    pods = job_pods(kube, namespace, "current")
    assert len(pods) == 2
    assert sum(1 for p in pods if p["status"].get("phase") != "Succeeded") == 1
