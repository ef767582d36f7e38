"""One short piece of real work for the CronJob controller, as
:mod:`tests.deploy.node_exercises` has for the node controllers (a
:class:`tests.deploy.exercises.Run`: None when the work was done, else what did not
happen).

It runs in ``apps_cluster`` (tests/deploy/conftest.py), where upstream's cronjob
controller is off. The Jobs are suspended (no pods), so upstream's Job controller there
starts nothing.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from steward.cluster import LocalCluster
from tests.deploy.exercises import GiveUp, _never, _poll

JOB_SPEC = {
    "suspend": True,
    "template": {
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox:1.36", "command": ["true"]}],
        }
    },
}
"""A Job that never runs a pod."""


def _job(name: str, owner: dict[str, Any]) -> dict[str, Any]:
    ref = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "ownerReferences": [ref]},
        "spec": JOB_SPEC,
    }


def run_cronjob(
    cluster: LocalCluster, namespace: str, *, deadline: float = 30.0, give_up: GiveUp = _never
) -> str | None:
    """A ``Replace`` CronJob due now (its ``lastScheduleTime`` five minutes back) whose
    active list names a running Job it controls and one that does not exist, with a
    second unfinished Job of its own it does not list: one sync reads the CronJob afresh
    and reports the stray (``UnexpectedJob``), reads the missing Job and forgets it
    (``MissingJob``), reads and deletes the running one (``SuccessfulDelete``), creates
    the Job of the current minute (``SuccessfulCreate``) and writes the status.

    That uses every permission of the controller's role: CronJobs and Jobs come through
    the informer (their list and watch), the CronJob is read (cronjobs get), the Jobs are
    read, deleted and created (jobs get, delete, create; cronjobs/finalizers where owner
    references are enforced), the status is written (cronjobs/status update), the Events
    recorded (events create)."""
    batch = f"/apis/batch/v1/namespaces/{namespace}"
    body = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "every-minute"},
        "spec": {
            "schedule": "* * * * *",
            "suspend": True,
            "concurrencyPolicy": "Replace",
            "jobTemplate": {"spec": JOB_SPEC},
        },
    }
    cronjob = cluster.api("POST", f"{batch}/cronjobs", body, ok=(201,))
    running = cluster.api("POST", f"{batch}/jobs", _job("running", cronjob), ok=(201,))
    cluster.api("POST", f"{batch}/jobs", _job("stray", cronjob), ok=(201,))
    past = (datetime.now(UTC) - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    active = [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "namespace": namespace,
            "name": "running",
            "uid": running["metadata"]["uid"],
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "namespace": namespace,
            "name": "gone",
            "uid": "00000000-0000-0000-0000-000000000000",
        },
    ]
    path = f"{batch}/cronjobs/every-minute"
    # Merge patches, not read-modify-write: the controller syncs the suspended CronJob
    # meanwhile (it forgets the missing Job) and would make a PUT conflict.
    cluster.api("PATCH", f"{path}/status", {"status": {"lastScheduleTime": past, "active": active}})
    cluster.api("PATCH", path, {"spec": {"suspend": False}})
    end = time.monotonic() + deadline
    missing = _poll(partial(_synced_missing, cluster, namespace), end, give_up)
    return f"cronjob {namespace}/every-minute: {missing}" if missing else None


def _synced_missing(cluster: LocalCluster, namespace: str) -> str:
    batch = f"/apis/batch/v1/namespaces/{namespace}"
    cronjob = cluster.api("GET", f"{batch}/cronjobs/every-minute")
    status = cronjob.get("status") or {}
    names = [ref.get("name") for ref in status.get("active") or ()]
    if len(names) != 1 or not str(names[0]).startswith("every-minute-"):
        return f"status.active {names}"
    if cluster.api("GET", f"{batch}/jobs/running", ok=(200, 404)).get("metadata"):
        return "the replaced Job is still there"
    events = cluster.api("GET", f"/api/v1/namespaces/{namespace}/events")
    reasons = {e.get("reason") for e in events.get("items") or ()}
    wanted = {"UnexpectedJob", "MissingJob", "SuccessfulDelete", "SuccessfulCreate"}
    return "" if wanted <= reasons else f"Events {sorted(reasons & wanted)} of {sorted(wanted)}"
