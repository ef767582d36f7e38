"""Fixtures and helpers of the taint eviction controller's tests.

Steward's controller runs in this process against ``nodes_cluster`` (where
kube-controller-manager runs no taint eviction), as its own identity with only its RBAC of
``deploy/rbac/``, watching the test's namespace (:func:`evictor`). The session's
``cluster`` runs upstream's.

# Nodes and pods
Each test makes a node of its own (:func:`own_node`) that kwok manages (annotated
``kwok.x-k8s.io/node=fake``: kwok keeps it Ready and runs its pods, and finishes a
deleted pod's deletion), with a ``NoSchedule`` taint of its own (:data:`KEEP_OFF`) so
nothing else lands there; it is deleted afterwards. The test's pods are bound to it by
``spec.nodeName`` and tolerate :data:`KEEP_OFF` (with effect ``NoSchedule`` only, so the
toleration never tolerates a ``NoExecute`` taint); their other tolerations are the
scenario's. The taints a test adds are ``NoExecute`` (or ``NoSchedule``) taints of key
:data:`EVICT`.

# Seeing a deletion
kwok removes a deleted pod at once (finalizers and all), so a test watches its namespace's
pods from before the pods exist (:class:`PodWatch`, the API server's own watch) and reads
what each pod was when it was marked for deletion: its first state with a
``deletionTimestamp``, which must carry the ``DisruptionTarget`` condition the controller
wrote before its delete.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

import orjson
import pytest_asyncio
import urllib3

from steward.cluster import LocalCluster
from steward.controllers.tainteviction.controller import CONTROLLER
from steward.kube import ConflictError, KubeClient, NotFoundError, pool_manager
from tests.controllers.harness import Running, controllers, in_loop_informer

KEEP_OFF = {"key": "steward.test/taint-eviction", "value": "only", "effect": "NoSchedule"}
"""The taint of the test's own node that keeps every other pod off it."""
KEEP_OFF_TOLERATION = {**KEEP_OFF, "operator": "Equal"}
"""The test's pods' toleration of :data:`KEEP_OFF` (of ``NoSchedule`` only)."""
EVICT = "steward.test/evict"
"""The key of the taints the tests add."""
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
WITHIN = 30.0
"""Seconds a deletion may take to be seen (a deadline, not a measurement)."""


def no_execute(value: str = "yes") -> dict[str, str]:
    """The scenario's ``NoExecute`` taint."""
    return {"key": EVICT, "value": value, "effect": "NoExecute"}


def tolerate(
    value: str | None = None, seconds: int | None = None, effect: str = "NoExecute"
) -> dict[str, Any]:
    """A toleration of :data:`EVICT`: of its ``value`` (Equal), or of any (Exists), for
    ``seconds`` or forever."""
    toleration: dict[str, Any] = {"key": EVICT, "effect": effect}
    if value is None:
        toleration["operator"] = "Exists"
    else:
        toleration |= {"operator": "Equal", "value": value}
    if seconds is not None:
        toleration["tolerationSeconds"] = seconds
    return toleration


# Nodes ------------------------------------------------------------------------------------
def node_body(name: str) -> dict[str, Any]:
    """A node kwok manages, with :data:`KEEP_OFF`."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
            "annotations": {KWOK_ANNOTATION: "fake"},
        },
        "spec": {"taints": [dict(KEEP_OFF)]},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
        },
    }


@contextlib.contextmanager
def own_node(kube: KubeClient) -> Iterator[str]:
    """A node of the test's own (see the module docs), deleted afterwards."""
    name = f"eviction-{uuid.uuid4().hex[:8]}"
    kube.request("POST", "/api/v1/nodes", node_body(name))
    try:
        yield name
    finally:
        with contextlib.suppress(NotFoundError):
            kube.request("DELETE", f"/api/v1/nodes/{name}")


def set_taints(kube: KubeClient, node: str, *taints: dict[str, str]) -> None:
    """Make the node's taints :data:`KEEP_OFF` and ``taints``."""
    for _ in range(10):
        current = kube.request("GET", f"/api/v1/nodes/{node}")
        current["spec"]["taints"] = [dict(KEEP_OFF), *(dict(t) for t in taints)]
        try:
            kube.request("PUT", f"/api/v1/nodes/{node}", current)
            return
        except ConflictError:  # kwok writes the node's status meanwhile
            continue
    raise AssertionError(f"could not set the taints of node {node}")


