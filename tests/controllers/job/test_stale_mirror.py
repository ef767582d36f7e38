"""Steward's Job controller given a mirror that is behind the API server: a Job status
read before its pods lost the tracking finalizer must not make it create pods beyond
the completions (the pods no longer count, the status does not count them yet).

Two guards cover it: when the newer status is this controller's own write, the runtime's
read-your-writes guard ends the reconcile before it acts (and looks again shortly); when
another writer made it (a previous instance, just before it stopped), the Job
controller's own check of the API server's version does. The mirror is fed by hand, so
the stale view is exact; everything else is the real API server."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import orjson
import pytest
import pytest_asyncio

from steward import JOBS, PODS, Controller, KubeClient, Mirror, Request, Resource, Result
from steward.cluster import LocalCluster
from steward.controllers.job.controller import CONTROLLER, JobReconciler
from steward.informer import wire
from steward.informer.store import EventKind, StoredObject
from steward.kube import load_access
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
async def controller(controller_api: KubeClient) -> AsyncIterator[Controller[JobReconciler]]:
    """The Job controller, bound but not run: its mirror of Jobs and pods is fed by no
    stream (the test applies events itself), its API client is the real one."""
    channel = grpc.aio.insecure_channel("127.0.0.1:9")  # never dialled
    yield CONTROLLER.new(channel, controller_api, flags=["--no-take-unmanaged"])
    await channel.close()


async def reconcile(controller: Controller[JobReconciler], namespace: str, name: str) -> Result:
    """One reconcile of the Job as the runtime's workers run it (with the lease check and
    the mirror's read-your-writes guard)."""
    return await controller.reconcile_once(Request(namespace, name))


def show(mirror: Mirror, rtype: Resource, *objects: dict[str, Any]) -> None:
    """Let the mirror show these versions of the objects."""
    events = []
    for obj in objects:
        stored = StoredObject(orjson.dumps(obj), obj)
        kind = (
            EventKind.MODIFIED
            if mirror.get(rtype, stored.namespace, stored.name)
            else EventKind.ADDED
        )
        events.append(wire.event(kind, rtype.wire, stored, stored.resource_version))
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


def counted(job: dict[str, Any]) -> dict[str, Any]:
    """The Job with a status counting its ``completions`` pods as succeeded."""
    return {
        **job,
        "status": {
            "startTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "succeeded": job["spec"]["completions"],
            "uncountedTerminatedPods": {},
        },
    }


def create_job(kube: KubeClient, ns: str, name: str, completions: int) -> dict[str, Any]:
    body = job_body(
        name, completions=completions, parallelism=completions, pod_spec=dict(UNSCHEDULABLE)
    )
    return kube.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", body)


async def test_no_pods_from_a_status_older_than_the_controllers_own_write(
    kube: KubeClient,
    controller_api: KubeClient,
    controller: Controller[JobReconciler],
    namespace: str,
) -> None:
    stale = create_job(kube, namespace, "own", 2)
    done = finished_pods(kube, stale, 2)
    assert all(p["status"]["phase"] == "Succeeded" for p in done)
    mirror = controller.mirror
    show(mirror, JOBS, stale)
    show(mirror, PODS, *done)
    # The controller's own client writes the status counting both pods; the mirror still
    # shows the version before.
    await controller_api.arequest(
        "PUT", f"/apis/batch/v1/namespaces/{namespace}/jobs/own/status", counted(stale)
    )

    result = await reconcile(controller, namespace, "own")

    assert len(job_pods(kube, namespace, "own")) == 2  # no pod beyond the completions
    assert result == Result()  # the key comes back once the mirror shows the write
    assert get_job(kube, namespace, "own")["status"]["succeeded"] == 2

    # Once the mirror shows the current Job, the sync goes on: nothing more to run.
    show(mirror, JOBS, get_job(kube, namespace, "own"))
    assert await reconcile(controller, namespace, "own") == Result()
    assert len(job_pods(kube, namespace, "own")) == 2
    status = get_job(kube, namespace, "own")["status"]
    assert status["succeeded"] == 2
    assert status.get("active", 0) == 0


async def test_no_pods_from_a_status_older_than_the_pods(
    kube: KubeClient, controller: Controller[JobReconciler], namespace: str
) -> None:
    stale = create_job(kube, namespace, "stale", 2)
    done = finished_pods(kube, stale, 2)
    assert all(p["status"]["phase"] == "Succeeded" for p in done)
    # The API server's Job counts both pods (another writer's status: a previous
    # instance's); the mirror still shows the version before.
    kube.request("PUT", f"/apis/batch/v1/namespaces/{namespace}/jobs/stale/status", counted(stale))
    mirror = controller.mirror
    show(mirror, JOBS, stale)
    show(mirror, PODS, *done)

    result = await reconcile(controller, namespace, "stale")

    assert len(job_pods(kube, namespace, "stale")) == 2  # no pod beyond the completions
    assert result == Result()  # the newer Job's own event brings it back
    assert get_job(kube, namespace, "stale")["status"]["succeeded"] == 2

    # Once the mirror shows the current Job, the sync goes on: nothing more to run.
    show(mirror, JOBS, get_job(kube, namespace, "stale"))
    await reconcile(controller, namespace, "stale")
    assert len(job_pods(kube, namespace, "stale")) == 2
    status = get_job(kube, namespace, "stale")["status"]
    assert status["succeeded"] == 2
    assert status.get("active", 0) == 0


async def test_finished_pods_without_finalizer_on_a_current_job_do_not_wedge_it(
    kube: KubeClient, controller: Controller[JobReconciler], namespace: str
) -> None:
    # A pod that finished without ever carrying the finalizer is not counted (as
    # upstream); with the mirror current, the Job still gets its own pod.
    job = create_job(kube, namespace, "current", 1)
    done = finished_pods(kube, job, 1)
    show(controller.mirror, JOBS, get_job(kube, namespace, "current"))
    show(controller.mirror, PODS, *done)

    await reconcile(controller, namespace, "current")

    pods = job_pods(kube, namespace, "current")
    assert len(pods) == 2
    assert sum(1 for p in pods if p["status"].get("phase") != "Succeeded") == 1
