"""Deployment controller benchmark: 100 Deployments x 10 replicas rolled out, then a
rolling update of all of them, under upstream's controllers and under Steward's.

Run with ``python -m bench.deployment``. Prints a table and writes
``bench-results/deployment.json``; progress goes to stderr. Upstream's deployment
controller cannot be told to leave some Deployments alone (they have no
``spec.managedBy``), so each phase has a local control plane of its own (8 kwok nodes of
250 pods, which run pods at once):

* upstream: kube-controller-manager with every controller on;
* steward: kube-controller-manager with ``*,-deployment`` (and ``-replicaset`` when
  Steward's ReplicaSet controller, ``steward.controllers.replicaset.main``, is installed),
  Steward's informer and controllers running as processes, tracing off. Which ReplicaSet
  controller ran is printed and recorded.

Each phase creates N Deployments of R replicas in a fresh namespace and waits until all
are rolled out (the initial rollout, timed too), then changes every pod template at once
(a new environment variable) and measures the time from the first update request to the
moment every Deployment's status shows ``updatedReplicas == availableReplicas ==
replicas == R`` with ``observedGeneration`` current (what ``kubectl rollout status``
waits for), polled every 0.25 s. The result is the two rolling-update times and their
ratio (Steward / upstream).

# When it cannot finish
When kwok's simulated nodes miss a heartbeat (a busy machine), the node lifecycle
controller marks every pod on them not Ready and kwok never readies a running pod again,
so no rollout in flight can finish, under either controller. A phase that times out says
how many running pods are so marked; run a smaller size (``--deployments``,
``--replicas``) on such a machine.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.informer import Api
from steward.cluster import ClusterConfig, LocalCluster
from steward.cluster.process import free_port
from steward.cluster.progress import Progress

ROOT = Path(__file__).resolve().parent.parent
NODES = 8


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
    api: Api, count: int, replicas: int, threads: int, timeout: float, out: Progress
) -> dict[str, Any]:
    ns = "bench-deployments"
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


class StewardControllers:
    """Steward's informer, Deployment controller and (if installed) ReplicaSet controller
    as processes, tracing off, logs in a temporary directory."""

    def __init__(self, cluster: LocalCluster, workers: int, replicaset: bool) -> None:
        self.logs = Path(tempfile.mkdtemp(prefix="steward-bench-deployment-logs-"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env["OTEL_SDK_DISABLED"] = "true"
        informer = f"127.0.0.1:{free_port()}"
        kubeconfig = f"--kubeconfig={cluster.kubeconfig}"
        py = sys.executable
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        argv = {
            "steward-informer": [
                py,
                "-m",
                "steward.cli",
                "informer",
                kubeconfig,
                f"--listen={informer}",
                *cluster.state.steward_serving_args(),  # mTLS and RBAC, as deployed
            ],
            "steward-deployment": [
                py,
                "-m",
                "steward.controllers.deployment.main",
                kubeconfig,
                f"--informer={informer}",
                f"--workers={workers}",
                *cluster.state.client_args("admin"),
            ],
        }
        if replicaset:
            argv["steward-replicaset"] = [
                py,
                "-m",
                "steward.controllers.replicaset.main",
                kubeconfig,
                f"--informer={informer}",
                f"--workers={workers}",
                *cluster.state.client_args("admin"),
            ]
        for name, args in argv.items():
            with (self.logs / f"{name}.log").open("ab") as log:
                self.procs[name] = subprocess.Popen(
                    args, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env
                )
            if name == "steward-informer":
                time.sleep(2)

    def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _cluster(name: str, controllers: str, out: Progress) -> LocalCluster:
    state = Path(tempfile.mkdtemp(prefix=f"steward-bench-{name}-"))
    return LocalCluster.up(
        ClusterConfig(
            name=f"steward-bench-{name}",
            state_dir=state,
            nodes=NODES,
            controllers=controllers,
            die_with_parent=True,
        ),
        progress=out,
    )


def _table(results: dict[str, Any]) -> str:
    up, st = results["upstream"], results["steward"]
    what = f"{up['deployments']} Deployments x {up['replicas']} replicas"
    rows = [
        (f"{what}: initial rollout, upstream", f"{up['initial_rollout_seconds']:.2f} s", ""),
        (f"{what}: initial rollout, Steward", f"{st['initial_rollout_seconds']:.2f} s", ""),
        (
            f"{what}: rolling update, upstream",
            f"{up['rolling_update_seconds']:.2f} s",
            "upstream's deployment and replicaset controllers",
        ),
        (
            f"{what}: rolling update, Steward",
            f"{st['rolling_update_seconds']:.2f} s",
            f"Steward's deployment controller, {results['replicaset_controller']} ReplicaSet "
            "controller",
        ),
        ("ratio Steward / upstream (rolling update)", f"{results['ratio']:.2f}", ""),
    ]
    width = max(len(r[0]) for r in rows)
    vwidth = max(len(r[1]) for r in rows)
    lines = [f"{'benchmark':{width}}  {'result':{vwidth}}  notes", "-" * (width + vwidth + 40)]
    lines += [f"{a:{width}}  {b:{vwidth}}  {c}".rstrip() for a, b, c in rows]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    out = Progress()
    steward_rs = importlib.util.find_spec("steward.controllers.replicaset.main") is not None
    results: dict[str, Any] = {
        "machine": {"cores": os.cpu_count()},
        "workers": args.workers,
        "nodes": NODES,
        "replicaset_controller": "Steward's" if steward_rs else "upstream's",
    }
    out.say(f"ReplicaSet controller of the Steward phase: {results['replicaset_controller']}")
    for phase in ("upstream", "steward"):
        controllers = "*"
        if phase == "steward":
            controllers = "*,-deployment,-replicaset" if steward_rs else "*,-deployment"
        out.say(f"{phase}: cluster with kube-controller-manager --controllers={controllers}")
        cluster = _cluster(phase, controllers, out)
        procs: StewardControllers | None = None
        try:
            if phase == "steward":
                procs = StewardControllers(cluster, args.workers, steward_rs)
            api = Api(cluster)
            out.say(f"{phase}: {args.deployments} Deployments x {args.replicas} replicas")
            result = run_phase(
                api, args.deployments, args.replicas, args.threads, args.timeout, out
            )
            results[phase] = result
            out.say(f"{phase}: rolling update took {result['rolling_update_seconds']:.2f} s")
        finally:
            if procs is not None:
                procs.stop()
                out.say(f"Steward's logs: {procs.logs}")
            cluster.down(progress=Progress(quiet=True))
    results["ratio"] = round(
        results["steward"]["rolling_update_seconds"]
        / results["upstream"]["rolling_update_seconds"],
        3,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(_table(results))
    print(f"\nJSON: {args.out}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.deployment",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--deployments", type=int, default=100, help="Deployments (default 100)")
    parser.add_argument("--replicas", type=int, default=10, help="replicas each (default 10)")
    parser.add_argument("--threads", type=int, default=8, help="requesting threads (default 8)")
    parser.add_argument("--workers", type=int, default=5, help="Steward's --workers (default 5)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per rollout")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "deployment.json")
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
