"""Fixtures and scenarios of the namespace controller's tests.

Upstream's namespace-controller would finalize every namespace Steward's is given, so
Steward's runs in a cluster of its own: ``ns_cluster`` (one per test package) has
kube-controller-manager without its ``namespace`` controller. The tests start Steward's
controller (``ns_controllers``) over every namespace of that cluster (a namespace is not
in a namespace), as the identity ``steward:controller:namespace`` with only the RBAC of
``deploy/rbac/controller-namespace.yaml``. The session's ``cluster`` (all of upstream's
controllers) is the reference for the differential tests. Setup and checks use admin.

# Scenarios
Each scenario (:data:`SCENARIOS`) fills a fresh namespace, deletes it, waits for the
point it is about and returns what a namespace's conditions say there (type, status,
reason, message; the namespace's own name masked), then lets the deletion finish and
checks that the namespace is gone. They assert what upstream's semantics fix (which
content goes first, that nothing is finalized while discovery fails) and run against
either cluster, so the differential tests compare the two sides' snapshots.

Cluster-wide objects a scenario makes (a CustomResourceDefinition, an APIService) are
named per test with a suffix both sides share, and removed at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio

from steward.cluster import LocalCluster
from steward.controllers.namespace.controller import CONTROLLER
from steward.controllers.namespace.deletion import OK_MESSAGES, OK_REASONS
from steward.kube import ConflictError, KubeClient, NotFoundError
from steward.runtime.discovery import Discovery
from tests.conftest import local_cluster
from tests.controllers.harness import (
    Starter,
    admin_kube,
    controllers,
    eventually,
    in_loop_informer,
    scoped_namespace,
    stays,
    upstream_kube,
    upstream_namespace,
)
from tests.services import widget_crd_body

__all__ = ["Starter", "eventually", "stays", "upstream_kube", "upstream_namespace"]

IDENTITY = "controller-namespace"
FAKE_NODE = "fakenode"
"""A node that does not exist: a pod bound to it stays once deleted gracefully (no kubelet
confirms), until PodGC's 40 s quarantine, longer than a scenario waits for it."""
WITHIN = 60.0
"""Seconds a side may take to reach a scenario's point (a deadline, not a measurement)."""

Snapshot = dict[str, tuple[str, str, str]]
"""A namespace's conditions: type → (status, reason, message)."""


@pytest.fixture(scope="package")
def ns_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local control plane without upstream's namespace-controller (3 kwok nodes)."""
    yield from local_cluster(tmp_path_factory, "ns", controllers="*,-namespace")


@pytest.fixture
def ns_kube(ns_cluster: LocalCluster) -> Iterator[KubeClient]:
    """Admin client of ``ns_cluster`` (the tests' own reads and writes)."""
    yield from admin_kube(ns_cluster, workers=8)


@pytest.fixture
def ns_namespace(ns_kube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace of ``ns_cluster`` for one test (deleted afterwards if the test
    has not)."""
    yield from scoped_namespace(ns_kube, request)


@pytest_asyncio.fixture
async def ns_controllers(ns_cluster: LocalCluster) -> AsyncIterator[Starter]:
    """An informer, and a starter of Steward's namespace controller (ten workers) over
    every namespace as its own identity (``steward:controller:namespace``, bound to the
    ClusterRole of deploy/rbac/controller-namespace.yaml by the control plane); every
    instance is stopped at the end."""
    identity = ns_cluster.component_kubeconfig(IDENTITY)
    async with (
        in_loop_informer(ns_cluster) as informer,
        controllers(CONTROLLER, identity, informer, "", workers=10) as starter,
    ):
        yield starter


@pytest.fixture
def suffix() -> str:
    """A name part for the cluster-wide objects of one test, the same on both sides."""
    return uuid.uuid4().hex[:6]


# Reads and writes -----------------------------------------------------------------------
def namespace_of(kube: KubeClient, ns: str) -> dict[str, Any] | None:
    try:
        return kube.request("GET", f"/api/v1/namespaces/{ns}")
    except NotFoundError:
        return None


def conditions(kube: KubeClient, ns: str) -> Snapshot:
    """The namespace's conditions (empty once it is gone), its own name masked."""
    obj = namespace_of(kube, ns) or {}
    return {
        c["type"]: (
            c.get("status", ""),
            c.get("reason", ""),
            c.get("message", "").replace(ns, "NS"),
        )
        for c in (obj.get("status") or {}).get("conditions") or ()
    }


def exists(kube: KubeClient, path: str) -> bool:
    try:
        kube.request("GET", path)
    except NotFoundError:
        return False
    return True


def delete(kube: KubeClient, path: str, body: dict[str, Any] | None = None) -> None:
    with contextlib.suppress(NotFoundError):
        kube.request("DELETE", path, body)


def drop_finalizers(kube: KubeClient, path: str) -> None:
    with contextlib.suppress(NotFoundError, ConflictError):
        kube.request(
            "PATCH",
            path,
            {"metadata": {"finalizers": None}},
            content_type="application/merge-patch+json",
        )


async def gone(kube: KubeClient, ns: str, within: float = WITHIN) -> None:
    await eventually(lambda: namespace_of(kube, ns) is None, f"namespace {ns} gone", within)


async def served(kube: KubeClient, group: str, version: str) -> None:
    """Until aggregated discovery serves ``group/version`` (a new CRD's types)."""

    async def check() -> bool:
        found = await Discovery(kube).read()
        return any(v == version for v, _ in found.groups.get(group, ()))

    deadline = time.monotonic() + WITHIN
    while not await check():
        assert time.monotonic() < deadline, f"{group}/{version} never served"
        await asyncio.sleep(0.25)


async def stale(kube: KubeClient, gv: str) -> None:
    """Until aggregated discovery reports ``gv`` stale (its API server unavailable)."""
    deadline = time.monotonic() + WITHIN
    while gv not in (await Discovery(kube).read()).failed:
        assert time.monotonic() < deadline, f"{gv} never reported stale"
        await asyncio.sleep(0.25)


# Objects --------------------------------------------------------------------------------
def configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}


