"""Fixtures of the Endpoints controller's tests.

Upstream's endpoints-controller cannot be told to leave some Endpoints alone, so Steward's
runs in a cluster of its own: ``ep_cluster`` (one per test package) has
kube-controller-manager without its ``endpoint`` controller (the --controllers alias of
endpoints-controller). Each test gets a fresh namespace there (``ep_namespace``), an
in-process informer, and starts Steward's controller (``ep_controllers``) watching that
namespace, as the identity ``steward:controller:endpoint`` with only the RBAC of
``deploy/rbac/controller-endpoint.yaml``. The session's ``cluster`` (all of upstream's
controllers) is the reference for the differential tests. Setup and checks use admin.

# Pods
As in upstream's integration tests, most pods are bound to a node that does not exist
(:data:`FAKE_NODE`) and the test writes their status (phase, IPs, Ready) itself: kwok
leaves them alone, so addresses are the same on every cluster. PodGC deletes pods of a
missing node only after a 40 s quarantine, longer than any of these scenarios takes.
Pods that kwok should run (:func:`kwok_nodes`) get kwok's own status and IPs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio

from steward.cluster import LocalCluster
from steward.controllers.endpoints.controller import CONTROLLER
from steward.kube import KubeClient, NotFoundError
from tests.conftest import local_cluster
from tests.controllers import harness
from tests.controllers.harness import (
    LABELS,
    Starter,
    admin_kube,
    controllers,
    in_loop_informer,
    now,
    resource_path,
    scoped_namespace,
    stays,
    update,
    upstream_kube,
    upstream_namespace,
)

__all__ = ["LABELS", "Starter", "stays", "upstream_kube", "upstream_namespace"]

IDENTITY = "controller-endpoint"
FAKE_NODE = "fakenode"
"""The node upstream's integration tests bind their pods to (no such node exists)."""


@pytest.fixture(scope="package")
def ep_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local control plane without upstream's endpoints-controller (3 kwok nodes)."""
    yield from local_cluster(tmp_path_factory, "ep", controllers="*,-endpoint")


@pytest.fixture
def ep_kube(ep_cluster: LocalCluster) -> Iterator[KubeClient]:
    """Admin client of ``ep_cluster`` (the tests' own reads and writes)."""
    yield from admin_kube(ep_cluster, workers=16)


@pytest.fixture
def ep_namespace(ep_kube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace of ``ep_cluster`` for one test, deleted afterwards."""
    yield from scoped_namespace(ep_kube, request)


@pytest_asyncio.fixture
async def ep_controllers(ep_cluster: LocalCluster, ep_namespace: str) -> AsyncIterator[Starter]:
    """An informer, and Steward's Endpoints controller started (five workers unless told
    otherwise) for the test's namespace as its own identity (``steward:controller:endpoint``,
    bound to the ClusterRole of deploy/rbac/controller-endpoint.yaml by the control
    plane); every instance is stopped at the end."""
    identity = ep_cluster.component_kubeconfig(IDENTITY)
    async with (
        in_loop_informer(ep_cluster) as informer,
        controllers(CONTROLLER, identity, informer, ep_namespace, workers=5) as starter,
    ):
        yield starter


# Objects -------------------------------------------------------------------------------
def service_body(name: str, **spec: Any) -> dict[str, Any]:
    """Upstream's ``newService``: labels and selector ``foo=bar``, ports 1338 and 1337."""
    meta = {"name": name, "labels": dict(LABELS), **spec.pop("metadata", {})}
    body_spec: dict[str, Any] = {
        "selector": dict(LABELS),
        "ports": [
            {"name": "port-1338", "port": 1338, "protocol": "TCP", "targetPort": 1338},
            {"name": "port-1337", "port": 1337, "protocol": "TCP", "targetPort": 1337},
        ],
    }
    body_spec.update(spec)
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": body_spec}


