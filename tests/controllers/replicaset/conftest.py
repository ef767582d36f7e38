"""Fixtures of the ReplicaSet and ReplicationController controllers' tests.

Upstream's ReplicaSet and ReplicationController controllers cannot be told to leave some
owners alone (neither kind has ``spec.managedBy``), so Steward's run in a cluster of their
own: ``rs_cluster`` (one per test package, shared by both kinds) has
kube-controller-manager without its ``replicaset`` and ``replicationcontroller``
controllers. Each test gets a fresh namespace there (``rs_namespace``), an in-process
informer, and starts Steward's controller (``rs_controllers``, ``rc_controllers``)
watching that namespace, as the identity ``steward:controller:replicaset`` (or
``:replicationcontroller``) with only the RBAC of ``deploy/rbac/controller-<name>.yaml``.
The session's ``cluster`` (all of upstream's controllers) is the reference for the
differential tests. Setup and checks use admin.

:class:`OwnerKind` (:data:`RS`, :data:`RC`) lets a test build, read and change either
kind through the same helpers (``create_rs``, ``get_rs``, ``update_rs`` take ``owner``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from steward.cluster import LocalCluster
from steward.controllers.replicaset.controller import CONTROLLER
from steward.controllers.replicaset.replication import CONTROLLER as RC_CONTROLLER
from steward.kube import KubeClient
from tests.conftest import local_cluster
from tests.controllers.harness import (
    LABELS,
    Starter,
    admin_kube,
    controllers,
    eventually,
    in_loop_informer,
    resource_path,
    scoped_namespace,
    update,
    upstream_kube,
    upstream_namespace,
)

__all__ = ["LABELS", "Starter", "eventually", "upstream_kube", "upstream_namespace"]

IDENTITY = "controller-replicaset"
RC_IDENTITY = "controller-replicationcontroller"


@pytest.fixture(scope="package")
def rs_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local control plane without upstream's ReplicaSet and ReplicationController
    controllers (3 kwok nodes)."""
    yield from local_cluster(
        tmp_path_factory, "rs", controllers="*,-replicaset,-replicationcontroller"
    )


@pytest.fixture(scope="package")
def rs_identity(rs_cluster: LocalCluster) -> Path:
    """The controller's own kubeconfig (``steward:controller:replicaset``, bound to the
    ClusterRole of deploy/rbac/controller-replicaset.yaml by the control plane)."""
    return rs_cluster.component_kubeconfig(IDENTITY)


@pytest.fixture
def rs_kube(rs_cluster: LocalCluster) -> Iterator[KubeClient]:
    """Admin client of ``rs_cluster`` (the tests' own reads and writes)."""
    yield from admin_kube(rs_cluster)


