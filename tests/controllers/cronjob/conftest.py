"""Fixtures of the CronJob controller's tests: a control plane of the package's own for
Steward's side, the session's for upstream's.

- ``steward_plane``: kube-controller-manager without its cronjob controller (no nodes);
  Steward's runs in this process (an informer and the controller on a loop of their own,
  as the identities ``informer`` and ``steward:controller:cronjob`` with only the RBAC of
  ``deploy/rbac/``), five workers, watching the test's namespace.
- ``upstream_plane``: the session's ``cluster``, where kube-controller-manager runs its
  cronjob controller.

Nothing waits for the clock: a scenario creates its CronJob suspended, writes its status
as the test's admin (``lastScheduleTime`` in the past, so that a time is due now; Jobs
in ``active``), then resumes it. The Jobs' template names another manager in
``spec.managedBy``, so that no Job controller runs them: a test finishes a Job by writing
its status (:meth:`Side.finish`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from steward.cluster import LocalCluster
from steward.controllers.cronjob.controller import CONTROLLER, WORKERS
from steward.kube import NotFoundError
from tests.conftest import local_cluster
from tests.controllers import harness
from tests.controllers.harness import ControllerHost, hosted, steward, update, upstream

__all__ = ["steward", "upstream"]

IDENTITY = "controller-cronjob"
NOBODY = "steward.test/nobody"
"""The ``spec.managedBy`` of every Job here: no Job controller touches them."""
JOB_SPEC: dict[str, Any] = {
    "managedBy": NOBODY,
    "template": {
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox:1.36", "command": ["true"]}],
        }
    },
}


@pytest.fixture(scope="package")
def steward_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from local_cluster(tmp_path_factory, "cronjob", nodes=0, controllers="*,-cronjob")


@pytest.fixture(scope="package")
def steward_host(steward_plane: LocalCluster) -> Iterator[ControllerHost]:
    yield from hosted(steward_plane, CONTROLLER, IDENTITY, workers=WORKERS)


@pytest.fixture
def upstream_plane(cluster: LocalCluster) -> LocalCluster:
    return cluster


@pytest.fixture(scope="package")
def side_kind() -> type[Side]:
    """The sides of this package's scenarios (the harness's ``steward`` and ``upstream``)."""
    return Side


@dataclass
class Side(harness.Side):
    """One side of a scenario (see :class:`tests.controllers.harness.Side`) with the
    CronJob and Job reads and writes of these tests."""

    @property
    def batch(self) -> str:
        return f"/apis/batch/v1/namespaces/{self.ns}"

    def cronjob_path(self, name: str) -> str:
        return f"{self.batch}/cronjobs/{name}"

    def create_cronjob(self, name: str, **spec: Any) -> dict[str, Any]:
        """A suspended CronJob ``name`` (``spec`` over a minutely schedule and the Job
        template of :data:`JOB_SPEC` with the labels and annotations ``tmpl``)."""
        body = {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": name},
            "spec": {
                "schedule": "* * * * *",
                "jobTemplate": {
                    "metadata": {"labels": {"made-by": "cronjob"}, "annotations": {"note": "x"}},
                    "spec": JOB_SPEC,
                },
                **spec,
                "suspend": True,
            },
        }
        created: dict[str, Any] = self.kube.request("POST", f"{self.batch}/cronjobs", body)
        return created

    def create_job(self, name: str, owner: dict[str, Any], *, owned: bool = True) -> dict[str, Any]:
        """A Job ``name`` the CronJob ``owner`` controls (as if it had made it); with
        ``owned`` False created without the reference, which the returned body holds."""
        body: dict[str, Any] = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "CronJob",
                        "name": owner["metadata"]["name"],
                        "uid": owner["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": JOB_SPEC,
        }
        refs = body["metadata"]["ownerReferences"]
        if not owned:
            del body["metadata"]["ownerReferences"]
        created: dict[str, Any] = self.kube.request("POST", f"{self.batch}/jobs", body)
        created["metadata"]["ownerReferences"] = refs
        return created

    def finish(self, job: dict[str, Any], condition: str, start: str, end: str) -> None:
        """Write the Job's status as a Job controller would at its end: ``Complete``
        (after ``SuccessCriteriaMet``) or ``Failed`` (after ``FailureTarget``)."""
        path = f"{self.batch}/jobs/{job['metadata']['name']}"
        before = "SuccessCriteriaMet" if condition == "Complete" else "FailureTarget"

        def change(obj: dict[str, Any]) -> None:
            conds = [
                {"type": t, "status": "True", "lastTransitionTime": end, "lastProbeTime": end}
                for t in (before, condition)
            ]
            status: dict[str, Any] = {"startTime": start, "conditions": conds}
            if condition == "Complete":
                status.update(completionTime=end, succeeded=1)
            else:
                status["failed"] = 1
            obj["status"] = status

        update(self.kube, path, change, f"{path}: status", subresource="/status")

    def set_status(self, name: str, status: dict[str, Any]) -> None:
        path = self.cronjob_path(name)

        def change(obj: dict[str, Any]) -> None:
            obj["status"] = status

        update(self.kube, path, change, f"{path}: status", subresource="/status")

    def resume(self, name: str) -> None:
        path = self.cronjob_path(name)

        def change(obj: dict[str, Any]) -> None:
            obj["spec"]["suspend"] = False

        update(self.kube, path, change, f"{path}: resume")

    def touch(self, name: str) -> None:
        """Change the CronJob's labels (a sync, whatever its spec)."""
        path = self.cronjob_path(name)

        def change(obj: dict[str, Any]) -> None:
            labels = obj["metadata"].setdefault("labels", {})
            labels["touched"] = str(int(labels.get("touched", "0")) + 1)

        update(self.kube, path, change, f"{path}: touch")

    def cronjob(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.kube.request("GET", self.cronjob_path(name))
        return found

    def jobs(self) -> list[dict[str, Any]]:
        found = self.kube.request("GET", f"{self.batch}/jobs")
        return sorted(found.get("items") or [], key=lambda j: j["metadata"]["name"])

    def live_jobs(self) -> list[str]:
        """Names of the Jobs not being deleted."""
        return [
            j["metadata"]["name"] for j in self.jobs() if not j["metadata"].get("deletionTimestamp")
        ]

    def events(self) -> list[tuple[str, str, str]]:
        """(type, reason, message) of the Events on CronJobs, sorted."""
        found = self.kube.request("GET", f"/api/v1/namespaces/{self.ns}/events")
        return sorted(
            (e.get("type", ""), e.get("reason", ""), e.get("message", ""))
            for e in found.get("items") or []
            if (e.get("involvedObject") or {}).get("kind") == "CronJob"
        )

    def gone(self, name: str) -> bool:
        with contextlib.suppress(NotFoundError):
            job = self.kube.request("GET", f"{self.batch}/jobs/{name}")
            return bool(job["metadata"].get("deletionTimestamp"))
        return True
