"""Fixtures of the Deployment controller's tests.

Deployments have no ``spec.managedBy``, so Steward's controller runs in a cluster of its
own (``steward_cluster``: kube-controller-manager with ``*,-deployment``; upstream's
ReplicaSet controller makes the pods) as its own identity, ``steward:controller:deployment``
bound to ``deploy/rbac/controller-deployment.yaml``. The session's ``cluster`` (every
upstream controller on) is the reference of the differential tests."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
import yaml

from steward import Controller, ControllerOptions
from steward.cluster import ClusterConfig, LocalCluster
from steward.cluster.pki import CertificateAuthority
from steward.cluster.progress import Progress
from steward.controllers.deployment.controller import CONTROLLER
from steward.informer import InformerOptions, InformerServer
from steward.kube import KubeClient, NotFoundError, load_access
from steward.serving.security import DEVELOPMENT

ROOT = Path(__file__).resolve().parents[3]
USER = "steward:controller:deployment"
APPS = "/apis/apps/v1"


def make_identity(cluster: LocalCluster, directory: Path) -> Path:
    """Issue the controller's client certificate from the cluster's CA, bind its
    ClusterRole, and write its kubeconfig; returns the kubeconfig's path."""
    ca = CertificateAuthority.load(cluster.directory / "pki")
    pair = ca.issue(
        "controller-deployment",
        USER,
        orgs=("system:monitoring",),
        client=True,
        directory=directory,
    )
    admin = KubeClient(load_access(str(cluster.kubeconfig)), user_agent="deployment-test-setup")
    try:
        role = yaml.safe_load((ROOT / "deploy/rbac/controller-deployment.yaml").read_text())
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        with contextlib.suppress(Exception):
            admin.request("POST", f"{rbac}/clusterroles", role)
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": USER},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": USER,
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
        }
        with contextlib.suppress(Exception):
            admin.request("POST", f"{rbac}/clusterrolebindings", binding)
    finally:
        admin.close()
    admin_cfg = yaml.safe_load(cluster.kubeconfig.read_text())
    server = admin_cfg["clusters"][0]["cluster"]["server"]

    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {"server": server, "certificate-authority-data": b64(ca.pair.cert)},
            }
        ],
        "users": [
            {
                "name": USER,
                "user": {
                    "client-certificate-data": b64(pair.cert),
                    "client-key-data": b64(pair.key),
                },
            }
        ],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": USER}}],
        "current-context": "c",
    }
    path = directory / "controller-deployment.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


@pytest.fixture(scope="package")
def steward_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster without upstream's deployment controller, for Steward's."""
    cfg = ClusterConfig(
        name=f"steward-test-deploy-{os.getpid()}",
        state_dir=Path(tmp_path_factory.mktemp("deployment-cluster")),
        nodes=3,
        controllers="*,-deployment",
        die_with_parent=True,
    )
    running = LocalCluster.up(cfg, progress=Progress(quiet=True))
    try:
        yield running
    finally:
        running.down(progress=Progress(quiet=True))


@pytest.fixture(scope="package")
def controller_kubeconfig(
    steward_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    return make_identity(steward_cluster, Path(tmp_path_factory.mktemp("deployment-identity")))


@pytest.fixture
def skube(steward_cluster: LocalCluster) -> Iterator[KubeClient]:
    """Admin client of Steward's cluster (the test's own reads and writes)."""
    api = KubeClient(load_access(str(steward_cluster.kubeconfig)), user_agent="deployment-test")
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def kube(cluster: LocalCluster) -> Iterator[KubeClient]:
    """Admin client of the session's cluster (upstream's controllers)."""
    api = KubeClient(load_access(str(cluster.kubeconfig)), user_agent="deployment-test")
    try:
        yield api
    finally:
        api.close()


def fresh_namespace(api: KubeClient, request: pytest.FixtureRequest) -> str:
    base = request.node.name.lower().replace("_", "-")
    name = "".join(c for c in base if c.isalnum() or c == "-")[:40].strip("-")
    name = f"{name}-{uuid.uuid4().hex[:6]}"
    api.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    return name


@pytest.fixture
def sns(skube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace in Steward's cluster."""
    name = fresh_namespace(skube, request)
    try:
        yield name
    finally:
        with contextlib.suppress(NotFoundError):
            skube.request("DELETE", f"/api/v1/namespaces/{name}")


