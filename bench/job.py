"""Job controller benchmark: 500 one-pod Jobs to Complete, upstream's controller vs Steward's.

Run with ``make bench`` (or ``python -m bench.job``). Prints a table and writes
``bench-results/job.json``. One local control plane (3 kwok nodes, which complete Job pods
at once) is started for the run; upstream's job controller runs in kube-controller-manager
throughout, and Steward's (the informer and ``python -m steward.controllers.job.main``, as
processes) is started for the second phase, its Jobs naming it in ``spec.managedBy`` so
that upstream's skips them. Steward's phase runs in rounds (``--rounds``, 2 by default)
with tracing off and on (every span exported to the cluster's Jaeger, sampling
everything), the order alternating from round to round so that neither mode always meets
the fuller cluster; the cost of tracing is the ratio of the two modes' total throughput
(the target: at most 15% less).

Each phase creates N Jobs in a fresh namespace with a few threads over loopback, and
measures the time from the first create request to the last Job seen ``Complete`` by a
watch on that namespace. One warm-up Job per phase runs to completion first, so that both
controllers are synced and idle when the clock starts. The result is the two times and
their ratio (Steward / upstream; the target is ≤ 1.5, the goal ≤ 1.0).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson

from bench.informer import Api
from steward.cluster import ClusterConfig, LocalCluster
from steward.cluster.process import free_port
from steward.cluster.progress import Progress

ROOT = Path(__file__).resolve().parent.parent
MANAGED_BY = "steward.io/job-controller"


def job_body(name: str, managed: bool) -> dict[str, Any]:
    """A one-pod Job whose container kwok completes at once."""
    spec: dict[str, Any] = {
        "completions": 1,
        "parallelism": 1,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox"}],
            }
        },
    }
    if managed:
        spec["managedBy"] = MANAGED_BY
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def _complete(job: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Complete" and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or ()
    )


class CompletionWatch:
    """Watches a namespace's Jobs in a thread, recording when each is first Complete."""

    def __init__(self, api: Api, namespace: str, names: set[str]) -> None:
        self.api = api
        self.namespace = namespace
        self.names = names
        self.done: dict[str, float] = {}
        self.all_done = threading.Event()
        listing = api.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs")
        self._rv = listing["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, name="watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import urllib3

        while not self.all_done.is_set():
            path = (
                f"/apis/batch/v1/namespaces/{self.namespace}/jobs"
                f"?watch=1&allowWatchBookmarks=true&resourceVersion={self._rv}"
            )
            resp = self.api.pool.request(
                "GET",
                self.api.base + path,
                preload_content=False,
                timeout=urllib3.Timeout(connect=10, read=None),
            )
            buffer = b""
            for chunk in resp.stream(65536, decode_content=False):
                now = time.perf_counter()
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if not line:
                        continue
                    event = orjson.loads(line)
                    obj = event["object"]
                    self._rv = obj["metadata"].get("resourceVersion", self._rv)
                    name = obj["metadata"].get("name")
                    if name in self.names and name not in self.done and _complete(obj):
                        self.done[name] = now
                if len(self.done) == len(self.names):
                    self.all_done.set()
                    break
            resp.release_conn()

    def wait(self, timeout: float) -> bool:
        return self.all_done.wait(timeout)


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """CPU time (user + system) each process has used so far, by name."""
    tick = os.sysconf("SC_CLK_TCK")
    used: dict[str, float] = {}
    for name, pid in pids.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        used[name] = (int(fields[11]) + int(fields[12])) / tick
    return used


def run_phase(
    api: Api,
    namespace: str,
    count: int,
    managed: bool,
    threads: int,
    timeout: float,
    pids: dict[str, int],
) -> dict[str, Any]:
    """Create ``count`` Jobs and time them to Complete (see the module docs), with the CPU
    seconds each process of ``pids`` used meanwhile."""
    api.namespace(namespace)
    warm = CompletionWatch(api, namespace, {"warm-up"})
    api.request("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", job_body("warm-up", managed))
    if not warm.wait(timeout):
        raise RuntimeError(f"{namespace}: the warm-up Job did not complete in {timeout:.0f}s")
    names = [f"job-{i:04d}" for i in range(count)]
    watch = CompletionWatch(api, namespace, set(names))
    cpu_before = cpu_seconds(pids)
    started = time.perf_counter()

    def create(name: str) -> None:
        api.request("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", job_body(name, managed))

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(create, names))
    created = time.perf_counter() - started
    if not watch.wait(timeout):
        raise RuntimeError(
            f"{namespace}: only {len(watch.done)} of {count} Jobs completed in {timeout:.0f}s"
        )
    cpu_after = cpu_seconds(pids)
    last = max(watch.done.values())
    first = min(watch.done.values())
    return {
        "cpu_seconds": {
            name: round(cpu_after[name] - cpu_before.get(name, 0.0), 1) for name in cpu_after
        },
        "jobs": count,
        "seconds": round(last - started, 3),
        "create_seconds": round(created, 3),
        "first_complete_seconds": round(first - started, 3),
        "jobs_per_s": round(count / (last - started), 1),
    }


