"""The disruption controller's scenarios: the reads and writes of one side
(:class:`Side`), what is compared of a budget (:func:`masked`), and the drain of a node
as ``kubectl drain`` does it (:func:`drain`, :func:`drain_blocked_then_allowed`), which
takes only an API client and a node name so that it can run against a real node too.

Everything here is synchronous (the admin's :class:`~steward.kube.KubeClient`); a test
runs it in a thread (``asyncio.to_thread``) or two sides at once (:func:`both`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from steward.kube import ApiError, ApiUnavailableError, KubeClient, NotFoundError
from tests.controllers import harness

T = TypeVar("T")
Obj = dict[str, Any]

GROUP = "disruption.steward.test"
"""The group of the custom resource with a ``scale`` subresource (``Scalable``)."""
IMAGE = "registry.k8s.io/pause:3.10.2"
"""The containers' image (kwok runs nothing; a real node runs the pause container)."""
NOBODY = "steward.test/nobody"
"""A scheduler no one runs: a pod that names it stays Pending, bound to no node, and no
kwok node writes its status."""


def both(work: Callable[[Side], T], steward: Side, upstream: Side) -> tuple[T, T]:
    """``work`` on both sides at once (threads): Steward's result, then upstream's."""
    with ThreadPoolExecutor(2) as pool:
        ours, theirs = pool.map(work, (steward, upstream))
    return ours, theirs


