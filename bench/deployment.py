"""The Deployment workload of ``make bench`` (:mod:`bench.controllers`): N Deployments of R
replicas rolled out, then a rolling update of all of them.

A phase creates the Deployments in a fresh namespace and waits until all are rolled out
(the initial rollout, timed), then changes every pod template at once (a new environment
variable) and measures the time from the first update request to the moment every
Deployment's status shows ``updatedReplicas == availableReplicas == replicas == R`` with
``observedGeneration`` current (what ``kubectl rollout status`` waits for), polled every
0.25 s.

# When it cannot finish
When kwok's simulated nodes miss a heartbeat (a busy machine), the node lifecycle
controller marks every pod on them not Ready and kwok never readies a running pod again,
so no rollout in flight can finish, under either controller. A phase that times out says
how many running pods are so marked; run a smaller size (``--deployments``,
``--replicas``) on such a machine.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any

from bench.informer import Api
from steward.cluster.progress import Progress


def deployment_body(name: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "busybox:1"}]},
            },
        },
    }


def rolled_out(d: dict[str, Any], replicas: int) -> bool:
    st = d.get("status") or {}
    return bool(
        st.get("observedGeneration", 0) >= d["metadata"]["generation"]
        and st.get("updatedReplicas", 0) == replicas
        and st.get("availableReplicas", 0) == replicas
        and st.get("replicas", 0) == replicas
    )


def wait_all(api: Api, ns: str, count: int, replicas: int, timeout: float, out: Progress) -> float:
    """Poll until all ``count`` Deployments are rolled out; returns when (perf_counter)."""
    deadline = time.monotonic() + timeout
    last_report = 0.0
    while True:
        items = api.request("GET", f"/apis/apps/v1/namespaces/{ns}/deployments")["items"]
        now = time.perf_counter()
        done = sum(1 for d in items if rolled_out(d, replicas))
        if done == count and len(items) == count:
            return now
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{ns}: only {done} of {count} Deployments rolled out; "
                f"{_marked_not_ready(api, ns)} running pods are marked not Ready"
            )
        if time.monotonic() - last_report > 10:
            out.say(f"  {done}/{count} rolled out")
            last_report = time.monotonic()
        time.sleep(0.25)


def _marked_not_ready(api: Api, ns: str) -> int:
    """Running pods whose containers are ready but the pod is not: the node lifecycle
    controller's doing when kwok's node heartbeats came late (kwok does not ready a
    running pod again), so the rollout cannot finish on this machine at this size."""
    pods = api.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
    count = 0
    for pod in pods:
        conds = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions") or ()}
        if conds.get("ContainersReady") == "True" and conds.get("Ready") == "False":
            count += 1
    return count


def run_phase(
    api: Api, ns: str, count: int, replicas: int, threads: int, timeout: float, out: Progress
) -> dict[str, Any]:
    """Roll out ``count`` Deployments in namespace ``ns``, then update them all (module
    docs); the two times."""
    api.namespace(ns)
    names = [f"web-{i:03d}" for i in range(count)]
    created_started = started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(
            pool.map(
                lambda n: api.request(
                    "POST",
                    f"/apis/apps/v1/namespaces/{ns}/deployments",
                    deployment_body(n, replicas),
                ),
                names,
            )
        )
    created = wait_all(api, ns, count, replicas, timeout, out)
    out.say(f"  initial rollout: {created - started:.1f} s; now the rolling update")
    update = {
        "spec": {
            "template": {
                "spec": {"containers": [{"name": "main", "env": [{"name": "V", "value": "2"}]}]}
            }
        }
    }
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(
            pool.map(
                lambda n: api.request(
                    "PATCH",
                    f"/apis/apps/v1/namespaces/{ns}/deployments/{n}",
                    update,
                    "application/strategic-merge-patch+json",
                ),
                names,
            )
        )
    patched = time.perf_counter()
    finished = wait_all(api, ns, count, replicas, timeout, out)
    return {
        "deployments": count,
        "replicas": replicas,
        "update_requests_seconds": round(patched - started, 3),
        "rolling_update_seconds": round(finished - started, 3),
        "initial_rollout_seconds": round(created - created_started, 3),
    }