class StewardJob:
    """Steward's informer and Job controller as processes for one namespace; with
    ``traced``, both export every span to the cluster's Jaeger, else tracing is off."""

    def __init__(
        self,
        cluster: LocalCluster,
        namespace: str,
        workers: int,
        profile: str,
        *,
        traced: bool = False,
    ) -> None:
        logs = Path(tempfile.mkdtemp(prefix="steward-bench-job-logs-"))
        self.logs = logs
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        if traced:
            self.env["OTEL_EXPORTER_OTLP_ENDPOINT"] = cluster.state.otlp_endpoint
            self.env["OTEL_TRACES_SAMPLER"] = "always_on"
        else:
            self.env["OTEL_SDK_DISABLED"] = "true"
        informer = f"127.0.0.1:{free_port()}"
        kubeconfig = str(cluster.kubeconfig)
        py = sys.executable
        self.procs: list[subprocess.Popen[bytes]] = []
        self._start(
            [
                py,
                "-m",
                "steward.cli",
                "informer",
                f"--kubeconfig={kubeconfig}",
                f"--listen={informer}",
                *cluster.state.steward_serving_args(),  # mTLS and RBAC, as deployed
            ],
            logs / "bench-informer.log",
        )
        prof = ["-m", "cProfile", "-o", f"{profile}.{namespace}"] if profile else []
        self._start(
            [
                py,
                *prof,
                "-m",
                "steward.controllers.job.main",
                f"--kubeconfig={kubeconfig}",
                f"--informer={informer}",
                f"--namespace={namespace}",
                f"--workers={workers}",
                "--no-take-unmanaged",
                *cluster.state.client_args("admin"),
            ],
            logs / "bench-job-controller.log",
        )

    @property
    def pids(self) -> dict[str, int]:
        return {"steward-informer": self.procs[0].pid, "steward-job": self.procs[1].pid}

    def _start(self, argv: list[str], log: Path) -> None:
        with log.open("ab") as out:
            self.procs.append(
                subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=self.env)
            )

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _combine(phases: list[dict[str, Any]]) -> dict[str, Any]:
    """Rounds of one mode as one result: total Jobs over total time, CPU summed."""
    jobs = sum(p["jobs"] for p in phases)
    seconds = sum(p["seconds"] for p in phases)
    cpu: dict[str, float] = {}
    for p in phases:
        for name, secs in p["cpu_seconds"].items():
            cpu[name] = round(cpu.get(name, 0.0) + secs, 1)
    return {
        "jobs": jobs,
        "seconds": round(seconds, 3),
        "jobs_per_s": round(jobs / seconds, 1),
        "create_seconds": round(sum(p["create_seconds"] for p in phases), 3),
        "cpu_seconds": cpu,
        "rounds": phases,
    }


def _jaeger_services(cluster: LocalCluster) -> list[str]:
    """The services Jaeger holds spans of: proof that the traced phase really exported."""
    url = f"{cluster.jaeger_query_url}/api/services"
    deadline = time.monotonic() + 30
    while True:
        with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - loopback http
            services: list[str] = sorted(json.loads(resp.read())["data"] or [])
        if "steward-controller-job" in services or time.monotonic() > deadline:
            return services
        time.sleep(1)


