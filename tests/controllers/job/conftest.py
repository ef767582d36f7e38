"""Fixtures of the Job controller's tests: an in-process informer and the controller
running against the session's control plane, watching the test's namespace only.

The informer and the controller run as their own identities (the cluster's
``informer`` and ``controller-job`` kubeconfigs, with only the RBAC of ``deploy/rbac/``),
as they do in a deployment; the tests' own setup and checks use the admin kubeconfig."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import grpc
import pytest
import pytest_asyncio

from steward import Controller, ControllerOptions, KubeClient, NotFoundError
from steward.cluster import LocalCluster
from steward.controllers.job.main import CONTROLLER
from steward.informer import InformerOptions, InformerServer
from steward.kube import load_access
from steward.serving.security import DEVELOPMENT

MANAGED_BY = "steward.io/job-controller"


@pytest.fixture
def kube(cluster: LocalCluster) -> Iterator[KubeClient]:
    """A raw JSON client with the admin kubeconfig (the test's own reads and writes)."""
    api = KubeClient(load_access(str(cluster.kubeconfig)), user_agent="job-controller-test")
    try:
        yield api
    finally:
        api.close()


@pytest_asyncio.fixture
async def informer(cluster: LocalCluster) -> AsyncIterator[str]:
    server = InformerServer(
        InformerOptions(
            security=DEVELOPMENT,
            listen="127.0.0.1:0",
            kubeconfig=str(cluster.component_kubeconfig("informer")),
        )
    )
    await server.start()
    try:
        yield f"127.0.0.1:{server.port}"
    finally:
        await server.stop()


class Running:
    """A controller running in this event loop until :meth:`stop`."""

    def __init__(self, controller: Controller[Any]) -> None:
        self.controller = controller
        self.task = asyncio.create_task(controller.run())

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


class Starter:
    """Starts instances of Steward's Job controller for one namespace (for restarts)."""

    def __init__(self, channel: grpc.aio.Channel, api: KubeClient, namespace: str) -> None:
        self.channel = channel
        self.api = api
        self.namespace = namespace
        self.running: list[Running] = []

    def start(self) -> Running:
        controller = CONTROLLER.new(
            self.channel,
            self.api,
            ControllerOptions(max_concurrent_reconciles=2, namespace=self.namespace),
            flags=["--no-take-unmanaged"],
        )
        running = Running(controller)
        self.running.append(running)
        return running


@pytest_asyncio.fixture
async def job_controllers(
    cluster: LocalCluster, informer: str, namespace: str
) -> AsyncIterator[Starter]:
    """Start Steward's Job controller (as often as needed) for the test's namespace,
    managing only Jobs that name it in spec.managedBy (upstream's job controller runs in
    the same cluster); every instance is stopped at the end."""
    api = KubeClient(
        load_access(str(cluster.component_kubeconfig("controller-job"))),
        user_agent="steward-job",
        workers=8,
    )
    async with grpc.aio.insecure_channel(informer) as channel:
        starter = Starter(channel, api, namespace)
        try:
            yield starter
        finally:
            for running in starter.running:
                await running.stop()
    api.close()


@pytest_asyncio.fixture
async def job_controller(job_controllers: Starter) -> Running:
    """One instance of Steward's Job controller (see ``job_controllers``)."""
    return job_controllers.start()


def job_body(name: str, *, managed: bool = True, **spec: Any) -> dict[str, Any]:
    """A Job whose one container kwok runs; ``managed`` names Steward in spec.managedBy."""
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "busybox"}],
    }
    pod_spec.update(spec.pop("pod_spec", {}))
    body: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": {"spec": pod_spec}, **spec},
    }
    if managed:
        body["spec"]["managedBy"] = MANAGED_BY
    return body


async def eventually(
    check: Callable[[], Any], what: str, within: float = 120.0, interval: float = 0.25
) -> Any:
    """Poll ``check`` (in a thread) until it returns something truthy; return that."""
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        last = await asyncio.to_thread(check)
        if last:
            return last
        await asyncio.sleep(interval)
    pytest.fail(f"timed out waiting for {what} (last: {last!r})")


def get_job(kube: KubeClient, ns: str, name: str) -> dict[str, Any]:
    return kube.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/{name}")


def job_pods(kube: KubeClient, ns: str, name: str) -> list[dict[str, Any]]:
    found = kube.request(
        "GET", f"/api/v1/namespaces/{ns}/pods?labelSelector=batch.kubernetes.io/job-name={name}"
    )
    return list(found.get("items") or [])


def condition(job: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    for cond in (job.get("status") or {}).get("conditions") or ():
        if cond.get("type") == ctype and cond.get("status") == "True":
            return dict(cond)
    return None


def fail_pod(kube: KubeClient, pod: dict[str, Any], exit_code: int = 1) -> None:
    """Make a pod end the way a kubelet would report its containers exiting with
    ``exit_code``: phase Failed, or Succeeded for 0."""
    meta = pod["metadata"]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {
        "status": {
            "phase": "Succeeded" if exit_code == 0 else "Failed",
            "containerStatuses": [
                {
                    "name": c["name"],
                    "image": c["image"],
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {
                            "exitCode": exit_code,
                            "reason": "Completed" if exit_code == 0 else "Error",
                            "startedAt": now,
                            "finishedAt": now,
                        }
                    },
                }
                for c in pod["spec"]["containers"]
            ],
        }
    }
    with contextlib.suppress(NotFoundError):
        kube.request(
            "PATCH",
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
            status,
            content_type="application/merge-patch+json",
        )