def secret(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "stringData": {"k": "v"},
    }


def deployment(name: str, replicas: int = 2) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": "fake"}],
                },
            },
        },
    }


# Scenarios ------------------------------------------------------------------------------
async def plain_content(kube: KubeClient, ns: str, suffix: str) -> Snapshot:
    """ConfigMaps, Secrets and a Deployment (with its ReplicaSet and pods on kwok's nodes):
    all gone, then the namespace. The snapshot is of the namespace just before it went:
    empty on both sides, since it is gone as soon as it is finalized."""
    for i in range(3):
        kube.request("POST", f"/api/v1/namespaces/{ns}/configmaps", configmap(f"cm-{i}"))
        kube.request("POST", f"/api/v1/namespaces/{ns}/secrets", secret(f"secret-{i}"))
    kube.request("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", deployment("web"))
    await eventually(
        lambda: kube.request("GET", f"/api/v1/namespaces/{ns}/pods").get("items") or [],
        "the Deployment's pods",
        WITHIN,
    )
    kube.request("DELETE", f"/api/v1/namespaces/{ns}")
    await eventually(
        lambda: (
            (namespace_of(kube, ns) or {}).get("status", {}).get("phase") in ("Terminating", None)
        ),
        "phase Terminating",
        WITHIN,
    )
    await gone(kube, ns)
    return conditions(kube, ns)


async def custom_resource_with_finalizer(kube: KubeClient, ns: str, suffix: str) -> Snapshot:
    """A custom resource holding a finalizer keeps the namespace with
    ``NamespaceFinalizersRemaining`` (and ``NamespaceContentRemaining``) until the
    finalizer is removed; then the namespace goes. Other content (a ConfigMap) is gone
    meanwhile."""
    group = f"ns-{suffix}.steward.test"
    kube.request(
        "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", widget_crd_body(group)
    )
    widget = f"/apis/{group}/v1/namespaces/{ns}/widgets/held"
    try:
        await served(kube, group, "v1")
        await eventually(lambda: _create_widget(kube, group, ns), "the Widget created", WITHIN)
        kube.request("POST", f"/api/v1/namespaces/{ns}/configmaps", configmap("cm"))
        kube.request("DELETE", f"/api/v1/namespaces/{ns}")
        snapshot = await eventually(
            lambda: _when(conditions(kube, ns), "NamespaceFinalizersRemaining", "True"),
            "NamespaceFinalizersRemaining",
            WITHIN,
        )
        assert not exists(kube, f"/api/v1/namespaces/{ns}/configmaps/cm")
        assert (kube.request("GET", widget).get("metadata") or {}).get("deletionTimestamp")
        assert namespace_of(kube, ns) is not None
        drop_finalizers(kube, widget)
        await gone(kube, ns)
        return snapshot  # type: ignore[no-any-return]
    finally:
        drop_finalizers(kube, widget)
        delete(kube, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.{group}")


def _create_widget(kube: KubeClient, group: str, ns: str) -> bool:
    body = {
        "apiVersion": f"{group}/v1",
        "kind": "Widget",
        "metadata": {"name": "held", "finalizers": ["steward.test/hold"]},
    }
    try:
        kube.request("POST", f"/apis/{group}/v1/namespaces/{ns}/widgets", body)
    except NotFoundError:  # the type is not served yet
        return False
    return True


def _when(snapshot: Snapshot, kind: str, status: str) -> Snapshot | None:
    return snapshot if snapshot.get(kind, ("",))[0] == status else None


async def pods_first(kube: KubeClient, ns: str, suffix: str) -> Snapshot:
    """A pod with a grace period that no kubelet confirms (bound to a node that does not
    exist) stays terminating, and while it does, nothing else of the namespace is deleted
    (upstream's ordered deletion: its ConfigMap stays). The snapshot is of the first
    conditions written then. Once the pod is gone (the test removes it), the rest goes."""
    kube.request("POST", f"/api/v1/namespaces/{ns}/configmaps", configmap("cm"))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "slow"},
        "spec": {
            "nodeName": FAKE_NODE,
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "c", "image": "fake"}],
        },
    }
    kube.request("POST", f"/api/v1/namespaces/{ns}/pods", pod)
    kube.request("DELETE", f"/api/v1/namespaces/{ns}")
    pod_path = f"/api/v1/namespaces/{ns}/pods/slow"
    await eventually(
        lambda: (kube.request("GET", pod_path).get("metadata") or {}).get("deletionTimestamp"),
        "the pod terminating",
        WITHIN,
    )
    snapshot = await eventually(lambda: conditions(kube, ns), "conditions", WITHIN)
    assert exists(kube, f"/api/v1/namespaces/{ns}/configmaps/cm"), "deleted before the pod"
    assert exists(kube, pod_path)
    delete(kube, pod_path, {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})
    await gone(kube, ns)
    return snapshot  # type: ignore[no-any-return]


