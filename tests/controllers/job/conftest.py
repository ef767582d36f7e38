"""Fixtures of the Job controller's tests: an in-process informer and the controller
running against the session's control plane, watching the test's namespace only.

The informer and the controller run as their own identities (the cluster's
``informer`` and ``controller-job`` kubeconfigs, with only the RBAC of ``deploy/rbac/``),
as they do in a deployment; the tests' own setup and checks use the admin kubeconfig."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from steward import KubeClient, NotFoundError
from steward.cluster import LocalCluster
from steward.controllers.job.controller import CONTROLLER
from tests.controllers.harness import (
    Running,
    Starter,
    controllers,
    eventually,
    in_loop_informer,
    kube,
    now,
)

__all__ = ["Running", "Starter", "eventually", "kube"]

MANAGED_BY = "steward.io/job-controller"


POD_FAILURE_BACKOFF = 1.0
"""Seconds Steward's Job controller waits before re-creating a failed pod in these tests
(``--pod-failure-backoff``; upstream's fixed 10 s, which its own integration tests shorten
too). A module that compares with upstream's controller sets ``POD_FAILURE_BACKOFF`` of
its own to upstream's 10 s."""


@pytest_asyncio.fixture
async def job_controllers(
    cluster: LocalCluster, namespace: str, request: pytest.FixtureRequest
) -> AsyncIterator[Starter]:
    """An informer, and Steward's Job controller started (as often as needed) for the
    test's namespace, managing only Jobs that name it in spec.managedBy (upstream's job
    controller runs in the same cluster); every instance is stopped at the end."""
    backoff = getattr(request.module, "POD_FAILURE_BACKOFF", POD_FAILURE_BACKOFF)
    async with (
        in_loop_informer(cluster) as informer,
        controllers(
            CONTROLLER,
            cluster.component_kubeconfig("controller-job"),
            informer,
            namespace,
            flags=["--no-take-unmanaged", f"--pod-failure-backoff={backoff}"],
        ) as starter,
    ):
        yield starter


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
    finished = now()
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
                            "startedAt": finished,
                            "finishedAt": finished,
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
