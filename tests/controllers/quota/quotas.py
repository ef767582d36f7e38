"""Fixtures and scenarios of the resourcequota tests.

Steward's controller runs on a loop of its own (:class:`~tests.controllers.harness.
ControllerHost`, one informer for the package) against ``quota_cluster``, as its own
identity with only its RBAC of ``deploy/rbac/``, watching one test's namespace at a time;
the session's ``cluster`` runs upstream's. The tests read and write synchronously.

# The scenario
:func:`scenario` makes the same quotas and objects on a side (a cluster's admin client and
a namespace there), waits for every quota's status to reach the usage upstream's
evaluators give (spelled out here, so either side failing says which), changes objects and
a quota's ``hard``, waits again, and returns the statuses at both points. The
differential test runs it on both sides and compares the two.

Pods stay Pending (a node selector no node matches): nothing but the test changes them,
and deleting one is immediate. Claims stay Pending too (no such storage class); the test
writes the status a resize leaves (``status.allocatedResources``) itself.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from steward.cluster import LocalCluster
from steward.controllers.resourcequota.controller import CONTROLLER
from steward.kube import ApiStatusError, KubeClient, NotFoundError
from tests.controllers.harness import ControllerHost, hosted, update

IDENTITY = "controller-resourcequota"
"""The controller's identity in the local control plane (its RBAC file's name)."""
WORKERS = 2
WITHIN = 30.0
"""Seconds a side may take to reach a point of a scenario (a deadline, not a measurement)."""
NOWHERE = {"steward.test/nowhere": "true"}
"""A node selector no node matches: pods stay Pending and unbound."""


@pytest.fixture(scope="package")
def quota_host(quota_cluster: LocalCluster) -> Iterator[ControllerHost]:
    """Steward's informer of ``quota_cluster`` and its resourcequota controller (started
    per test, for the test's namespace)."""
    yield from hosted(quota_cluster, CONTROLLER, IDENTITY, workers=WORKERS)


@pytest.fixture
def steward_ns(quota_host: ControllerHost, quota_namespace: str) -> Iterator[str]:
    """``quota_namespace`` with Steward's controller watching it while the test runs."""
    quota_host.start(quota_namespace)
    try:
        yield quota_namespace
    finally:
        quota_host.stop_controller()


# Reads and writes ------------------------------------------------------------------------
def path(ns: str, plural: str, name: str = "", group: str = "", version: str = "v1") -> str:
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    return f"{base}/namespaces/{ns}/{plural}" + (f"/{name}" if name else "")


def create(kube: KubeClient, url: str, body: dict[str, Any], within: float = WITHIN) -> Any:
    """POST ``body``, retried while the namespace's default ServiceAccount is missing."""
    deadline = time.monotonic() + within
    while True:
        try:
            return kube.request("POST", url, body)
        except ApiStatusError as err:
            if "serviceaccount" not in str(err).lower() or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def delete(kube: KubeClient, url: str) -> None:
    with contextlib.suppress(NotFoundError):
        kube.request("DELETE", url)


def quota(name: str, hard: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"hard": hard, **spec}}


def status_of(kube: KubeClient, ns: str, name: str) -> dict[str, Any]:
    got = kube.request("GET", path(ns, "resourcequotas", name))
    return dict(got.get("status") or {})


def has_status(kube: KubeClient, ns: str, name: str) -> Callable[[], bool]:
    """Whether quota ``name`` has a status with ``used`` (admission then counts with it)."""
    return lambda: status_of(kube, ns, name).get("used") is not None


def wait_for(side: str, check: Callable[[], Any], what: str, within: float = WITHIN) -> Any:
    deadline = time.monotonic() + within
    last: Any = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{side}: timed out waiting for {what} (last: {last!r})")
        time.sleep(0.2)


def wait_used(
    side: str, kube: KubeClient, ns: str, name: str, used: dict[str, str], within: float = WITHIN
) -> dict[str, Any]:
    """Wait until quota ``name``'s status is ``spec.hard`` and ``used``, exactly."""
    last: dict[str, Any] = {}

    def check() -> bool:
        nonlocal last
        got = kube.request("GET", path(ns, "resourcequotas", name))
        last = dict(got.get("status") or {})
        return last.get("used") == used and last.get("hard") == got["spec"]["hard"]

    try:
        wait_for(side, check, f"quota {name}", within)
    except AssertionError:
        raise AssertionError(
            f"{side}: quota {name}: want used {used}, last status {last}"
        ) from None
    return last


def pod(name: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": list(containers) or [{"name": "c", "image": "busybox"}],
            "nodeSelector": NOWHERE,
            "terminationGracePeriodSeconds": 0,
            **spec,
        },
    }