async def discovery_failure(kube: KubeClient, ns: str, suffix: str) -> Snapshot:
    """An aggregated APIService whose Service has no endpoints is stale in discovery:
    ``NamespaceDeletionDiscoveryFailure``, the rest of the content deleted all the same,
    and the namespace NOT finalized while discovery fails. Once the APIService is gone,
    the namespace goes."""
    group = f"ns-{suffix}.steward.test"
    gv = f"{group}/v1alpha1"
    service = f"/api/v1/namespaces/default/services/nowhere-{suffix}"
    apiservice = f"/apis/apiregistration.k8s.io/v1/apiservices/v1alpha1.{group}"
    kube.request(
        "POST",
        "/api/v1/namespaces/default/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": f"nowhere-{suffix}"},
            "spec": {"ports": [{"port": 443, "targetPort": 8443}]},
        },
    )
    try:
        kube.request(
            "POST",
            "/apis/apiregistration.k8s.io/v1/apiservices",
            {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": f"v1alpha1.{group}"},
                "spec": {
                    "group": group,
                    "version": "v1alpha1",
                    "service": {"namespace": "default", "name": f"nowhere-{suffix}", "port": 443},
                    "insecureSkipTLSVerify": True,
                    "groupPriorityMinimum": 100,
                    "versionPriority": 100,
                },
            },
        )
        await stale(kube, gv)
        kube.request("POST", f"/api/v1/namespaces/{ns}/configmaps", configmap("cm"))
        kube.request("DELETE", f"/api/v1/namespaces/{ns}")
        snapshot = await eventually(
            lambda: _when(conditions(kube, ns), "NamespaceDeletionDiscoveryFailure", "True"),
            "NamespaceDeletionDiscoveryFailure",
            WITHIN,
        )
        await eventually(
            lambda: not exists(kube, f"/api/v1/namespaces/{ns}/configmaps/cm"),
            "the ConfigMap deleted despite the failure",
            WITHIN,
        )
        await stays(lambda: namespace_of(kube, ns) is not None, "namespace kept", 6.0)
        delete(kube, apiservice)
        await gone(kube, ns)
        return snapshot  # type: ignore[no-any-return]
    finally:
        delete(kube, apiservice)
        delete(kube, service)


def ok(*failing: str) -> Snapshot:
    """Every condition in its "ok" form but ``failing`` (filled in by the caller)."""
    return {t: ("False", OK_REASONS[t], OK_MESSAGES[t]) for t in OK_REASONS if t not in failing}


def expected_finalizers(suffix: str) -> Snapshot:
    return {
        **ok("NamespaceContentRemaining", "NamespaceFinalizersRemaining"),
        "NamespaceContentRemaining": (
            "True",
            "SomeResourcesRemain",
            f"Some resources are remaining: widgets.ns-{suffix}.steward.test has 1 resource"
            " instances",
        ),
        "NamespaceFinalizersRemaining": (
            "True",
            "SomeFinalizersRemain",
            "Some content in the namespace has finalizers remaining: steward.test/hold in 1"
            " resource instances",
        ),
    }


def expected_discovery(suffix: str) -> Snapshot:
    gv = f"ns-{suffix}.steward.test/v1alpha1"
    return {
        **ok("NamespaceDeletionDiscoveryFailure"),
        "NamespaceDeletionDiscoveryFailure": (
            "True",
            "DiscoveryFailed",
            "Discovery failed for some groups, 1 failing: unable to retrieve the complete list"
            f" of server APIs: {gv}: stale GroupVersion discovery: {gv}",
        ),
    }


Scenario = Callable[[KubeClient, str, str], Awaitable[Snapshot]]
SCENARIOS: dict[str, Scenario] = {
    "plain_content": plain_content,
    "custom_resource_with_finalizer": custom_resource_with_finalizer,
    "pods_first": pods_first,
    "discovery_failure": discovery_failure,
}
EXPECTED: dict[str, Callable[[str], Snapshot]] = {
    # Gone as soon as it is finalized: no conditions left to read.
    "plain_content": lambda suffix: {},
    "custom_resource_with_finalizer": expected_finalizers,
    # Upstream's early return while pods remain writes the conditions without counting
    # what remains: every one "ok".
    "pods_first": lambda suffix: ok(),
    "discovery_failure": expected_discovery,
}
"""What each scenario's snapshot must be (of its suffix), on either side."""
