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

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio

from steward.cluster import LocalCluster
from steward.controllers.endpoints.main import CONTROLLER
from steward.informer import InformerOptions, InformerServer
from steward.kube import ConflictError, KubeClient, NotFoundError, load_access
from steward.runtime.controller import Controller, ControllerOptions
from steward.serving.security import DEVELOPMENT
from tests.conftest import local_cluster

IDENTITY = "controller-endpoint"
LABELS = {"foo": "bar"}
"""The labels of upstream's integration tests (``labelMap()``)."""
FAKE_NODE = "fakenode"
"""The node upstream's integration tests bind their pods to (no such node exists)."""


@pytest.fixture(scope="package")
def ep_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local control plane without upstream's endpoints-controller (3 kwok nodes)."""
    yield from local_cluster(tmp_path_factory, "ep", controllers="*,-endpoint")


@pytest.fixture(scope="package")
def ep_identity(ep_cluster: LocalCluster) -> Path:
    """The controller's own kubeconfig (``steward:controller:endpoint``, bound to the
    ClusterRole of deploy/rbac/controller-endpoint.yaml by the control plane)."""
    return ep_cluster.component_kubeconfig(IDENTITY)


@pytest.fixture
def ep_kube(ep_cluster: LocalCluster) -> Iterator[KubeClient]:
    """Admin client of ``ep_cluster`` (the tests' own reads and writes)."""
    api = KubeClient(
        load_access(str(ep_cluster.kubeconfig)), user_agent="endpoints-test", workers=16
    )
    try:
        yield api
    finally:
        api.close()


def _new_namespace(kube: KubeClient, request: pytest.FixtureRequest) -> str:
    base = request.node.name.lower().replace("_", "-")
    name = "".join(c for c in base if c.isalnum() or c == "-")[:40].strip("-")
    name = f"{name}-{uuid.uuid4().hex[:6]}"
    kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    # Pods are refused until the namespace's default ServiceAccount exists.
    deadline = time.monotonic() + 120
    while True:
        try:
            kube.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")
            return name
        except NotFoundError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _drop_namespace(kube: KubeClient, ns: str) -> None:
    """Delete the namespace, first clearing finalizers a test left on its pods."""
    with contextlib.suppress(NotFoundError):
        for pod in kube.request("GET", f"/api/v1/namespaces/{ns}/pods").get("items") or ():
            if pod["metadata"].get("finalizers"):
                with contextlib.suppress(NotFoundError, ConflictError):
                    kube.request(
                        "PATCH",
                        f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}",
                        {"metadata": {"finalizers": None}},
                        content_type="application/merge-patch+json",
                    )
        with contextlib.suppress(ConflictError):  # being deleted already
            kube.request("DELETE", f"/api/v1/namespaces/{ns}")