def box(name: str, requests: dict[str, str], limits: dict[str, str]) -> dict[str, Any]:
    return {
        "name": name,
        "image": "busybox",
        "resources": {"requests": requests, "limits": limits},
    }


def fail_pod(kube: KubeClient, ns: str, name: str) -> None:
    """Set a pod's phase to Failed (its status subresource), as a kubelet would."""

    def failed(got: dict[str, Any]) -> None:
        got["status"] = {**(got.get("status") or {}), "phase": "Failed"}

    update(
        kube, path(ns, "pods", name), failed, f"cannot fail pod {ns}/{name}", subresource="/status"
    )


def patch_status(kube: KubeClient, url: str, status: dict[str, Any]) -> dict[str, Any]:
    """Merge ``status`` into the status subresource of the object at ``url`` (as an admin
    writing over whoever owns it); the object as written."""
    return dict(
        kube.request(
            "PATCH",
            url + "/status",
            {"status": status},
            content_type="application/merge-patch+json",
        )
    )


# The scenario ----------------------------------------------------------------------------
@dataclass
class Side:
    """One side: its name, admin client and namespace; cluster-scoped objects the
    scenario made there (deleted by :meth:`cleanup`)."""

    name: str
    kube: KubeClient
    ns: str
    cluster_objects: list[str] = field(default_factory=list)

    def cleanup(self) -> None:
        for url in self.cluster_objects:
            delete(self.kube, url)


COMPUTE_HARD = {
    "pods": "20",
    "count/pods": "20",
    "requests.ephemeral-storage": "10Gi",
    "limits.ephemeral-storage": "10Gi",
    "hugepages-2Mi": "1Gi",
    "requests.hugepages-2Mi": "1Gi",
    "requests.example.com/gpu": "8",
}
NOT_BEST_EFFORT_HARD = {
    "pods": "10",
    "cpu": "10",
    "memory": "10Gi",
    "requests.cpu": "10",
    "requests.memory": "10Gi",
    "limits.cpu": "10",
    "limits.memory": "10Gi",
}
OBJECTS_HARD = {
    "services": "10",
    "services.nodeports": "10",
    "services.loadbalancers": "5",
    "persistentvolumeclaims": "10",
    "requests.storage": "100Gi",
    "gold.storageclass.storage.k8s.io/requests.storage": "50Gi",
    "gold.storageclass.storage.k8s.io/persistentvolumeclaims": "5",
    "configmaps": "10",
    "secrets": "10",
    "replicationcontrollers": "5",
    "resourcequotas": "10",
    "count/deployments.apps": "5",
    "count/jobs.batch": "5",
    "count/widgets.nowhere.steward.test": "5",  # served by no one: never in used
}


def _quotas(priority_class: str) -> list[dict[str, Any]]:
    def selector(scope: str, operator: str, values: list[str] | None = None) -> dict[str, Any]:
        expr: dict[str, Any] = {"scopeName": scope, "operator": operator}
        if values is not None:
            expr["values"] = values
        return {"matchExpressions": [expr]}

    return [
        quota("compute", COMPUTE_HARD),
        quota("not-best-effort", NOT_BEST_EFFORT_HARD, scopes=["NotBestEffort"]),
        quota("best-effort", {"pods": "10"}, scopes=["BestEffort"]),
        quota("terminating", {"pods": "10"}, scopes=["Terminating"]),
        quota("not-terminating", {"pods": "10"}, scopes=["NotTerminating"]),
        quota(
            "priority",
            {"pods": "10"},
            scopeSelector=selector("PriorityClass", "In", [priority_class]),
        ),
        quota(
            "cross-namespace",
            {"pods": "10"},
            scopeSelector=selector("CrossNamespacePodAffinity", "Exists"),
        ),
        quota("objects", OBJECTS_HARD),  # last: it counts the others
    ]


ALLOCATED_GROWN = {"allocatedResources": {"storage": "2Gi"}}
"""The status of claim ``grown`` (requesting 1Gi): 2Gi allocated, charged."""
ALLOCATED_NONE = {"allocatedResources": {"storage": "100Mi"}}
"""The status of claim ``none`` (requesting 500Mi): less allocated, the request charged."""