def _table(results: dict[str, Any]) -> str:
    up, st, tr = results["upstream"], results["steward"], results["steward_traced"]
    rows = [
        (
            f"{up['jobs']} one-pod Jobs → Complete, upstream job controller",
            f"{up['seconds']:.2f} s",
            f"{up['jobs_per_s']:.0f} Jobs/s; creates took {up['create_seconds']:.2f} s",
        ),
        (
            f"{st['jobs']} one-pod Jobs → Complete, Steward job controller",
            f"{st['seconds']:.2f} s",
            f"{st['jobs_per_s']:.0f} Jobs/s; creates took {st['create_seconds']:.2f} s",
        ),
        (
            f"{tr['jobs']} one-pod Jobs → Complete, Steward, tracing on",
            f"{tr['seconds']:.2f} s",
            f"{tr['jobs_per_s']:.0f} Jobs/s; Jaeger has spans of "
            + ", ".join(s for s in tr["services_in_jaeger"] if s.startswith("steward")),
        ),
        (
            "ratio Steward / upstream",
            f"{results['ratio']:.2f}",
            "target ≤ 1.5 (goal ≤ 1.0)",
        ),
        (
            "throughput lost to tracing",
            f"{results['tracing_overhead'] * 100:.1f} %",
            "1 - traced / untraced Jobs/s; target ≤ 15 %",
        ),
    ]
    width = max(len(r[0]) for r in rows)
    vwidth = max(len(r[1]) for r in rows)
    lines = [f"{'benchmark':{width}}  {'result':{vwidth}}  notes", "-" * (width + vwidth + 40)]
    lines += [f"{a:{width}}  {b:{vwidth}}  {c}" for a, b, c in rows]
    for phase in ("upstream", "steward", "steward_traced"):
        cpu = sorted(results[phase]["cpu_seconds"].items(), key=lambda kv: -kv[1])
        lines.append(
            f"CPU seconds during the {phase} phase: "
            + ", ".join(f"{name} {secs:.1f}" for name, secs in cpu if secs >= 0.1)
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    out = Progress()
    state = Path(tempfile.mkdtemp(prefix="steward-bench-job-"))
    cluster = LocalCluster.up(
        ClusterConfig(name="steward-bench-job", state_dir=state, nodes=3, die_with_parent=True),
        progress=out,
    )
    results: dict[str, Any] = {"machine": {"cores": os.cpu_count()}, "workers": args.workers}
    started: list[StewardJob] = []
    try:
        api = Api(cluster)
        pids = {r.name: r.pid for r in cluster.iter_processes()}
        pids["bench"] = os.getpid()
        out.say(f"upstream: {args.jobs} Jobs")
        results["upstream"] = run_phase(
            api, "bench-upstream", args.jobs, False, args.threads, args.timeout, pids
        )
        # Steward with tracing off and on, in rounds whose order alternates, so that
        # neither mode always runs on the fuller cluster; the totals are compared.
        runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
        for r in range(args.rounds):
            for traced_mode in (False, True) if r % 2 == 0 else (True, False):
                label = "tracing on" if traced_mode else "tracing off"
                out.say(f"steward, {label}, round {r + 1} of {args.rounds}: {args.jobs} Jobs")
                namespace = f"bench-{'traced' if traced_mode else 'steward'}-{r}"
                phase = StewardJob(
                    cluster, namespace, args.workers, args.profile, traced=traced_mode
                )
                started.append(phase)
                pids.update(phase.pids)
                runs[traced_mode].append(
                    run_phase(api, namespace, args.jobs, True, args.threads, args.timeout, pids)
                )
                phase.stop()
        results["steward"] = _combine(runs[False])
        results["steward_traced"] = _combine(runs[True])
        results["steward_traced"]["services_in_jaeger"] = _jaeger_services(cluster)
    finally:
        for phase in started:
            phase.stop()
        if started:
            out.say(f"Steward's logs: {', '.join(str(p.logs) for p in started)}")
        cluster.down(progress=Progress(quiet=True))
    # Time per Job, Steward's over upstream's (the phases may differ in Job counts).
    results["ratio"] = round(
        results["upstream"]["jobs_per_s"] / results["steward"]["jobs_per_s"], 3
    )
    results["tracing_overhead"] = round(
        1 - results["steward_traced"]["jobs_per_s"] / results["steward"]["jobs_per_s"], 3
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(_table(results))
    print(f"\nJSON: {args.out}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.job",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, default=500, help="Jobs per phase (default 500)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="Steward rounds per mode, tracing off and on alternating (default 2)",
    )
    parser.add_argument("--threads", type=int, default=8, help="creating threads (default 8)")
    parser.add_argument("--workers", type=int, default=5, help="Steward's --workers (default 5)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per phase")
    parser.add_argument(
        "--profile", default="", help="cProfile Steward's controller into PROFILE.<namespace>"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "job.json")
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
