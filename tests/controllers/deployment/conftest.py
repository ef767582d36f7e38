"""Fixtures of the Deployment controller's tests.

Deployments have no ``spec.managedBy``, so Steward's controller runs in a cluster of its
own (``steward_cluster``: kube-controller-manager with ``*,-deployment``; upstream's
ReplicaSet controller makes the pods) as its own identity, ``steward:controller:deployment``
bound to ``deploy/rbac/controller-deployment.yaml``. The session's ``cluster`` (every
upstream controller on) is the reference of the differential tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from steward.cluster import LocalCluster
from steward.controllers.deployment.controller import CONTROLLER
from steward.kube import KubeClient
from tests.conftest import local_cluster
from tests.controllers.harness import (
    Running,
    admin_kube,
    controllers,
    eventually,
    in_loop_informer,
    kube,
    scoped_namespace,
)
from tests.services import new_namespace as fresh_namespace

__all__ = ["Running", "eventually", "fresh_namespace", "kube"]

IDENTITY = "controller-deployment"
APPS = "/apis/apps/v1"


@pytest.fixture(scope="package")
def steward_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster without upstream's deployment controller, for Steward's."""
    yield from local_cluster(tmp_path_factory, "deploy", controllers="*,-deployment")


@pytest.fixture(scope="package")
def controller_kubeconfig(steward_cluster: LocalCluster) -> Path:
    """The controller's own kubeconfig (``steward:controller:deployment``, bound to the
    ClusterRole of deploy/rbac/controller-deployment.yaml by the control plane)."""
    return steward_cluster.component_kubeconfig(IDENTITY)


@pytest.fixture
def skube(steward_cluster: LocalCluster) -> Iterator[KubeClient]:
    """Admin client of Steward's cluster (the test's own reads and writes)."""
    yield from admin_kube(steward_cluster)


@pytest.fixture
def sns(skube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace in Steward's cluster."""
    yield from scoped_namespace(skube, request)


@pytest_asyncio.fixture
async def deployment_controller(
    steward_cluster: LocalCluster, controller_kubeconfig: Path, sns: str
) -> AsyncIterator[Running]:
    """An informer and Steward's Deployment controller for the test's namespace."""
    async with (
        in_loop_informer(steward_cluster) as informer,
        controllers(CONTROLLER, controller_kubeconfig, informer, sns) as starter,
    ):
        yield starter.start()


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

    def failure(_: Any) -> str:
        last = seen[0] if seen else {}
        return (
            f"timed out waiting for {name} rolled out on {api.access.host}: "
            f"generation {last.get('metadata', {}).get('generation')}, "
            f"status {last.get('status')}"
        )

    found: dict[str, Any] = await eventually(check, name, within, failure=failure)
    return found


@pytest.fixture
def tracing() -> None:
    """A real tracer provider (set once per process), so reconciles have a valid span
    context to pass on in the ``traceparent`` annotation."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(TracerProvider())
