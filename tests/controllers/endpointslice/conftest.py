"""Fixtures of the EndpointSlice controller's tests.

Steward's slices carry their own managed-by value, so Steward's controller runs in the
session's ``cluster`` beside upstream's endpointslice-controller, each writing its own
slices for every Service: each scenario compares the two sets field by field. Each test
gets a fresh namespace (``namespace``), an in-process informer, and starts Steward's
controller (``es_controllers``) as the identity ``steward:controller:endpointslice`` with
only the RBAC of ``deploy/rbac/controller-endpointslice.yaml``. Setup and checks use
admin.

# Watching the whole cluster
The controller looks pods' nodes up in its mirror, and a mirror limited to one namespace
holds no cluster-scoped objects; so it watches every namespace here, writing its slices
for the Services of other namespaces too while a test runs. At the end of the package
every slice it wrote is deleted again.

# Pods and their node
Pods are bound to :data:`NODE`, a Node the package creates (zone :data:`ZONE`, Ready,
unschedulable and tainted so that nothing else lands there) and that no kubelet or kwok
runs: the test writes the pods' status (phase, IPs, Ready) itself, as upstream's
integration tests do, so both controllers see exactly the same pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio

from steward.cluster import LocalCluster
from steward.controllers.endpointslice.controller import CONTROLLER
from steward.controllers.endpointslice.sync import MANAGED_BY, MANAGED_BY_LABEL
from steward.kube import ConflictError, KubeClient, NotFoundError, load_access
from steward.runtime.controller import Controller, ControllerOptions
from tests.controllers.endpoints.conftest import (
    Running,
    upstream_kube,
    upstream_namespace,
)

__all__ = ["upstream_kube", "upstream_namespace"]

IDENTITY = "controller-endpointslice"
NODE = "steward-endpointslice-node"
ZONE = "zone-steward"
TAINT = {"key": "steward.io/endpointslice-tests", "effect": "NoSchedule"}


@pytest.fixture(scope="package")
def es_identity(cluster: LocalCluster) -> Path:
    """The controller's own kubeconfig (``steward:controller:endpointslice``, bound to the
    ClusterRole of deploy/rbac/controller-endpointslice.yaml by the control plane)."""
    return cluster.component_kubeconfig(IDENTITY)


def _delete_our_slices(admin: KubeClient) -> None:
    listing = admin.request(
        "GET",
        f"/apis/discovery.k8s.io/v1/endpointslices?labelSelector={MANAGED_BY_LABEL}={MANAGED_BY}",
    )
    for item in listing.get("items") or ():
        meta = item["metadata"]
        with contextlib.suppress(NotFoundError):
            admin.request(
                "DELETE",
                f"/apis/discovery.k8s.io/v1/namespaces/{meta['namespace']}/endpointslices/{meta['name']}",
            )


LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


def _heartbeat(admin: KubeClient, stop: threading.Event) -> None:
    """Renew :data:`NODE`'s Lease every 5 s until ``stop``."""
    while True:
        renewed = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        spec = {"holderIdentity": NODE, "leaseDurationSeconds": 40, "renewTime": renewed}
        try:
            try:
                admin.request("POST", LEASES, {"metadata": {"name": NODE}, "spec": spec})
            except ConflictError:
                admin.request(
                    "PATCH",
                    f"{LEASES}/{NODE}",
                    {"spec": spec},
                    content_type="application/merge-patch+json",
                )
        except Exception as err:  # a missed renewal is retried at the next beat
            print(f"renewing {NODE}'s lease failed: {err}")
        if stop.wait(5.0):
            return


@pytest.fixture(scope="package")
def es_node(cluster: LocalCluster) -> Iterator[str]:
    """:data:`NODE` (zone :data:`ZONE`, Ready, unschedulable) for the package's pods;
    deleted afterwards, with every slice Steward's controller wrote."""
    admin = KubeClient(load_access(str(cluster.kubeconfig)), user_agent="endpointslice-test-setup")
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE,
            "labels": {"topology.kubernetes.io/zone": ZONE, "kubernetes.io/hostname": NODE},
        },
        "spec": {"unschedulable": True, "taints": [TAINT]},
    }
    with contextlib.suppress(ConflictError):
        admin.request("POST", "/api/v1/nodes", body)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {
        "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "500"},
        "capacity": {"cpu": "4", "memory": "8Gi", "pods": "500"},
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "simulated by the EndpointSlice tests",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        ],
    }
    # A patch: the node lifecycle controller writes the node too.
    admin.request(
        "PATCH",
        f"/api/v1/nodes/{NODE}/status",
        {"status": status},
        content_type="application/strategic-merge-patch+json",
    )
    # Renew the node's Lease as a kubelet does, so that the node lifecycle controller
    # neither marks the node (and its pods) not ready nor taints it while the package runs.
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(admin, stop), daemon=True)
    beat.start()
    try:
        yield NODE
    finally:
        stop.set()
        beat.join()
        with contextlib.suppress(NotFoundError):
            admin.request("DELETE", f"/api/v1/nodes/{NODE}")
        with contextlib.suppress(NotFoundError):
            admin.request("DELETE", f"{LEASES}/{NODE}")
        _delete_our_slices(admin)
        admin.close()


@pytest.fixture
def kube(upstream_kube: KubeClient) -> KubeClient:
    """Admin client of the session cluster."""
    return upstream_kube


@pytest.fixture
def namespace(upstream_namespace: str, es_node: str) -> str:
    """A fresh namespace of the session cluster for one test, deleted afterwards."""
    return upstream_namespace


class Starter:
    """Starts Steward's EndpointSlice controller (when a test says so)."""

    def __init__(self, channel: grpc.aio.Channel, api: KubeClient) -> None:
        self.channel = channel
        self.api = api
        self.running: list[Running] = []
        self.mirrors: list[asyncio.Task[None]] = []

    def new(self, *flags: str, workers: int = 5) -> Controller[Any]:
        """The controller, bound but not running."""
        return CONTROLLER.new(
            self.channel,
            self.api,
            ControllerOptions(max_concurrent_reconciles=workers),
            list(flags),
        )

    def start(self, *flags: str, workers: int = 5) -> Running:
        running = Running(self.new(*flags, workers=workers))
        self.running.append(running)
        return running

    def run_mirror(self, controller: Controller[Any]) -> asyncio.Task[None]:
        """Run only the controller's mirror (no workers): the test reconciles by hand."""
        task = asyncio.create_task(controller.mirror.run())
        self.mirrors.append(task)
        return task


@pytest_asyncio.fixture
async def es_controllers(
    es_identity: Path, dev_informer: str, namespace: str
) -> AsyncIterator[Starter]:
    """Start Steward's EndpointSlice controller; every instance is stopped at the end."""
    api = KubeClient(load_access(str(es_identity)), user_agent="steward-endpointslice", workers=8)
    async with grpc.aio.insecure_channel(dev_informer) as channel:
        starter = Starter(channel, api)
        try:
            yield starter
        finally:
            for running in starter.running:
                await running.stop()
            for task in starter.mirrors:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    api.close()
