"""Fixtures of the garbage collector's tests.

``gc_cluster`` (one per test package) is a local control plane whose
kube-controller-manager runs without its garbage collector (``*,-garbagecollector``) and
with every other controller (so Deployments make ReplicaSets and pods on the kwok nodes).
Each test gets a fresh namespace there (``gc_namespace``) and Steward's garbage collector
(``gc``), in the test's event loop against an informer of its own, as its own identity
``steward:controller:garbagecollector`` with only the RBAC of
``deploy/rbac/controller-garbagecollector.yaml``, watching every namespace (it collects
across namespaces: owners may be cluster-scoped). The session's ``cluster`` (upstream's
collector) is the other side of each scenario (``upstream_kube``, ``upstream_namespace``).
Setup and checks use admin.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio

from steward.cluster import LocalCluster
from steward.controllers.garbagecollector.controller import CONTROLLER
from steward.kube import KubeClient, NotFoundError
from tests.conftest import local_cluster
from tests.controllers.harness import (
    Running,
    admin_kube,
    controllers,
    eventually,
    in_loop_informer,
    scoped_namespace,
    upstream_kube,
    upstream_namespace,
)
from tests.services import widget_crd_body

__all__ = ["upstream_kube", "upstream_namespace"]

IDENTITY = "controller-garbagecollector"


@pytest.fixture(scope="package")
def gc_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local control plane without upstream's garbage collector (2 kwok nodes)."""
    yield from local_cluster(tmp_path_factory, "gc", nodes=2, controllers="*,-garbagecollector")


@pytest.fixture
def gc_kube(gc_cluster: LocalCluster) -> Iterator[KubeClient]:
    """Admin client of ``gc_cluster``."""
    yield from admin_kube(gc_cluster, workers=8)


@pytest.fixture
def gc_namespace(gc_kube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace of ``gc_cluster`` for one test, deleted afterwards."""
    yield from scoped_namespace(gc_kube, request)


@pytest_asyncio.fixture
async def gc(gc_cluster: LocalCluster) -> AsyncIterator[Running]:
    """Steward's garbage collector running (5 workers, discovery every 2 s) until the
    test ends."""
    identity = gc_cluster.component_kubeconfig(IDENTITY)
    async with (
        in_loop_informer(gc_cluster) as informer,
        controllers(
            CONTROLLER, identity, informer, workers=5, flags=["--discovery-period=2"]
        ) as starter,
    ):
        running = starter.start()
        await running.controller.mirror.wait_synced()
        yield running


# Objects -------------------------------------------------------------------------------
def owner_ref(
    obj: dict[str, Any], *, block: bool = False, controller: bool = False
) -> dict[str, Any]:
    """An owner reference to ``obj`` (as the API server returned it)."""
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "blockOwnerDeletion": block,
        "controller": controller,
    }


def configmap(kube: KubeClient, ns: str, name: str, *owners: dict[str, Any]) -> dict[str, Any]:
    """Create a ConfigMap owned by ``owners`` (references); the created object."""
    meta: dict[str, Any] = {"name": name}
    if owners:
        meta["ownerReferences"] = list(owners)
    return kube.request(
        "POST",
        f"/api/v1/namespaces/{ns}/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}},
    )


def get(kube: KubeClient, path: str) -> dict[str, Any] | None:
    """The object at ``path``, or None."""
    try:
        return kube.request("GET", path)
    except NotFoundError:
        return None


def delete(kube: KubeClient, path: str, policy: str) -> None:
    """DELETE with a propagation policy."""
    kube.request(
        "DELETE",
        path,
        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": policy},
    )


def fake_uid() -> str:
    return str(uuid.uuid4())


@contextlib.contextmanager
def custom_resource_definition(kube: KubeClient) -> Iterator[tuple[str, str]]:
    """A namespaced CRD of its own (group, plural), established; deleted afterwards."""
    group = f"gc{uuid.uuid4().hex[:8]}.steward.test"
    plural = "widgets"
    name = f"{plural}.{group}"
    kube.request(
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        widget_crd_body(group),
    )
    try:
        yield group, plural
    finally:
        with contextlib.suppress(NotFoundError):
            kube.request(
                "DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            )


async def observed(gc: Running, kube: KubeClient, *paths: str) -> None:
    """Wait until the collector's graph holds the objects of these collections (all of
    them, as observed nodes): an owner deleted before its dependents reached the collector
    would be finalized without them, by upstream's collector as by this one (the
    informer's watches of a fresh start open one by one under its rate limit)."""
    graph = gc.controller.reconciler.graph

    def seen() -> bool:
        for path in paths:
            for item in kube.request("GET", path).get("items") or ():
                node = graph.get(item["metadata"]["uid"])
                if node is None or not node.observed:
                    return False
        return True

    await eventually(seen, f"the collector observing {', '.join(paths)}")
