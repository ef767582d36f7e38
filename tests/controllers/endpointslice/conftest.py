"""Fixtures of the EndpointSlice controller's tests.

Given a managed-by value of its own (``endpointslice-controller.steward.io``: the
definition's flags for running beside upstream's), Steward's controller runs in the
session's ``cluster`` beside upstream's endpointslice-controller, each writing its own
slices for every Service: each scenario compares the two sets field by field. Each test
gets a fresh namespace (``namespace``), an in-process informer, and starts Steward's
controller (``es_controllers``) as the identity ``steward:controller:endpointslice`` with
only the RBAC of ``deploy/rbac/controller-endpointslice.yaml``. Setup and checks use
admin.

With its default flags (upstream's managed-by value) it runs where upstream's is off:
``alone_cluster`` (one per test package, no nodes) has kube-controller-manager without
its ``endpointslice`` controller, and ``alone_controllers`` starts Steward's there.

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

import contextlib
import threading
import time
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from steward.cluster import LocalCluster
from steward.controllers.endpointslice.controller import CONTROLLER
from steward.controllers.endpointslice.sync import MANAGED_BY_LABEL, STEWARD_MANAGED_BY
from steward.kube import ConflictError, KubeClient, NotFoundError, load_access
from tests.conftest import local_cluster
from tests.controllers.harness import (
    Starter,
    admin_kube,
    controllers,
    in_loop_informer,
    kube,
    now,
    scoped_namespace,
    upstream_kube,
    upstream_namespace,
)

__all__ = ["Starter", "kube", "upstream_kube", "upstream_namespace"]

IDENTITY = "controller-endpointslice"
BESIDE = CONTROLLER.beside_upstream or ()
"""The flags Steward's controller runs with beside upstream's (its own managed-by)."""
NODE = "steward-endpointslice-node"
ZONE = "zone-steward"
TAINT = {"key": "steward.io/endpointslice-tests", "effect": "NoSchedule"}


def _delete_our_slices(admin: KubeClient) -> None:
    listing = admin.request(
        "GET",
        f"/apis/discovery.k8s.io/v1/endpointslices?labelSelector={MANAGED_BY_LABEL}={STEWARD_MANAGED_BY}",
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
    ready = now()
    status = {
        "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "500"},
        "capacity": {"cpu": "4", "memory": "8Gi", "pods": "500"},
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "simulated by the EndpointSlice tests",
                "lastHeartbeatTime": ready,
                "lastTransitionTime": ready,
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
def namespace(upstream_namespace: str, es_node: str) -> str:
    """A fresh namespace of the session cluster for one test, deleted afterwards."""
    return upstream_namespace


@pytest_asyncio.fixture
async def es_controllers(
    cluster: LocalCluster, dev_informer: str, namespace: str
) -> AsyncIterator[Starter]:
    """Start Steward's EndpointSlice controller, watching every namespace (five workers
    unless told otherwise), as its own identity (``steward:controller:endpointslice``,
    bound to the ClusterRole of deploy/rbac/controller-endpointslice.yaml by the control
    plane); every instance and mirror is stopped at the end."""
    identity = cluster.component_kubeconfig(IDENTITY)
    async with controllers(CONTROLLER, identity, dev_informer, workers=5, flags=BESIDE) as starter:
        yield starter


@pytest.fixture(scope="package")
def alone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local control plane without upstream's endpointslice-controller (no nodes)."""
    yield from local_cluster(tmp_path_factory, "es", nodes=0, controllers="*,-endpointslice")


@pytest.fixture
def alone_kube(alone_cluster: LocalCluster) -> Iterator[KubeClient]:
    """Admin client of ``alone_cluster``."""
    yield from admin_kube(alone_cluster)


@pytest.fixture
def alone_namespace(alone_kube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace of ``alone_cluster`` for one test, deleted afterwards."""
    yield from scoped_namespace(alone_kube, request)


@pytest_asyncio.fixture
async def alone_controllers(
    alone_cluster: LocalCluster, alone_namespace: str
) -> AsyncIterator[Starter]:
    """An informer, and Steward's EndpointSlice controller with its default flags (as in
    upstream's place) for the test's namespace of ``alone_cluster``, as its own identity;
    every instance is stopped at the end."""
    identity = alone_cluster.component_kubeconfig(IDENTITY)
    async with (
        in_loop_informer(alone_cluster) as informer,
        controllers(CONTROLLER, identity, informer, alone_namespace) as starter,
    ):
        yield starter