def _make_objects(side: Side, priority_class: str) -> None:
    kube, ns = side.kube, side.ns
    pods = path(ns, "pods")
    create(kube, pods, pod("best"))
    burst = box(
        "c",
        {"cpu": "250m", "memory": "64Mi", "ephemeral-storage": "1Gi"},
        {"cpu": "500m", "memory": "128Mi"},
    )
    init = box("i", {"cpu": "1", "memory": "32Mi"}, {"cpu": "1", "memory": "64Mi"})
    create(kube, pods, pod("burst", burst, initContainers=[init]))
    exact = {"cpu": "500m", "memory": "128Mi", "hugepages-2Mi": "4Mi", "example.com/gpu": "2"}
    side_exact = {"cpu": "100m", "memory": "32Mi"}
    sidecar = {**box("side", side_exact, side_exact), "restartPolicy": "Always"}
    create(kube, pods, pod("guaranteed", box("c", exact, exact), initContainers=[sidecar]))
    level = {"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"cpu": "2", "memory": "512Mi"}}
    create(kube, pods, pod("pod-level", resources=level))
    create(kube, pods, pod("deadline", activeDeadlineSeconds=3600))
    create(kube, pods, pod("priority", priorityClassName=priority_class))
    term = {"topologyKey": "kubernetes.io/hostname", "namespaces": ["elsewhere"]}
    affinity = {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": term}
            ]
        }
    }
    create(kube, pods, pod("affinity", affinity=affinity))
    create(kube, pods, pod("done"))
    fail_pod(kube, ns, "done")

    services = path(ns, "services")
    port = {"port": 80, "targetPort": 80}
    create(kube, services, {"metadata": {"name": "cip"}, "spec": {"ports": [port]}})
    two = [{"name": "a", "port": 80}, {"name": "b", "port": 81}]
    np_spec = {"type": "NodePort", "ports": two}
    create(kube, services, {"metadata": {"name": "np"}, "spec": np_spec})
    create(
        kube,
        services,
        {"metadata": {"name": "lb"}, "spec": {"type": "LoadBalancer", "ports": [port]}},
    )
    lb_spec = {"type": "LoadBalancer", "ports": two, "allocateLoadBalancerNodePorts": False}
    create(kube, services, {"metadata": {"name": "lb-no-np"}, "spec": lb_spec})

    claims = path(ns, "persistentvolumeclaims")

    def claim(name: str, klass: str, size: str) -> dict[str, Any]:
        spec = {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": klass,
            "resources": {"requests": {"storage": size}},
        }
        return {"metadata": {"name": name}, "spec": spec}

    create(kube, claims, claim("gold", "gold", "1Gi"))
    create(kube, claims, claim("none", "", "500Mi"))
    # Resizes under way: a claim whose volume grew past its request is charged what its
    # status allocated (RecoverVolumeExpansionFailure, locked on since 1.34); one whose
    # status allocated less, its request.
    create(kube, claims, claim("grown", "gold", "1Gi"))
    patch_status(kube, path(ns, "persistentvolumeclaims", "grown"), ALLOCATED_GROWN)
    patch_status(kube, path(ns, "persistentvolumeclaims", "none"), ALLOCATED_NONE)
    for name in ("one", "two"):
        create(kube, path(ns, "configmaps"), {"metadata": {"name": name}, "data": {"k": "v"}})
    create(kube, path(ns, "secrets"), {"metadata": {"name": "s"}, "stringData": {"k": "v"}})
    labels = {"app": "x"}
    pod_spec = {"containers": [{"name": "c", "image": "busybox"}], "nodeSelector": NOWHERE}
    template: dict[str, Any] = {
        "metadata": {"labels": labels},
        "spec": pod_spec,
    }
    rc_spec = {"replicas": 0, "selector": labels, "template": template}
    create(kube, path(ns, "replicationcontrollers"), {"metadata": {"name": "rc"}, "spec": rc_spec})
    deploy_spec = {"replicas": 0, "selector": {"matchLabels": labels}, "template": template}
    create(
        kube,
        path(ns, "deployments", group="apps"),
        {"metadata": {"name": "d"}, "spec": deploy_spec},
    )
    job_template = {**template, "spec": {**pod_spec, "restartPolicy": "Never"}}
    job_spec = {"suspend": True, "template": job_template}
    create(kube, path(ns, "jobs", group="batch"), {"metadata": {"name": "j"}, "spec": job_spec})