# Pods -------------------------------------------------------------------------------------
def pod_body(name: str, node: str, tolerations: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """A pod bound to ``node`` tolerating :data:`KEEP_OFF` and ``tolerations``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "taint-eviction-test"}},
        "spec": {
            "nodeName": node,
            "tolerations": [dict(KEEP_OFF_TOLERATION), *tolerations],
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }


def make_pods(
    kube: KubeClient, ns: str, node: str, pods: Mapping[str, Sequence[dict[str, Any]]]
) -> None:
    """Create each pod of ``pods`` (name: its tolerations) on ``node``, once the
    namespace's default ServiceAccount exists (pods are refused until then)."""
    deadline = time.monotonic() + WITHIN
    while True:
        try:
            kube.request("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")
            break
        except NotFoundError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    for name, tolerations in pods.items():
        kube.request("POST", f"/api/v1/namespaces/{ns}/pods", pod_body(name, node, tolerations))


def present(kube: KubeClient, ns: str, name: str) -> bool:
    """Whether the pod exists and is not being deleted."""
    try:
        pod = kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
    except NotFoundError:
        return False
    return not pod["metadata"].get("deletionTimestamp")


def disruption(pod: dict[str, Any] | None) -> dict[str, Any] | None:
    """The pod's ``DisruptionTarget`` condition, its time left out (it differs by run)."""
    for condition in ((pod or {}).get("status") or {}).get("conditions") or ():
        if condition.get("type") == "DisruptionTarget":
            return {k: v for k, v in condition.items() if k != "lastTransitionTime"}
    return None


def eviction_events(kube: KubeClient, ns: str) -> list[tuple[str, ...]]:
    """The namespace's ``TaintManagerEviction`` Events as (type, involved kind, involved
    name, message with the namespace masked, source component, count), sorted."""
    listing = kube.request(
        "GET", f"/api/v1/namespaces/{ns}/events?fieldSelector=reason%3DTaintManagerEviction"
    )
    return sorted(
        (
            event.get("type", ""),
            event["involvedObject"].get("kind", ""),
            event["involvedObject"].get("name", ""),
            event.get("message", "").replace(ns, "<ns>"),
            (event.get("source") or {}).get("component", ""),
            str(event.get("count", "")),
        )
        for event in listing.get("items", [])
    )


def marking(name: str) -> str:
    return f"Marking for deletion Pod <ns>/{name}"


def cancelling(name: str) -> str:
    return f"Cancelling deletion of Pod <ns>/{name}"


def messages(kube: KubeClient, ns: str) -> list[str]:
    """The messages of :func:`eviction_events`, sorted."""
    return sorted(event[3] for event in eviction_events(kube, ns))


class PodWatch:
    """The API server's watch of one namespace's pods, in a thread, from the moment it is
    made: each pod's first state marked for deletion (:meth:`marked`) and whether it is
    gone (:meth:`gone`)."""

    def __init__(self, kube: KubeClient, ns: str) -> None:
        self.kube = kube
        self.path = f"/api/v1/namespaces/{ns}/pods"
        self._marked: dict[str, dict[str, Any]] = {}
        self._deleted: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pool = pool_manager(kube.access, num_pools=1, maxsize=1)
        self._version = kube.request("GET", self.path)["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        headers = {"Accept": "application/json"}
        token = self.kube.access.token() if self.kube.access.token is not None else None
        if token:
            headers["Authorization"] = token
        while not self._stop.is_set():
            url = (
                f"{self.kube.access.host}{self.path}?watch=1&allowWatchBookmarks=true"
                f"&timeoutSeconds=2&resourceVersion={self._version}"
            )
            try:
                response = self._pool.request(
                    "GET",
                    url,
                    headers=headers,
                    preload_content=False,
                    timeout=urllib3.Timeout(connect=5.0, read=10.0),
                )
                for line in response:
                    if line.strip():
                        self._seen(orjson.loads(line))
                response.release_conn()
            except (urllib3.exceptions.HTTPError, OSError):
                self._stop.wait(0.2)

    def _seen(self, event: dict[str, Any]) -> None:
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        if meta.get("resourceVersion"):
            self._version = meta["resourceVersion"]
        name = meta.get("name", "")
        with self._lock:
            known = event.get("type") in ("ADDED", "MODIFIED", "DELETED")
            if known and meta.get("deletionTimestamp") and name not in self._marked:
                self._marked[name] = obj
            if event.get("type") == "DELETED":
                self._deleted.add(name)

    def marked(self, name: str) -> dict[str, Any] | None:
        """The pod as it was first seen marked for deletion, if it was."""
        with self._lock:
            return self._marked.get(name)

    def gone(self, name: str) -> bool:
        """Whether the pod was marked for deletion (it is gone, or about to be)."""
        return self.marked(name) is not None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)
        self._pool.clear()


@contextlib.contextmanager
def pod_watch(kube: KubeClient, ns: str) -> Iterator[PodWatch]:
    """A :class:`PodWatch` of ``ns`` while the block runs."""
    watch = PodWatch(kube, ns)
    try:
        yield watch
    finally:
        watch.close()


# Steward's controller ---------------------------------------------------------------------
@pytest_asyncio.fixture
async def evictor(nodes_cluster: LocalCluster, nodes_namespace: str) -> AsyncIterator[Running]:
    """Steward's taint eviction controller on ``nodes_cluster`` (in this event loop, eight
    workers as upstream, its own identity), watching the test's namespace's pods and every
    node; stopped at the end."""
    async with (
        in_loop_informer(nodes_cluster) as informer,
        controllers(
            CONTROLLER,
            nodes_cluster.component_kubeconfig("controller-taint-eviction-controller"),
            informer,
            nodes_namespace,
            workers=8,
        ) as starter,
    ):
        yield starter.start()
