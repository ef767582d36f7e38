"""The HorizontalPodAutoscaler workload of ``make bench`` (:mod:`bench.controllers`): N HPAs
in steady state, and what each side's HPA controller spends per sync.

# The cluster
The workload runs in a cluster of its own per side, with the resource metrics pipeline
(``ClusterConfig.metrics``: kwok simulates each pod's CPU from its annotation
``steward.io/cpu-usage``, metrics-server scrapes it and serves ``metrics.k8s.io``) and
:func:`nodes_for` kwok nodes. Upstream's side runs kube-controller-manager with every
controller, its HPA controller included; Steward's runs it without its
``horizontalpodautoscaling`` controller, and Steward's informer, manager and HPA controller
(no other of Steward's controllers) as ``make up`` runs them. On both sides the targets'
pods come from upstream's Deployment and ReplicaSet controllers. Both HPA controllers run
:data:`WORKERS` workers and sync every HPA every :data:`SYNC_PERIOD` seconds (their
defaults).

# What is measured
A phase creates N Deployments of one replica (one container requesting
:data:`CPU_REQUEST`, its pod template annotated to use :data:`CPU_USAGE`) and waits until
each has its replica available and metrics-server serves every pod's usage; then it
creates one HPA per Deployment (autoscaling/v2, one Resource metric: CPU at
:data:`TARGET_UTILIZATION` % average utilization, ``minReplicas`` 1, ``maxReplicas`` 3),
so every HPA sees its target's usage exactly at target and nothing scales. Once every HPA
has a status with ``ScalingActive=True`` (:func:`scaling_active`), the HPAs are in steady
state and a window of fixed length is measured: CPU seconds of every process (from
``/proc``) and the requests of each identity (kube-apiserver's audit log).

An HPA sync reads its target's scale, so the syncs in the window are the audit log's
``get deployments/scale`` requests of the side's HPA identity (:data:`IDENTITIES`).
Each side's figures are per sync; its syncs per second show how close it came to every HPA
every sync period (N / :data:`SYNC_PERIOD` per second), which at upstream's default client
rate limits neither side can reach for large N: a sync needs a GET of the scale and a list
of the pods' metrics (and a status write when the status changed).

After the window, every Deployment is checked to still have one replica: a target that
was rescaled would make the syncs unlike each other, so the count of rescaled targets is
reported with the figures.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any

from bench.endpoints import wait_for_service_account
from bench.informer import Api
from bench.job import Span
from steward.cluster.progress import Progress
from steward.cluster.usage import usage_annotations

WORKERS = 5
"""HPA workers on both sides: kube-controller-manager's
``--concurrent-horizontal-pod-autoscaler-syncs`` default (5) and Steward's HPA controller's
default ``--workers`` (5)."""

SYNC_PERIOD = 15.0
"""Seconds between two syncs of an HPA on both sides: kube-controller-manager's
``--horizontal-pod-autoscaler-sync-period`` default and Steward's."""

CONTROLLER = "horizontalpodautoscaling"
"""The HPA controller's name (kube-controller-manager's ``--controllers``, Steward's
registry)."""

IDENTITIES = {
    False: "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
    True: "steward:controller:horizontalpodautoscaling",
}
"""The HPA controller's identity on each side (Steward's side: True); upstream's is its
service account, kube-controller-manager running with ``--use-service-account-credentials``."""

SYNC_REQUEST = "get deployments/scale"
"""The request every sync makes once (the audit log's verb and resource): the target's
scale."""

STATUS_REQUEST = "update horizontalpodautoscalers/status"
"""A status write (made only when the status changed)."""

CPU_REQUEST = "100m"
"""The CPU each target pod requests."""
CPU_USAGE = "50m"
"""The CPU each target pod uses (kwok reports it): :data:`TARGET_UTILIZATION` % of
:data:`CPU_REQUEST`."""
TARGET_UTILIZATION = 50
"""Every HPA's target: average CPU utilization, in percent of the request."""

PODS_PER_NODE = 200
"""Target pods per kwok node (of 250 pods each) that :func:`nodes_for` plans for."""


