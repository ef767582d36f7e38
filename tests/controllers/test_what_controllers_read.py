"""Each controller receives only what it reads: a Job's pods reach the Job controller and
none of the controllers that do not act on Jobs, counted at both ends.

All eight controllers run in this event loop against one informer of the test's own, as
their own identities, watching the test's namespace. A Job of three pods runs to
completion. The Job controller (the positive control) receives its pods' changes; the
ReplicaSet, ReplicationController, DaemonSet and Deployment controllers (owner filters),
and the Endpoints and EndpointSlice controllers (pods some Service selects) receive none
of them, while the informer counts the very changes it withheld from each. The HPA
controller reads pods through a projection (any pod may belong to a scale target), so it
is not among them.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import grpc
import pytest

from steward import PODS, KubeClient
from steward.cluster import LocalCluster
from steward.controllers.daemonset.controller import CONTROLLER as DAEMONSET
from steward.controllers.deployment.controller import CONTROLLER as DEPLOYMENT
from steward.controllers.endpoints.controller import CONTROLLER as ENDPOINTS
from steward.controllers.endpointslice.controller import CONTROLLER as ENDPOINTSLICE
from steward.controllers.job.controller import CONTROLLER as JOB
from steward.controllers.replicaset.controller import CONTROLLER as REPLICASET
from steward.controllers.replicaset.replication import CONTROLLER as REPLICATIONCONTROLLER
from steward.informer.store import ResourceTypeName
from steward.kube import load_access
from steward.runtime.controller import Controller, ControllerDefinition, ControllerOptions
from steward.runtime.mirror import Change
from tests.controllers.harness import eventually, in_loop_informer_server, kube
from tests.controllers.job.conftest import get_job, job_body

__all__ = ["kube"]

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

POD_TYPE = ResourceTypeName("", "v1", "pods")
IDLE = (REPLICASET, REPLICATIONCONTROLLER, DAEMONSET, DEPLOYMENT, ENDPOINTS, ENDPOINTSLICE)
"""Controllers that do not act on Jobs."""


async def test_a_jobs_pods_reach_the_job_controller_only(
    cluster: LocalCluster, kube: KubeClient, namespace: str
) -> None:
    definitions: list[ControllerDefinition[Any]] = [JOB, *IDLE]
    pod_changes: dict[str, list[Change]] = {d.name: [] for d in definitions}
    apis: list[KubeClient] = []
    tasks: list[asyncio.Task[None]] = []
    async with (
        in_loop_informer_server(cluster) as server,
        grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel,
    ):
        running: list[Controller[Any]] = []
        try:
            for definition in definitions:
                identity = cluster.component_kubeconfig(f"controller-{definition.name}")
                api = KubeClient(load_access(str(identity)), user_agent="steward-test")
                apis.append(api)
                flags = ["--no-take-unmanaged"] if definition is JOB else []
                controller = definition.new(
                    channel, api, ControllerOptions(namespace=namespace), flags
                )
                name = definition.name

                def count(change: Change, name: str = name) -> None:
                    if change.obj.type == PODS:
                        pod_changes[name].append(change)

                controller.mirror.add_handler(count)
                running.append(controller)
                tasks.append(asyncio.create_task(controller.run()))
            for controller in running:
                await asyncio.wait_for(controller.mirror.wait_synced(), 60)

            def withheld() -> dict[str, int]:
                counts = server.fanout.counts()
                return {d.name: counts.get((d.name, POD_TYPE), (0, 0))[1] for d in definitions}

            before = withheld()
            kube.request(
                "POST",
                f"/apis/batch/v1/namespaces/{namespace}/jobs",
                job_body("three", parallelism=3, completions=3),
            )

            def complete() -> bool:
                job = get_job(kube, namespace, "three")
                return (job.get("status") or {}).get("succeeded") == 3

            await eventually(complete, "the Job to complete")
            # The Job controller saw each of its pods (the positive control). How many
            # changes of each is not fixed: under load the informer coalesces a pod's
            # changes for a subscriber that lags, down to the latest state.
            await eventually(
                lambda: len({c.obj.name for c in pod_changes[JOB.name]}) == 3,
                "the Job controller to see its pods' changes",
            )
            after = withheld()
            for definition in IDLE:
                assert pod_changes[definition.name] == [], definition.name
                # Counted where they were held back: every pod's creation at least.
                assert after[definition.name] - before[definition.name] >= 3, definition.name
                assert not controller_mirror(running, definition.name).objects(PODS)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            for api in apis:
                api.close()


def controller_mirror(running: list[Controller[Any]], name: str) -> Any:
    return next(c.mirror for c in running if c.name == name)