def pod_body(name: str, node: str = FAKE_NODE, **spec: Any) -> dict[str, Any]:
    """A pod labelled ``foo=bar`` bound to ``node`` (upstream's test pod)."""
    meta = {"name": name, "labels": dict(LABELS), **spec.pop("metadata", {})}
    pod_spec: dict[str, Any] = {
        "nodeName": node,
        "containers": [{"name": "fake-name", "image": "fakeimage"}],
    }
    pod_spec.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec}


def running_status(ips: list[str], ready: bool | None, since: str | None = None) -> dict[str, Any]:
    """A Running pod's status with ``ips`` and (unless ``ready`` is None) a Ready
    condition, as upstream's tests write it."""
    status: dict[str, Any] = {"phase": "Running", "podIPs": [{"ip": ip} for ip in ips]}
    if ips:
        status["podIP"] = ips[0]
    if ready is not None:
        cond: dict[str, Any] = {"type": "Ready", "status": "True" if ready else "False"}
        cond["lastTransitionTime"] = since or now()
        status["conditions"] = [cond]
    return status


def pods_path(ns: str, name: str = "") -> str:
    return resource_path("/api/v1", ns, "pods", name)


def create_pod(
    kube: KubeClient, ns: str, body: dict[str, Any], status: dict[str, Any]
) -> dict[str, Any]:
    """Create the pod, then write its status (``UpdateStatus`` in upstream's tests)."""
    kube.request("POST", pods_path(ns), body)
    return set_status(kube, ns, body["metadata"]["name"], status)


def set_status(kube: KubeClient, ns: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
    """Replace the pod's status (read, change, PUT /status; again on a conflict)."""

    def change(pod: dict[str, Any]) -> None:
        pod["status"] = {**(pod.get("status") or {}), **status}

    failure = f"could not update the status of pod {ns}/{name}"
    return update(kube, pods_path(ns, name), change, failure, subresource="/status")


def set_ready(
    kube: KubeClient, ns: str, name: str, ready: bool, since: str | None = None
) -> dict[str, Any]:
    """Set the pod's Ready condition (its lastTransitionTime to ``since`` or now)."""

    def change(pod: dict[str, Any]) -> None:
        conditions = [
            c for c in (pod.get("status") or {}).get("conditions") or () if c["type"] != "Ready"
        ]
        conditions.append(
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "lastTransitionTime": since or now(),
            }
        )
        pod["status"]["conditions"] = conditions

    failure = f"could not update pod {ns}/{name}"
    return update(kube, pods_path(ns, name), change, failure, subresource="/status")


def services_path(ns: str, name: str = "") -> str:
    return resource_path("/api/v1", ns, "services", name)


def endpoints_path(ns: str, name: str = "") -> str:
    return resource_path("/api/v1", ns, "endpoints", name)


def get_endpoints(kube: KubeClient, ns: str, name: str) -> dict[str, Any] | None:
    try:
        return kube.request("GET", endpoints_path(ns, name))
    except NotFoundError:
        return None


def update_service(
    kube: KubeClient, ns: str, name: str, change: Callable[[dict[str, Any]], None]
) -> dict[str, Any]:
    """Read, change and PUT the Service, again on a conflict."""
    return update(kube, services_path(ns, name), change, f"could not update Service {ns}/{name}")


def addresses(ep: dict[str, Any] | None, field: str = "addresses") -> list[dict[str, Any]]:
    """Every address of one kind, over all subsets."""
    return [a for s in (ep or {}).get("subsets") or () for a in s.get(field) or ()]


def kwok_nodes(kube: KubeClient) -> list[str]:
    """The names of the nodes kwok runs pods on."""
    nodes = kube.request("GET", "/api/v1/nodes").get("items") or ()
    return sorted(
        n["metadata"]["name"]
        for n in nodes
        if (n["metadata"].get("annotations") or {}).get("kwok.x-k8s.io/node") == "fake"
    )


async def eventually(
    check: Callable[[], Any], what: str, within: float = 60.0, interval: float = 0.25
) -> Any:
    """:func:`tests.controllers.harness.eventually`, within a minute unless told."""
    return await harness.eventually(check, what, within, interval)
