"""Fixtures of the ReplicaSet controller's tests.

Upstream's ReplicaSet controller cannot be told to leave some ReplicaSets alone (they have
no ``spec.managedBy``), so Steward's runs in a cluster of its own: ``rs_cluster`` (one per
test package) has kube-controller-manager without its ``replicaset`` controller. Each
test gets a fresh namespace there (``rs_namespace``), an in-process informer, and starts
Steward's controller (``rs_controllers``) watching that namespace, as the identity
``steward:controller:replicaset`` with only the RBAC of
``deploy/rbac/controller-replicaset.yaml``. The session's ``cluster`` (all of upstream's
controllers) is the reference for the differential tests. Setup and checks use admin.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
import yaml

from steward.cluster import LocalCluster
from steward.cluster.pki import CertificateAuthority
from steward.controllers.replicaset.controller import CONTROLLER
from steward.informer import InformerOptions, InformerServer
from steward.kube import ConflictError, KubeClient, NotFoundError, load_access
from steward.runtime.controller import Controller, ControllerOptions
from steward.serving.security import DEVELOPMENT
from tests.conftest import local_cluster

REPO = Path(__file__).resolve().parents[3]
IDENTITY = "controller-replicaset"
USER = "steward:controller:replicaset"
LABELS = {"foo": "bar"}
"""The labels of upstream's integration tests (``labelMap()``)."""


def _write_kubeconfig(cluster: LocalCluster, path: Path, ca: Path, cert: Path, key: Path) -> None:
    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "rs",
                "cluster": {"server": cluster.state.server, "certificate-authority-data": b64(ca)},
            }
        ],
        "users": [
            {
                "name": USER,
                "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)},
            }
        ],
        "contexts": [{"name": "rs", "context": {"cluster": "rs", "user": USER}}],
        "current-context": "rs",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


def controller_kubeconfig(cluster: LocalCluster) -> Path:
    """The controller's own kubeconfig: the cluster's, once the control plane issues this
    identity; until then a client certificate issued here (user ``USER`` in
    ``system:monitoring``) with the ClusterRole of deploy/rbac bound to it."""
    with contextlib.suppress(ValueError):
        path = cluster.component_kubeconfig(IDENTITY)
        if path.exists():
            return path
    pki_dir = cluster.directory / "pki"
    ca = CertificateAuthority.load(pki_dir)
    pair = ca.issue(IDENTITY, USER, orgs=("system:monitoring",), client=True)
    path = cluster.directory / f"{IDENTITY}.kubeconfig"
    _write_kubeconfig(cluster, path, ca.pair.cert, pair.cert, pair.key)
    admin = KubeClient(load_access(str(cluster.kubeconfig)), user_agent="replicaset-test-setup")
    try:
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        for doc in yaml.safe_load_all(
            (REPO / "deploy/rbac/controller-replicaset.yaml").read_text()
        ):
            name = doc["metadata"]["name"]
            with contextlib.suppress(ConflictError):
                admin.request("POST", f"{rbac}/clusterroles", doc)
            binding = {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": name,
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}
                ],
            }
            with contextlib.suppress(ConflictError):
                admin.request("POST", f"{rbac}/clusterrolebindings", binding)
    finally:
        admin.close()
    return path


@pytest.fixture(scope="package")
def rs_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local control plane without upstream's ReplicaSet controller (3 kwok nodes)."""
    yield from local_cluster(tmp_path_factory, "rs", controllers="*,-replicaset")


@pytest.fixture(scope="package")
def rs_identity(rs_cluster: LocalCluster) -> Path:
    return controller_kubeconfig(rs_cluster)


@pytest.fixture
def rs_kube(rs_cluster: LocalCluster) -> Iterator[KubeClient]:
    """Admin client of ``rs_cluster`` (the tests' own reads and writes)."""
    api = KubeClient(load_access(str(rs_cluster.kubeconfig)), user_agent="replicaset-test")
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
        kube.request("DELETE", f"/api/v1/namespaces/{ns}")