@pytest.fixture
def ep_namespace(ep_kube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace of ``ep_cluster`` for one test, deleted afterwards."""
    ns = _new_namespace(ep_kube, request)
    try:
        yield ns
    finally:
        _drop_namespace(ep_kube, ns)


@pytest.fixture
def upstream_kube(cluster: LocalCluster) -> Iterator[KubeClient]:
    """Admin client of the session cluster, where upstream's controller runs."""
    api = KubeClient(load_access(str(cluster.kubeconfig)), user_agent="endpoints-test")
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def upstream_namespace(upstream_kube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace of the session cluster, deleted afterwards."""
    ns = _new_namespace(upstream_kube, request)
    try:
        yield ns
    finally:
        _drop_namespace(upstream_kube, ns)


@pytest_asyncio.fixture
async def ep_informer(ep_cluster: LocalCluster) -> AsyncIterator[str]:
    server = InformerServer(
        InformerOptions(
            security=DEVELOPMENT,
            listen="127.0.0.1:0",
            kubeconfig=str(ep_cluster.component_kubeconfig("informer")),
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
    """Starts Steward's Endpoints controller for one namespace (when a test says so)."""

    def __init__(self, channel: grpc.aio.Channel, api: KubeClient, namespace: str) -> None:
        self.channel = channel
        self.api = api
        self.namespace = namespace
        self.running: list[Running] = []

    def start(self, workers: int = 5) -> Running:
        controller = CONTROLLER.new(
            self.channel,
            self.api,
            ControllerOptions(max_concurrent_reconciles=workers, namespace=self.namespace),
        )
        running = Running(controller)
        self.running.append(running)
        return running


@pytest_asyncio.fixture
async def ep_controllers(
    ep_identity: Path, ep_informer: str, ep_namespace: str
) -> AsyncIterator[Starter]:
    """Start Steward's Endpoints controller for the test's namespace; every instance is
    stopped at the end."""
    api = KubeClient(load_access(str(ep_identity)), user_agent="steward-endpoint", workers=8)
    async with grpc.aio.insecure_channel(ep_informer) as channel:
        starter = Starter(channel, api, ep_namespace)
        try:
            yield starter
        finally:
            for running in starter.running:
                await running.stop()
    api.close()


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


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


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
    return f"/api/v1/namespaces/{ns}/pods/{name}" if name else f"/api/v1/namespaces/{ns}/pods"


def create_pod(
    kube: KubeClient, ns: str, body: dict[str, Any], status: dict[str, Any]
) -> dict[str, Any]:
    """Create the pod, then write its status (``UpdateStatus`` in upstream's tests)."""
    kube.request("POST", pods_path(ns), body)
    return set_status(kube, ns, body["metadata"]["name"], status)


def set_status(kube: KubeClient, ns: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
    """Replace the pod's status (read, change, PUT /status; again on a conflict)."""
    for _ in range(20):
        pod = kube.request("GET", pods_path(ns, name))
        pod["status"] = {**(pod.get("status") or {}), **status}
        try:
            return kube.request("PUT", pods_path(ns, name) + "/status", pod)
        except ConflictError:
            continue
    raise AssertionError(f"could not update the status of pod {ns}/{name}")


def set_ready(
    kube: KubeClient, ns: str, name: str, ready: bool, since: str | None = None
) -> dict[str, Any]:
    """Set the pod's Ready condition (its lastTransitionTime to ``since`` or now)."""
    for _ in range(20):
        pod = kube.request("GET", pods_path(ns, name))
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
        try:
            return kube.request("PUT", pods_path(ns, name) + "/status", pod)
        except ConflictError:
            continue
    raise AssertionError(f"could not update pod {ns}/{name}")


def services_path(ns: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{ns}/services"
    return f"{base}/{name}" if name else base


def endpoints_path(ns: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{ns}/endpoints"
    return f"{base}/{name}" if name else base


def get_endpoints(kube: KubeClient, ns: str, name: str) -> dict[str, Any] | None:
    try:
        return kube.request("GET", endpoints_path(ns, name))
    except NotFoundError:
        return None


def update_service(
    kube: KubeClient, ns: str, name: str, change: Callable[[dict[str, Any]], None]
) -> dict[str, Any]:
    """Read, change and PUT the Service, again on a conflict."""
    for _ in range(20):
        svc = kube.request("GET", services_path(ns, name))
        change(svc)
        try:
            return kube.request("PUT", services_path(ns, name), svc)
        except ConflictError:
            continue
    raise AssertionError(f"could not update Service {ns}/{name}")


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
    """Poll ``check`` (in a thread) until it returns something truthy; return that."""
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        last = await asyncio.to_thread(check)
        if last:
            return last
        await asyncio.sleep(interval)
    pytest.fail(f"timed out waiting for {what} (last: {last!r})")


async def stays(check: Callable[[], Any], what: str, for_seconds: float) -> None:
    """Fail as soon as ``check`` (in a thread) is falsy within ``for_seconds``."""
    deadline = time.monotonic() + for_seconds
    while time.monotonic() < deadline:
        if not await asyncio.to_thread(check):
            pytest.fail(f"{what} did not hold")
        await asyncio.sleep(0.25)