def nodes_for(hpas: int) -> int:
    """kwok nodes for ``hpas`` one-pod targets: at most :data:`PODS_PER_NODE` each, and
    at least 2."""
    return max(2, -(-hpas // PODS_PER_NODE))


def deployment_body(name: str) -> dict[str, Any]:
    """A Deployment of one replica whose pod requests :data:`CPU_REQUEST` and uses
    :data:`CPU_USAGE`."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {
                    "labels": {"app": name},
                    "annotations": usage_annotations(cpu=CPU_USAGE),
                },
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox:1",
                            "resources": {"requests": {"cpu": CPU_REQUEST}},
                        }
                    ]
                },
            },
        },
    }


def hpa_body(name: str) -> dict[str, Any]:
    """An autoscaling/v2 HPA of Deployment ``name``: CPU at :data:`TARGET_UTILIZATION` %."""
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": 1,
            "maxReplicas": 3,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {
                            "type": "Utilization",
                            "averageUtilization": TARGET_UTILIZATION,
                        },
                    },
                }
            ],
        },
    }


def scaling_active(hpa: dict[str, Any]) -> bool:
    """Whether an HPA's status says it computed a replica count from its metrics
    (``ScalingActive=True``)."""
    return any(
        c.get("type") == "ScalingActive" and c.get("status") == "True"
        for c in (hpa.get("status") or {}).get("conditions") or ()
    )


def _available(deployment: dict[str, Any]) -> bool:
    st = deployment.get("status") or {}
    return bool(
        st.get("observedGeneration", 0) >= deployment["metadata"]["generation"]
        and st.get("availableReplicas", 0) == 1
        and st.get("updatedReplicas", 0) == 1
    )


def _poll(what: str, timeout: float, out: Progress, check: Any, interval: float = 1.0) -> float:
    """Call ``check()`` (→ ``(done, progress text)``) every ``interval`` seconds until it
    is done; returns when (perf_counter).

    Raises:
        RuntimeError: not done within ``timeout`` seconds (with the last progress).
    """
    deadline = time.monotonic() + timeout
    while True:
        done, shown = check()
        now = time.perf_counter()
        if done:
            return now
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not done in {timeout:.0f} s: {shown}")
        out.tick(f"  {shown}")
        time.sleep(interval)


def wait_deployments(api: Api, ns: str, count: int, timeout: float, out: Progress) -> float:
    """Until all ``count`` Deployments have their one replica available."""

    def check() -> tuple[bool, str]:
        items = api.request("GET", f"/apis/apps/v1/namespaces/{ns}/deployments")["items"]
        ready = sum(1 for d in items if _available(d))
        return ready == count, f"{ready}/{count} Deployments available"

    return _poll(f"{ns}: Deployments", timeout, out, check)


def wait_pod_metrics(api: Api, ns: str, count: int, timeout: float, out: Progress) -> float:
    """Until metrics-server serves the usage of ``count`` pods of namespace ``ns``."""

    def check() -> tuple[bool, str]:
        try:
            items = api.request("GET", f"/apis/metrics.k8s.io/v1beta1/namespaces/{ns}/pods")[
                "items"
            ]
        except RuntimeError as err:  # the metrics API not available yet
            return False, f"metrics API: {str(err)[:120]}"
        return len(items) >= count, f"{len(items)}/{count} pods with metrics"

    return _poll(f"{ns}: pod metrics", timeout, out, check, interval=2.0)


def wait_active(api: Api, ns: str, count: int, timeout: float, out: Progress) -> float:
    """Until all ``count`` HPAs have a status with ``ScalingActive=True``."""

    def check() -> tuple[bool, str]:
        items = api.request(
            "GET", f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers"
        )["items"]
        active = sum(1 for h in items if scaling_active(h))
        synced = sum(1 for h in items if (h.get("status") or {}).get("conditions"))
        return active == count, f"{active}/{count} HPAs ScalingActive ({synced} with a status)"

    return _poll(f"{ns}: HPAs", timeout, out, check, interval=2.0)


def identity_count(measured: dict[str, Any], user: str, request: str) -> int:
    """How many ``request`` (verb and resource) the audit log holds of ``user`` in the
    measured span."""
    return sum(
        int(per_user.get(user, {}).get(request, 0)) for per_user in measured["requests"].values()
    )


def run_phase(
    api: Api,
    ns: str,
    count: int,
    window: float,
    steward: bool,
    threads: int,
    timeout: float,
    out: Progress,
    meter: Span,
) -> dict[str, Any]:
    """``count`` Deployments and an HPA of each in namespace ``ns``, then a window of
    ``window`` seconds in steady state measured by ``meter`` (``bench.controllers.Meter``,
    bounded by the clock: its ``span_seconds`` is the window; module docs). ``steward``:
    whose HPA identity counts the syncs."""
    api.namespace(ns)
    wait_for_service_account(api, ns, timeout)
    names = [f"hpa-{i:04d}" for i in range(count)]
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(
            pool.map(
                lambda n: api.request(
                    "POST", f"/apis/apps/v1/namespaces/{ns}/deployments", deployment_body(n)
                ),
                names,
            )
        )
    deployed = wait_deployments(api, ns, count, timeout, out)
    measured_pods = wait_pod_metrics(api, ns, count, timeout, out)
    out.say(
        f"  {count} Deployments available in {deployed - started:.1f} s, their pods' "
        f"metrics served after {measured_pods - started:.1f} s; now the HPAs"
    )
    hpas_started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(
            pool.map(
                lambda n: api.request(
                    "POST",
                    f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers",
                    hpa_body(n),
                ),
                names,
            )
        )
    active = wait_active(api, ns, count, timeout, out)
    out.say(
        f"  every HPA ScalingActive {active - hpas_started:.1f} s after the first was "
        f"created; measuring {window:g} s of steady state"
    )
    meter.begin()
    time.sleep(window)
    measured = meter.end()
    span = float(measured.get("span_seconds", window))
    items = api.request("GET", f"/apis/apps/v1/namespaces/{ns}/deployments")["items"]
    rescaled = sum(1 for d in items if (d.get("spec") or {}).get("replicas") != 1)
    user = IDENTITIES[steward]
    syncs = identity_count(measured, user, SYNC_REQUEST)
    return measured | {
        "hpas": count,
        "workers": WORKERS,
        "sync_period_seconds": SYNC_PERIOD,
        "window_seconds": round(span, 3),
        "deployments_available_seconds": round(deployed - started, 3),
        "pod_metrics_seconds": round(measured_pods - started, 3),
        "all_scaling_active_seconds": round(active - hpas_started, 3),
        "syncs": syncs,
        "syncs_per_s": round(syncs / span, 3),
        "full_rate_syncs_per_s": round(count / SYNC_PERIOD, 3),
        "status_writes": identity_count(measured, user, STATUS_REQUEST),
        "targets_rescaled": rescaled,
    }