@pytest.fixture
def rs_namespace(rs_kube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace of ``rs_cluster`` for one test, deleted afterwards."""
    ns = _new_namespace(rs_kube, request)
    try:
        yield ns
    finally:
        _drop_namespace(rs_kube, ns)


@pytest.fixture
def upstream_kube(cluster: LocalCluster) -> Iterator[KubeClient]:
    """Admin client of the session cluster, where upstream's controller runs."""
    api = KubeClient(load_access(str(cluster.kubeconfig)), user_agent="replicaset-test")
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
async def rs_informer(rs_cluster: LocalCluster) -> AsyncIterator[str]:
    server = InformerServer(
        InformerOptions(
            security=DEVELOPMENT,
            listen="127.0.0.1:0",
            kubeconfig=str(rs_cluster.component_kubeconfig("informer")),
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
    """Starts Steward's ReplicaSet controller for one namespace (when a test says so)."""

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
        )
        running = Running(controller)
        self.running.append(running)
        return running


@pytest_asyncio.fixture
async def rs_controllers(
    rs_identity: Path, rs_informer: str, rs_namespace: str
) -> AsyncIterator[Starter]:
    """Start Steward's ReplicaSet controller for the test's namespace; every instance is
    stopped at the end."""
    api = KubeClient(load_access(str(rs_identity)), user_agent="steward-replicaset", workers=8)
    async with grpc.aio.insecure_channel(rs_informer) as channel:
        starter = Starter(channel, api, rs_namespace)
        try:
            yield starter
        finally:
            for running in starter.running:
                await running.stop()
    api.close()


# Objects and polling ------------------------------------------------------------------
def rs_body(name: str, replicas: int, **spec: Any) -> dict[str, Any]:
    """Upstream's ``newRS``: selector and template labels ``foo=bar``, one container."""
    pod_spec: dict[str, Any] = {"containers": [{"name": "fake-name", "image": "fakeimage"}]}
    pod_spec.update(spec.pop("pod_spec", {}))
    template_meta: dict[str, Any] = {"labels": dict(LABELS)}
    template_meta.update(spec.pop("template_meta", {}))
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, **spec.pop("metadata", {})},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": dict(LABELS)},
            "template": {"metadata": template_meta, "spec": pod_spec},
            **spec,
        },
    }


def pod_body(name: str, **meta: Any) -> dict[str, Any]:
    """Upstream's ``newMatchingPod``: labels ``foo=bar``, one container."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(LABELS), **meta},
        "spec": {"containers": [{"name": "fake-name", "image": "fakeimage"}]},
    }


def rs_path(ns: str, name: str = "") -> str:
    base = f"/apis/apps/v1/namespaces/{ns}/replicasets"
    return f"{base}/{name}" if name else base


def create_rs(kube: KubeClient, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    return kube.request("POST", rs_path(ns), body)


def get_rs(kube: KubeClient, ns: str, name: str) -> dict[str, Any]:
    return kube.request("GET", rs_path(ns, name))


def update_rs(
    kube: KubeClient, ns: str, name: str, change: Callable[[dict[str, Any]], None]
) -> dict[str, Any]:
    """Read, change and PUT the ReplicaSet, again on a conflict (``updateRS``)."""
    for _ in range(20):
        rs = get_rs(kube, ns, name)
        change(rs)
        try:
            return kube.request("PUT", rs_path(ns, name), rs)
        except ConflictError:
            continue
    raise AssertionError(f"could not update ReplicaSet {ns}/{name}")


def update_pod(
    kube: KubeClient,
    ns: str,
    name: str,
    change: Callable[[dict[str, Any]], None],
    subresource: str = "",
) -> dict[str, Any]:
    """Read, change and PUT the pod (or its status), again on a conflict."""
    path = f"/api/v1/namespaces/{ns}/pods/{name}"
    for _ in range(20):
        pod = kube.request("GET", path)
        change(pod)
        try:
            return kube.request("PUT", path + subresource, pod)
        except ConflictError:
            continue
    raise AssertionError(f"could not update pod {ns}/{name}")


def list_pods(kube: KubeClient, ns: str, selector: str = "foo=bar") -> list[dict[str, Any]]:
    found = kube.request("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}")
    return sorted(found.get("items") or [], key=lambda p: p["metadata"]["name"])


def controller_of(pod: dict[str, Any]) -> dict[str, Any] | None:
    for ref in pod["metadata"].get("ownerReferences") or ():
        if ref.get("controller"):
            return dict(ref)
    return None


def stable(rs: dict[str, Any]) -> bool:
    """Upstream's ``WaitRSStable``: the generation observed and status.replicas at spec."""
    st = rs.get("status") or {}
    observed = int(st.get("observedGeneration", 0)) >= int(rs["metadata"].get("generation", 0))
    return observed and int(st.get("replicas", 0)) == int(rs["spec"].get("replicas", 1))


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


async def wait_stable_rs(kube: KubeClient, rs: dict[str, Any]) -> dict[str, Any]:
    """``WaitRSStable`` with the generation and replicas of ``rs`` as written."""
    ns, name = rs["metadata"]["namespace"], rs["metadata"]["name"]
    generation = rs["metadata"].get("generation", 0)
    want = rs["spec"].get("replicas", 1)

    def check() -> dict[str, Any] | None:
        cur = get_rs(kube, ns, name)
        st = cur.get("status") or {}
        ok = st.get("observedGeneration", 0) >= generation and st.get("replicas", 0) == want
        return cur if ok else None

    result: dict[str, Any] = await eventually(check, f"ReplicaSet {ns}/{name} stable")
    return result