@pytest.fixture
def rs_namespace(rs_kube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace of ``rs_cluster`` for one test, deleted afterwards."""
    yield from scoped_namespace(rs_kube, request)


@pytest_asyncio.fixture
async def rs_informer(rs_cluster: LocalCluster) -> AsyncIterator[str]:
    async with in_loop_informer(rs_cluster) as address:
        yield address


@pytest_asyncio.fixture
async def rs_controllers(
    rs_identity: Path, rs_informer: str, rs_namespace: str
) -> AsyncIterator[Starter]:
    """Start Steward's ReplicaSet controller for the test's namespace; every instance is
    stopped at the end."""
    async with controllers(CONTROLLER, rs_identity, rs_informer, rs_namespace) as starter:
        yield starter


@pytest.fixture(scope="package")
def rc_identity(rs_cluster: LocalCluster) -> Path:
    """The ReplicationController controller's kubeconfig
    (``steward:controller:replicationcontroller``)."""
    return rs_cluster.component_kubeconfig(RC_IDENTITY)


@pytest_asyncio.fixture
async def rc_controllers(
    rc_identity: Path, rs_informer: str, rs_namespace: str
) -> AsyncIterator[Starter]:
    """Start Steward's ReplicationController controller for the test's namespace; every
    instance is stopped at the end."""
    async with controllers(RC_CONTROLLER, rc_identity, rs_informer, rs_namespace) as starter:
        yield starter


# Objects and polling ------------------------------------------------------------------
@dataclass(frozen=True)
class OwnerKind:
    """How the tests write one kind of replica owner."""

    kind: str
    api_version: str
    prefix: str
    """The API path prefix of its group version (``/apis/apps/v1``)."""
    plural: str
    map_selector: bool
    """Whether ``spec.selector`` is a plain label map (ReplicationControllers)."""

    def path(self, ns: str, name: str = "") -> str:
        return resource_path(self.prefix, ns, self.plural, name)

    def selector(self, labels: dict[str, str]) -> dict[str, Any]:
        return dict(labels) if self.map_selector else {"matchLabels": dict(labels)}


RS = OwnerKind("ReplicaSet", "apps/v1", "/apis/apps/v1", "replicasets", map_selector=False)
RC = OwnerKind("ReplicationController", "v1", "/api/v1", "replicationcontrollers", True)


def rs_body(name: str, replicas: int, owner: OwnerKind = RS, **spec: Any) -> dict[str, Any]:
    """Upstream's ``newRS`` (``newRC`` with ``owner`` :data:`RC`): selector and template
    labels ``foo=bar``, one container."""
    pod_spec: dict[str, Any] = {"containers": [{"name": "fake-name", "image": "fakeimage"}]}
    pod_spec.update(spec.pop("pod_spec", {}))
    template_meta: dict[str, Any] = {"labels": dict(LABELS)}
    template_meta.update(spec.pop("template_meta", {}))
    return {
        "apiVersion": owner.api_version,
        "kind": owner.kind,
        "metadata": {"name": name, **spec.pop("metadata", {})},
        "spec": {
            "replicas": replicas,
            "selector": owner.selector(LABELS),
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


def rs_path(ns: str, name: str = "", owner: OwnerKind = RS) -> str:
    return owner.path(ns, name)


def create_rs(
    kube: KubeClient, ns: str, body: dict[str, Any], owner: OwnerKind = RS
) -> dict[str, Any]:
    return kube.request("POST", owner.path(ns), body)


def get_rs(kube: KubeClient, ns: str, name: str, owner: OwnerKind = RS) -> dict[str, Any]:
    return kube.request("GET", owner.path(ns, name))


def update_rs(
    kube: KubeClient,
    ns: str,
    name: str,
    change: Callable[[dict[str, Any]], None],
    owner: OwnerKind = RS,
) -> dict[str, Any]:
    """Read, change and PUT the owner, again on a conflict (``updateRS``)."""
    what = f"could not update {owner.kind} {ns}/{name}"
    return update(kube, owner.path(ns, name), change, what)


def update_pod(
    kube: KubeClient,
    ns: str,
    name: str,
    change: Callable[[dict[str, Any]], None],
    subresource: str = "",
) -> dict[str, Any]:
    """Read, change and PUT the pod (or its status), again on a conflict."""
    return update(
        kube,
        resource_path("/api/v1", ns, "pods", name),
        change,
        f"could not update pod {ns}/{name}",
        subresource=subresource,
    )


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


async def wait_stable_rs(
    kube: KubeClient, rs: dict[str, Any], owner: OwnerKind = RS
) -> dict[str, Any]:
    """``WaitRSStable`` with the generation and replicas of ``rs`` as written."""
    ns, name = rs["metadata"]["namespace"], rs["metadata"]["name"]
    generation = rs["metadata"].get("generation", 0)
    want = rs["spec"].get("replicas", 1)

    def check() -> dict[str, Any] | None:
        cur = get_rs(kube, ns, name, owner)
        st = cur.get("status") or {}
        ok = st.get("observedGeneration", 0) >= generation and st.get("replicas", 0) == want
        return cur if ok else None

    result: dict[str, Any] = await eventually(check, f"{owner.kind} {ns}/{name} stable")
    return result