def wait(check: Callable[[], Any], what: str, within: float = 60.0) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` and the
    last value after ``within`` seconds."""
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def ago(seconds: float) -> str:
    """A time ``seconds`` before now, as the API server writes it."""
    return (datetime.now(UTC) - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


# What is compared ------------------------------------------------------------------------
def masked(status: Obj) -> Obj:
    """A budget's status without what differs by nature between two runs: the condition's
    ``lastTransitionTime``, and the ``disruptedPods`` map reduced to its size (pod names
    of workloads are random, the times are the eviction's)."""
    out = {k: v for k, v in status.items() if k not in ("conditions", "disruptedPods")}
    out["conditions"] = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"}
        for c in status.get("conditions") or ()
    ]
    out["disruptedPods"] = len(status.get("disruptedPods") or {})
    return out


def masked_events(events: list[Obj]) -> set[tuple[str, str, str, str]]:
    """(kind, type, reason, message) of Events, the messages of Events on pods masked (a
    workload's pod names are random; ``NotDeleted`` names the budget as
    ``namespace/name`` here and ``namespace/namespace`` upstream)."""
    out = set()
    for e in events:
        kind = (e.get("involvedObject") or {}).get("kind", "")
        message = e.get("message", "") if kind != "Pod" else "*"
        out.add((kind, e.get("type", ""), e.get("reason", ""), message))
    return out


# One side --------------------------------------------------------------------------------
@dataclass
class Side(harness.Side):
    """One side of a scenario (see :class:`tests.controllers.harness.Side`): workloads,
    pods, budgets and evictions in its namespace."""

    crd_ready: bool = field(default=False)

    # Paths
    @property
    def core(self) -> str:
        return f"/api/v1/namespaces/{self.ns}"

    @property
    def apps(self) -> str:
        return f"/apis/apps/v1/namespaces/{self.ns}"

    @property
    def policy(self) -> str:
        return f"/apis/policy/v1/namespaces/{self.ns}/poddisruptionbudgets"

    @property
    def scalables(self) -> str:
        return f"/apis/{GROUP}/v1/namespaces/{self.ns}/scalables"

    # Workloads
    @staticmethod
    def template(labels: dict[str, str], **spec: Any) -> Obj:
        return {
            "metadata": {"labels": labels},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "main", "image": IMAGE}],
                **spec,
            },
        }

    def workload(self, kind: str, name: str, replicas: int, **spec: Any) -> Obj:
        """A Deployment, ReplicaSet or StatefulSet ``name`` of ``replicas`` pods labelled
        ``app: <name>``."""
        labels = {"app": name}
        body: Obj = {
            "apiVersion": "apps/v1",
            "kind": kind,
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": self.template(labels),
                **spec,
            },
        }
        if kind == "StatefulSet":
            body["spec"].setdefault("serviceName", name)
            body["spec"].setdefault("podManagementPolicy", "Parallel")
        plural = kind.lower() + "s"
        created: Obj = self.kube.request("POST", f"{self.apps}/{plural}", body)
        return created

    def replication_controller(self, name: str, replicas: int) -> Obj:
        labels = {"app": name}
        body = {
            "apiVersion": "v1",
            "kind": "ReplicationController",
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": labels, "template": self.template(labels)},
        }
        created: Obj = self.kube.request("POST", f"{self.core}/replicationcontrollers", body)
        return created

    def scale_deployment(self, name: str, replicas: int) -> None:
        self.kube.request(
            "PATCH",
            f"{self.apps}/deployments/{name}/scale",
            {"spec": {"replicas": replicas}},
            content_type="application/merge-patch+json",
        )

    def ensure_crd(self) -> None:
        """The cluster-wide CRD of ``Scalable`` (``spec.replicas`` behind a ``scale``
        subresource), made once per plane and left there (it has no objects outside the
        tests' namespaces, which go)."""
        name = f"scalables.{GROUP}"
        with contextlib.suppress(ApiError):
            self.kube.request(
                "POST",
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                {
                    "apiVersion": "apiextensions.k8s.io/v1",
                    "kind": "CustomResourceDefinition",
                    "metadata": {"name": name},
                    "spec": {
                        "group": GROUP,
                        "scope": "Namespaced",
                        "names": {
                            "plural": "scalables",
                            "singular": "scalable",
                            "kind": "Scalable",
                        },
                        "versions": [
                            {
                                "name": "v1",
                                "served": True,
                                "storage": True,
                                "schema": {
                                    "openAPIV3Schema": {
                                        "type": "object",
                                        "x-kubernetes-preserve-unknown-fields": True,
                                    }
                                },
                                "subresources": {
                                    "status": {},
                                    "scale": {
                                        "specReplicasPath": ".spec.replicas",
                                        "statusReplicasPath": ".status.replicas",
                                    },
                                },
                            }
                        ],
                    },
                },
            )

        def established() -> bool:
            crd = self.kube.request(
                "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            )
            conditions = (crd.get("status") or {}).get("conditions") or ()
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        wait(established, f"{self.name}: CRD {name} established")

    def scalable(self, name: str, replicas: int) -> Obj:
        """A ``Scalable`` ``name`` whose scale says ``replicas`` (no controller makes its
        pods: :meth:`pod` does, with it as owner)."""
        self.ensure_crd()
        body = {
            "apiVersion": f"{GROUP}/v1",
            "kind": "Scalable",
            "metadata": {"name": name},
            "spec": {"replicas": replicas},
        }
        created: Obj = wait(
            lambda: self._create_quietly(self.scalables, body), f"{self.name}: Scalable {name}"
        )
        return created

    def _create_quietly(self, path: str, body: Obj) -> Obj | None:
        try:
            created: Obj = self.kube.request("POST", path, body)
            return created
        except NotFoundError:  # the CRD's path is not served yet
            return None

    def configmap(self, name: str) -> Obj:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
        created: Obj = self.kube.request("POST", f"{self.core}/configmaps", body)
        return created

    def pod(
        self,
        name: str,
        labels: dict[str, str],
        owner: Obj | None = None,
        *,
        scheduler: str = "",
    ) -> Obj:
        """A pod ``name``, controlled by ``owner`` when given."""
        meta: Obj = {"name": name, "labels": labels}
        if owner is not None:
            meta["ownerReferences"] = [
                {
                    "apiVersion": owner["apiVersion"],
                    "kind": owner["kind"],
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                }
            ]
        spec = self.template(labels)["spec"]
        if scheduler:
            spec["schedulerName"] = scheduler
        created: Obj = self.kube.request(
            "POST",
            f"{self.core}/pods",
            {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec},
        )
        return created

    def set_pod_conditions(self, name: str, conditions: list[Obj]) -> None:
        self.kube.request(
            "PATCH",
            f"{self.core}/pods/{name}/status",
            {"status": {"conditions": conditions}},
            content_type="application/strategic-merge-patch+json",
        )

    def pods(self, labels: dict[str, str] | None = None) -> list[Obj]:
        query = ""
        if labels:
            query = "?labelSelector=" + ",".join(f"{k}%3D{v}" for k, v in labels.items())
        found = self.kube.request("GET", f"{self.core}/pods{query}")
        return sorted(found.get("items") or [], key=lambda p: p["metadata"]["name"])

    def ready(self, labels: dict[str, str], count: int) -> bool:
        """Whether exactly ``count`` pods with ``labels`` are Ready and none is being
        deleted."""
        pods = self.pods(labels)
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        ready = [p for p in live if _is_ready(p)]
        return len(pods) == count and len(ready) == count

    def pod_condition(self, name: str, kind: str) -> Obj:
        pod = self.kube.request("GET", f"{self.core}/pods/{name}")
        conditions = (pod.get("status") or {}).get("conditions") or ()
        return next((c for c in conditions if c.get("type") == kind), {})

    # Budgets
    def budget(self, name: str, selector: dict[str, Any] | None, **spec: Any) -> Obj:
        body: Obj = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name},
            "spec": {**spec},
        }
        if selector is not None:
            body["spec"]["selector"] = selector
        created: Obj = self.kube.request("POST", self.policy, body)
        return created

    def get_budget(self, name: str) -> Obj:
        found: Obj = self.kube.request("GET", f"{self.policy}/{name}")
        return found

    def status(self, name: str) -> Obj:
        return dict(self.get_budget(name).get("status") or {})

    def synced(self, name: str, **expected: Any) -> Obj | None:
        """The budget's status once it has seen its generation and its fields are
        ``expected``; else None."""
        budget = self.get_budget(name)
        status = budget.get("status") or {}
        if status.get("observedGeneration") != budget["metadata"]["generation"]:
            return None
        if any(status.get(k, 0 if k != "disruptedPods" else {}) != v for k, v in expected.items()):
            return None
        return dict(status)

    def synced_touching(self, name: str, within: float = 60.0, **expected: Any) -> Obj:
        """:meth:`synced`, waited on, the budget's labels touched every 3 seconds until
        then (an update: its controller syncs it again)."""
        deadline = time.monotonic() + within
        touched = time.monotonic()
        while time.monotonic() < deadline:
            status = self.synced(name, **expected)
            if status is not None:
                return status
            if time.monotonic() - touched > 3:
                touched = time.monotonic()
                self.kube.request(
                    "PATCH",
                    f"{self.policy}/{name}",
                    {"metadata": {"labels": {"touched": str(int(touched))}}},
                    content_type="application/merge-patch+json",
                )
            time.sleep(0.2)
        raise AssertionError(f"{self.name}: budget {name} never reached {expected}")

    def write_status(self, name: str, change: Callable[[Obj], None]) -> None:
        def edit(budget: Obj) -> None:
            budget["status"] = dict(budget.get("status") or {})
            change(budget["status"])

        path = f"{self.policy}/{name}"
        harness.update(self.kube, path, edit, f"{path}: status", subresource="/status")

    def evict(self, pod: str) -> str:
        """Evict ``pod`` through the eviction API: ``"evicted"``, ``"blocked"`` (429: a
        budget refuses), or ``"gone"`` (404)."""
        return evict(self.kube, self.ns, pod)

    def events(self) -> list[Obj]:
        found = self.kube.request("GET", f"{self.core}/events")
        return list(found.get("items") or [])

    def reasons(self, kind: str, name: str) -> set[str]:
        return {
            e.get("reason", "")
            for e in self.events()
            if (e.get("involvedObject") or {}).get("kind") == kind
            and (e.get("involvedObject") or {}).get("name") == name
        }


def _is_ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


# Evictions and drains ----------------------------------------------------------------------
def evict(kube: KubeClient, namespace: str, pod: str) -> str:
    """Evict one pod through the eviction API (``pods/eviction``): ``"evicted"``,
    ``"blocked"`` (429: a budget allows no disruption now, or its status is not current),
    or ``"gone"`` (404). Any other error is raised."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": namespace},
    }
    try:
        kube.request("POST", f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction", body)
    except NotFoundError:
        return "gone"
    except ApiUnavailableError as err:
        if "HTTP 429" in str(err):
            return "blocked"
        raise
    return "evicted"


def cordon(kube: KubeClient, node: str, unschedulable: bool = True) -> None:
    kube.request(
        "PATCH",
        f"/api/v1/nodes/{node}",
        {"spec": {"unschedulable": unschedulable or None}},
        content_type="application/merge-patch+json",
    )


@dataclass
class Drain:
    """What a drain did: each eviction's outcome in order (``(pod, outcome)``), and
    whether the node was left empty."""

    attempts: list[tuple[str, str]] = field(default_factory=list)
    emptied: bool = False

    @property
    def blocked(self) -> int:
        return sum(1 for _, outcome in self.attempts if outcome == "blocked")

    @property
    def evicted(self) -> list[str]:
        return [pod for pod, outcome in self.attempts if outcome == "evicted"]


def _drained_pods(kube: KubeClient, node: str, namespace: str) -> list[Obj]:
    """The pods ``kubectl drain`` evicts from ``node`` (in ``namespace``, empty: all): not
    of a DaemonSet, not mirror pods, not finished."""
    base = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
    found = kube.request("GET", f"{base}?fieldSelector=spec.nodeName%3D{node}")
    pods = []
    for pod in found.get("items") or ():
        meta = pod["metadata"]
        if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
            continue
        if any(r.get("kind") == "DaemonSet" for r in meta.get("ownerReferences") or ()):
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        pods.append(pod)
    return pods


def drain(
    kube: KubeClient,
    node: str,
    *,
    namespace: str = "",
    within: float = 60.0,
    retry_every: float = 0.5,
    on_blocked: Callable[[], None] | None = None,
) -> Drain:
    """Drain ``node`` as ``kubectl drain`` does: cordon it, then evict each of its pods
    (of ``namespace``, empty: every namespace) through the eviction API, again after
    ``retry_every`` seconds while a budget refuses (429), until no pod is left on it or
    ``within`` seconds have passed. ``on_blocked`` runs once, at the first refusal (a test
    makes room there). The node stays cordoned."""
    cordon(kube, node)
    result = Drain()
    deadline = time.monotonic() + within
    told = False
    while time.monotonic() < deadline:
        pods = _drained_pods(kube, node, namespace)
        if not pods:
            result.emptied = True
            break
        for pod in pods:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                continue  # evicted already; kubectl drain waits for it to go
            outcome = evict(kube, meta["namespace"], meta["name"])
            result.attempts.append((meta["name"], outcome))
            if outcome == "blocked" and not told and on_blocked is not None:
                told = True
                on_blocked()
        time.sleep(retry_every)
    return result


def drain_blocked_then_allowed(
    kube: KubeClient,
    namespace: str,
    node: str,
    *,
    within: float = 90.0,
    tolerations: Sequence[Obj] = (),
) -> tuple[Drain, Obj]:
    """ "A drain blocked then allowed by a PDB", on ``node`` (a kwok node, or a real one):
    a Deployment ``drained`` of one pod that prefers ``node`` and a budget
    ``minAvailable: 1`` over it (no disruption allowed); the node is drained (cordoned,
    its pods evicted, 429 retried), which the budget blocks, until the Deployment is
    scaled to two at the first refusal: the new pod goes elsewhere (the node is cordoned),
    once it is Ready the budget allows one disruption and the drain evicts the first pod.
    ``tolerations``: the pods', for a node with a taint of its own (a real node).
    Returns the drain and the budget's final status; the node is uncordoned after."""
    labels = {"app": "drained"}
    affinity = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "preference": {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
                        ]
                    },
                }
            ]
        }
    }
    deployments = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    kube.request(
        "POST",
        deployments,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "drained"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": Side.template(
                    labels,
                    affinity=affinity,
                    **({"tolerations": list(tolerations)} if tolerations else {}),
                ),
            },
        },
    )
    pods = f"/api/v1/namespaces/{namespace}/pods?labelSelector=app%3Ddrained"

    def placed() -> bool:
        items: list[Obj] = kube.request("GET", pods).get("items") or []
        return len(items) == 1 and items[0]["spec"].get("nodeName") == node and _is_ready(items[0])

    wait(placed, f"the pod of drained Ready on {node}")
    policy = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"
    kube.request(
        "POST",
        policy,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "drained"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
        },
    )

    def blocking() -> bool:
        budget = kube.request("GET", f"{policy}/drained")
        status = budget.get("status") or {}
        return status.get("observedGeneration") == budget["metadata"]["generation"] and (
            status.get("currentHealthy") == 1
        )

    wait(blocking, "the budget drained synced")

    def make_room() -> None:
        kube.request(
            "PATCH",
            f"{deployments}/drained/scale",
            {"spec": {"replicas": 2}},
            content_type="application/merge-patch+json",
        )

    try:
        done = drain(kube, node, namespace=namespace, within=within, on_blocked=make_room)
    finally:
        cordon(kube, node, False)
    final = dict(kube.request("GET", f"{policy}/drained").get("status") or {})
    return done, final