class Running:
    """A controller running in this event loop until :meth:`stop`."""

    def __init__(self, controller: Controller[Any]) -> None:
        self.controller = controller
        self.task = asyncio.create_task(controller.run())

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


@pytest_asyncio.fixture
async def deployment_controller(
    steward_cluster: LocalCluster, controller_kubeconfig: Path, sns: str
) -> AsyncIterator[Running]:
    """An informer and Steward's Deployment controller for the test's namespace."""
    server = InformerServer(
        InformerOptions(
            security=DEVELOPMENT,
            listen="127.0.0.1:0",
            kubeconfig=str(steward_cluster.component_kubeconfig("informer")),
        )
    )
    await server.start()
    api = KubeClient(
        load_access(str(controller_kubeconfig)), user_agent="steward-deployment", workers=8
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            running = Running(
                CONTROLLER.new(
                    channel, api, ControllerOptions(max_concurrent_reconciles=2, namespace=sns)
                )
            )
            try:
                yield running
            finally:
                await running.stop()
    finally:
        api.close()
        await server.stop()


# Helpers -----------------------------------------------------------------------------------
def deployment_body(
    name: str, replicas: int = 3, image: str = "busybox:1", **spec: Any
) -> dict[str, Any]:
    """A Deployment of ``replicas`` pods (label ``app: <name>``) kwok runs at once."""
    pod_spec: dict[str, Any] = {"containers": [{"name": "main", "image": image}]}
    pod_spec.update(spec.pop("pod_spec", {}))
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec},
            **spec,
        },
    }


def create(api: KubeClient, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    return api.request("POST", f"{APPS}/namespaces/{ns}/deployments", body)


def get(api: KubeClient, ns: str, name: str) -> dict[str, Any]:
    return api.request("GET", f"{APPS}/namespaces/{ns}/deployments/{name}")


def patch(
    api: KubeClient, ns: str, name: str, body: dict[str, Any], kind: str = "deployments"
) -> dict[str, Any]:
    return api.request(
        "PATCH",
        f"{APPS}/namespaces/{ns}/{kind}/{name}",
        body,
        content_type="application/strategic-merge-patch+json",
    )


def replica_sets(api: KubeClient, ns: str) -> list[dict[str, Any]]:
    items = api.request("GET", f"{APPS}/namespaces/{ns}/replicasets").get("items") or []
    return sorted(items, key=lambda rs: rs["metadata"]["name"])


def condition(d: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    for cond in (d.get("status") or {}).get("conditions") or ():
        if cond.get("type") == ctype:
            return dict(cond)
    return None


def rolled_out(d: dict[str, Any]) -> bool:
    """Every replica updated and available, the generation observed (kubectl rollout status)."""
    st = d.get("status") or {}
    want = d["spec"]["replicas"]
    return bool(
        st.get("observedGeneration", 0) >= d["metadata"]["generation"]
        and st.get("updatedReplicas", 0) == want
        and st.get("replicas", 0) == want
        and st.get("availableReplicas", 0) == want
    )


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


async def wait_rolled_out(
    api: KubeClient, ns: str, name: str, within: float = 120.0
) -> dict[str, Any]:
    """Wait until the Deployment is rolled out (and, with a progress deadline, says
    NewReplicaSetAvailable); the failure names the cluster and the last status."""
    seen: list[dict[str, Any]] = []

    def check() -> dict[str, Any] | None:
        d = get(api, ns, name)
        seen[:] = [d]
        cond = condition(d, "Progressing")
        ok = rolled_out(d) and (
            "progressDeadlineSeconds" not in d["spec"]
            or (cond is not None and cond.get("reason") == "NewReplicaSetAvailable")
        )
        return d if ok else None

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = await asyncio.to_thread(check)
        if found is not None:
            return found
        await asyncio.sleep(0.25)
    last = seen[0] if seen else {}
    pytest.fail(
        f"timed out waiting for {name} rolled out on {api.access.host}: "
        f"generation {last.get('metadata', {}).get('generation')}, status {last.get('status')}"
    )


@pytest.fixture
def tracing() -> None:
    """A real tracer provider (set once per process), so reconciles have a valid span
    context to pass on in the ``traceparent`` annotation."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(TracerProvider())