EXPECTED_FIRST = {
    "compute": {
        "pods": "7",
        "count/pods": "8",
        "requests.ephemeral-storage": "1Gi",
        "limits.ephemeral-storage": "0",
        "hugepages-2Mi": "4Mi",
        "requests.hugepages-2Mi": "4Mi",
        "requests.example.com/gpu": "2",
    },
    # burst: max(250m, init 1) cpu, max(64Mi, 32Mi) memory; limits max(500m, 1), 128Mi;
    # guaranteed with its sidecar: 600m, 160Mi; pod-level: 1 and 256Mi, limits 2 and 512Mi
    "not-best-effort": {
        "pods": "3",
        "cpu": "2600m",
        "requests.cpu": "2600m",
        "memory": "480Mi",
        "requests.memory": "480Mi",
        "limits.cpu": "3600m",
        "limits.memory": "800Mi",
    },
    "best-effort": {"pods": "4"},
    "terminating": {"pods": "1"},
    "not-terminating": {"pods": "6"},
    "priority": {"pods": "1"},
    "cross-namespace": {"pods": "1"},
    "objects": {
        "services": "4",
        "services.nodeports": "3",
        "services.loadbalancers": "2",
        # gold 1Gi, none 500Mi (not its 100Mi allocated), grown 2Gi (not its 1Gi request)
        "persistentvolumeclaims": "3",
        "requests.storage": "3572Mi",
        "gold.storageclass.storage.k8s.io/requests.storage": "3Gi",
        "gold.storageclass.storage.k8s.io/persistentvolumeclaims": "2",
        "configmaps": "3",  # and kube-root-ca.crt
        "secrets": "1",
        "replicationcontrollers": "1",
        "resourcequotas": "8",
        "count/deployments.apps": "1",
        "count/jobs.batch": "1",
    },
}

EXPECTED_SECOND = {
    "compute": {
        **EXPECTED_FIRST["compute"],
        "pods": "5",
        "count/pods": "7",
        "requests.ephemeral-storage": "0",
    },
    "not-best-effort": {
        "pods": "2",
        "cpu": "1600m",
        "requests.cpu": "1600m",
        "memory": "416Mi",
        "requests.memory": "416Mi",
        "limits.cpu": "2600m",
        "limits.memory": "672Mi",
    },
    "best-effort": {"pods": "3"},
    "terminating": {"pods": "1"},
    "not-terminating": {"pods": "4"},
    "priority": {"pods": "1"},
    "cross-namespace": {"pods": "1"},
    "objects": {
        **{k: v for k, v in EXPECTED_FIRST["objects"].items() if k != "secrets"},
        "services": "3",
        "services.nodeports": "1",
        "persistentvolumeclaims": "2",
        "requests.storage": "2548Mi",
        "gold.storageclass.storage.k8s.io/requests.storage": "2Gi",
        "gold.storageclass.storage.k8s.io/persistentvolumeclaims": "1",
        "configmaps": "2",
        "count/secrets": "1",
    },
}


def snapshot(side: Side, expected: dict[str, dict[str, str]]) -> dict[str, Any]:
    """Every quota's status once it is ``expected``."""
    return {
        name: wait_used(side.name, side.kube, side.ns, name, used)
        for name, used in expected.items()
    }


def scenario(side: Side) -> list[dict[str, Any]]:
    """The quotas and objects above on ``side``: the statuses once everything is counted,
    and again after a pod was deleted and another turned Failed, a service, a claim and a
    ConfigMap were deleted, and the objects quota's hard traded ``secrets`` for
    ``count/secrets`` (replenishment, and used keys following hard). The resized claims
    stay: the second point is the controller's own count of them (admission charges a
    claim's status update too, but never recounts)."""
    kube, ns = side.kube, side.ns
    priority_class = f"quota-test-{uuid.uuid4().hex[:8]}"
    kube.request(
        "POST",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {"metadata": {"name": priority_class}, "value": 1000},
    )
    side.cluster_objects.append(f"/apis/scheduling.k8s.io/v1/priorityclasses/{priority_class}")
    for body in _quotas(priority_class):
        kube.request("POST", path(ns, "resourcequotas"), body)
        name = body["metadata"]["name"]
        wait_for(side.name, has_status(kube, ns, name), f"quota {name}'s status")
    _make_objects(side, priority_class)
    first = snapshot(side, EXPECTED_FIRST)

    delete(kube, path(ns, "pods", "burst"))
    fail_pod(kube, ns, "best")
    delete(kube, path(ns, "services", "np"))
    delete(kube, path(ns, "persistentvolumeclaims", "gold"))
    delete(kube, path(ns, "configmaps", "one"))

    def trade_secrets(objects: dict[str, Any]) -> None:
        hard = {k: v for k, v in objects["spec"]["hard"].items() if k != "secrets"}
        objects["spec"]["hard"] = {**hard, "count/secrets": "10"}

    # The quota's status is written meanwhile (controller, admission): again on a conflict.
    update(
        kube,
        path(ns, "resourcequotas", "objects"),
        trade_secrets,
        f"{side.name}: cannot change the hard of quota objects",
    )
    second = snapshot(side, EXPECTED_SECOND)
    return [first, second]
