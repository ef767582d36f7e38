"""Controllers benchmark: Steward's controllers against upstream's, like for like.

Run with ``make bench`` (or ``python -m bench.controllers``). Prints a table per setting
and writes ``bench-results/controllers.json``; progress goes to stderr.

# What is compared
Each side gets a local control plane of its own (real kube-apiserver, etcd,
kube-scheduler and kube-controller-manager; 8 kwok nodes of 250 pods), started for it
and stopped after it, so that the API server's work under one side is not the other's
(the DaemonSet workload gets a second one, of 50 kwok nodes, below):

* **upstream**: kube-controller-manager with every controller on;
* **steward**: kube-controller-manager without the controllers Steward runs itself
  (those of its registry: daemonset, deployment, endpoint, endpointslice,
  garbagecollector, horizontalpodautoscaling, job, namespace, replicaset), and Steward's
  informer, manager and those controllers as processes, deployed as ``make up`` runs
  them: each under its own identity (RBAC, and API Priority and Fairness: none is in
  ``system:masters``), registered with the manager (leases, write fencing), over mTLS;
  tracing off;
* **the cost of tracing** (the ``high`` setting, on Steward's side): after its measured
  workloads, Steward's cluster runs ``--tracing-rounds`` more Job rounds (4 by default),
  its services with every span exported to the cluster's Jaeger (sampling everything) in
  the middle two and not in the others (off, on, on, off: a drift over the rounds, as the
  cluster fills, weighs on both alike); between rounds the supervisor replaces Steward's
  services with tracing switched (``LocalCluster.set_steward_tracing``). Comparing rounds
  of one cluster takes out the difference between clusters, larger than the effect. The
  cost is ``1 - on / off`` of the mean Jobs per second, and the growth of Steward's CPU
  per Job; a span the SDK's queue dropped (its ``Queue full`` warning in a service's log)
  is counted and reported, as it would make tracing look cheaper;
* **upstream speaking JSON** (the ``high`` setting only): kube-controller-manager with
  ``--kube-api-content-type application/json``, Steward's encoding, to show what
  protobuf saves kube-apiserver.

Both sides run the same workers (5 per controller: upstream's ``--concurrent-*-syncs``
defaults and Steward's) and the same client rate limits, in two settings:

* **defaults**: ``--kube-api-qps 20 --kube-api-burst 30``, upstream's defaults, for
  kube-controller-manager and for each of Steward's informer and controllers (each
  upstream controller has a client, and so a bucket, of its own too);
* **high**: ``--kube-api-qps 1000 --kube-api-burst 2000`` on both sides.

# Workloads
In each cluster the Job workload (:mod:`bench.job`: N one-pod Jobs to Complete) runs
first, then the Deployment workload (:mod:`bench.deployment`: rollout and rolling update),
then the endpoints workload (:mod:`bench.endpoints`: 200 Services of 50 pods each, every
pod's readiness flipped once; how fast the Endpoints objects and the EndpointSlices
follow, under the Endpoints and EndpointSlice controllers of each side: 5 workers each,
upstream's ``--concurrent-endpoint-syncs`` and ``--concurrent-service-endpoint-syncs``).

The DaemonSet workload (:mod:`bench.daemonset`: 20 DaemonSets rolled out on every node,
then a rolling update of all of them) runs in a cluster of its own per side, of 50 kwok
nodes and no other, started after the first one is stopped; 2 workers on both sides
(upstream's ``--concurrent-daemonset-syncs`` default and Steward's). Its figures are per
DaemonSet pod (DaemonSets x nodes), each created once and replaced once in the span.

The HPA workload (:mod:`bench.hpa`: 500 HPAs, each over a one-replica Deployment whose pod
uses its CPU exactly at the HPA's target, so nothing scales) runs in a cluster of its own
per side with the metrics pipeline (kwok's simulated usage, metrics-server). Upstream's
side runs kube-controller-manager's HPA controller; Steward's runs Steward's informer,
manager and HPA controller and no other of its controllers, kube-controller-manager all
the others (the Deployments' and ReplicaSets' controllers run on both sides, idle in the
window). 5 workers and a sync period of 15 s on both sides (upstream's
``--concurrent-horizontal-pod-autoscaler-syncs`` and
``--horizontal-pod-autoscaler-sync-period`` defaults and Steward's). Once every HPA is
``ScalingActive``, a fixed window (``--hpa-window``, 60 s) is measured; its figures are
per HPA sync (the HPA identity's GETs of ``deployments/scale`` timestamped in the window),
with the syncs per second each side reached.

The resource quota workload (``quota``, :mod:`bench.quota`) runs in a cluster of its own per
side (kwok nodes for the burst's peak of pods at 250 a node): ``--quota-namespaces``
namespaces (100) of ``--quota-pods`` bare pods (100, bound to kwok nodes) and a
ResourceQuota each (pods, requests.cpu, requests.memory, count/configmaps); once every
quota's usage is right (the *settle* time, not metered), a burst deletes half of every
namespace's pods (``gracePeriodSeconds`` 0) and creates as many, and the span runs from its
first request to the first poll at which every quota's ``status.used`` equals what its
namespace holds. Upstream's side runs kube-controller-manager's resource quota controller;
Steward's runs Steward's informer, manager and resource quota controller and no other of
its controllers, kube-controller-manager all the others. 5 workers on both sides
(upstream's ``--concurrent-resource-quota-syncs`` default and Steward's). Its figures are
per pod churned (deleted or created). At its default sizes a side takes about 15
minutes on two busy cores, most of it creating 10,000 pods and the burst's 10,000
requests.

The CronJob workload (``cronjob``, :mod:`bench.cronjob`) runs in a cluster of its own per
side (2 kwok nodes; Steward's side: Steward's CronJob and Job controllers and no other of
Steward's, kube-controller-manager all the others): ``--cronjobs`` CronJobs (500)
scheduled every minute, their Jobs suspended (no pods), all created before the first
measured minute, for ``--cronjob-minutes`` minutes (5). Its figures: each Job's lag
after its scheduled minute (when a watch first saw it, and its ``creationTimestamp``; p50,
p99, max), the Jobs missing per minute, and the rest per Job made in the span. 5 workers on both
sides (upstream's ``--concurrent-cron-job-syncs`` default and Steward's). Not in a run
without ``--workloads``: its minutes are real ones.

The StatefulSet workload (``statefulset``, :mod:`bench.statefulset`) runs in a cluster of
its own per side: one StatefulSet of ``--sts-replicas`` replicas (100), every policy at its
default (``OrderedReady``, ``RollingUpdate``), timed to all Ready, then a template change
timed to all updated and Ready at one revision. Steward's side runs Steward's StatefulSet
controller (the registry's ``statefulset``) and no other of Steward's. 5 workers on both sides
(upstream's ``--concurrent-statefulset-syncs`` default). Its figures are per replica. Not
in a run without ``--workloads``.

The garbage collection workload (``gc``, :mod:`bench.garbage`) runs in a cluster of its own
per side (kwok nodes for its pods at 200 a node), every one of Steward's controllers on
its side, its garbage collector and namespace controller in place of upstream's (20 and 10
workers on both sides, upstream's ``--concurrent-gc-syncs`` and
``--concurrent-namespace-syncs`` defaults and Steward's). Three spans are measured, each
from its first DELETE to the first poll that finds nothing left: ``--gc-deployments``
Deployments of ``--gc-replicas`` replicas deleted with propagationPolicy Background (until
every ReplicaSet and pod is gone), as many again with Foreground (until every Deployment
is gone), and ``--gc-namespaces`` namespaces of ``--gc-namespace-objects`` objects (until
every namespace is gone). Its figures are per Deployment and per namespace.

The garbage collector's memory (``gc_memory``, :mod:`bench.garbage`; the
:data:`GC_MEMORY_SETTING` setting only) is read in clusters of its own holding
``--gc-objects`` objects of 20 types, once the collector is synced: on upstream's side
twice, kube-controller-manager with every controller and with ``--controllers=
garbagecollector`` alone; on Steward's, its garbage collector (the only one of Steward's
controllers there) and its informer, apart. Neither garbage collection workload is in a
run without ``--workloads`` (:data:`DEFAULT_WORKLOADS`).

# Where the cost goes
For each workload, over its measured span: CPU seconds of every process of the cluster
(``/proc/<pid>/stat``), bytes each controller-side process read and wrote
(``/proc/<pid>/io``: sockets, so TLS bytes as they go on the wire; Steward's figure also
holds the informer-to-controller gRPC hop, counted at both ends), and the API requests of
each side by verb and resource, from kube-apiserver's audit log (level Metadata, the
controllers' identities only: ``system:kube-controller-manager`` and its
``kube-system`` service accounts, or ``steward:*``). With ``--profile``, an extra Job round
in the ``high`` Steward cluster (not measured) runs under py-spy, and the table lists
where Steward's Job controller spent its samples.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench import cronjob, daemonset, deployment, endpoints, garbage, hpa, job, quota, statefulset
from bench.informer import Api, report
from steward.cluster import ClusterConfig, LocalCluster
from steward.cluster.identities import (
    METRICS_ADAPTER_USER,
    METRICS_SERVER_USER,
    STEWARD_CONTROLLERS,
)
from steward.cluster.progress import Progress
from steward.controllers.endpointslice.sync import MANAGED_BY as ENDPOINTSLICE_MANAGED_BY

ROOT = Path(__file__).resolve().parent.parent
NODES = 8
WORKERS = 5
"""Workers per controller on both sides: kube-controller-manager's
``--concurrent-job-syncs``, ``--concurrent-replicaset-syncs``,
``--concurrent-deployment-syncs`` and ``--concurrent-endpoint-syncs`` defaults, and
Steward's controllers' defaults."""

WORKLOADS = (
    "job",
    "deployment",
    "endpoints",
    "daemonset",
    "hpa",
    "quota",
    "cronjob",
    "statefulset",
    "gc",
    "gc_memory",
)
"""Every workload, in the order they run."""
DEFAULT_WORKLOADS: tuple[str, ...] = (
    "job",
    "deployment",
    "endpoints",
    "daemonset",
    "hpa",
    "quota",
    "statefulset",
)
"""The workloads a run without ``--workloads`` runs (``make bench``): not the garbage
collection ones, which take about 25 minutes for both sides at the defaults setting and
their default sizes, and 100,000 objects created in each of three clusters for the
memory, on two cores; not the CronJob workload, whose minutes are real ones (about 8
minutes a side and setting at its default size): ``make bench`` runs it on its own, in
the defaults setting only."""
GC_SPANS = ("gc_background", "gc_foreground", "gc_namespaces")
"""The measured spans of the ``gc`` workload, each summarized as a workload of its own."""
SUMMARIZED = (*(w for w in WORKLOADS if w not in ("gc", "gc_memory")), *GC_SPANS)
"""The keys of a side's results that :func:`summarize_workload` summarizes."""
SHARED_CLUSTER = ("job", "deployment", "endpoints")
"""The workloads that share a side's first cluster (:data:`NODES` nodes); the DaemonSet
workload gets a cluster of its own (``--daemonset-nodes`` nodes), and so does the HPA
workload (with the metrics pipeline)."""

AUDIT_FLUSH_SECONDS = 2.5
"""How long the audit log's batches (at most 1 s old) are given to reach the file."""


@dataclass(frozen=True)
class Setting:
    """Client rate limits of both sides."""

    name: str
    qps: float
    burst: int

    def describe(self) -> str:
        return f"--kube-api-qps {self.qps:g} --kube-api-burst {self.burst} on both sides"


SETTINGS = {
    "defaults": Setting("defaults", 20, 30),
    "high": Setting("high", 1000, 2000),
}


@dataclass(frozen=True)
class Side:
    """Whose controllers run, and whether Steward traces."""

    name: str
    steward: bool
    content_type: str = ""
    """kube-controller-manager's ``--kube-api-content-type``; empty for protobuf."""


UPSTREAM = Side("upstream", steward=False)
STEWARD = Side("steward", steward=True)
UPSTREAM_JSON = Side("upstream_json", steward=False, content_type="application/json")
"""Upstream speaking JSON to kube-apiserver, as Steward does: what protobuf saves it."""

STEWARD_PROCESSES = (
    "informer",
    "manager",
    *(f"{name}-controller" for name in STEWARD_CONTROLLERS),
)
"""Steward's processes on its side (``make up`` names each controller's
``<name>-controller``): every controller Steward runs in place of upstream's counts,
whether or not the workload gives it work."""
KCM = "kube-controller-manager"
METRICS_USERS = (METRICS_SERVER_USER, METRICS_ADAPTER_USER)
"""The metrics pipeline's identities (the HPA workload's clusters): neither side's."""
STEWARD_SLICES = (
    ENDPOINTSLICE_MANAGED_BY
    if "endpointslice" in STEWARD_CONTROLLERS
    else endpoints.UPSTREAM_MANAGER
)
"""The managed-by value of the slices the Steward side's EndpointSlice controller writes."""


# ------------------------------------------------------------------------- measuring


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


def io_bytes(pids: dict[str, int]) -> dict[str, tuple[int, int]]:
    """Bytes each process has read and written so far (``rchar``, ``wchar``)."""
    out: dict[str, tuple[int, int]] = {}
    for name, pid in pids.items():
        try:
            rows = dict(
                line.split(": ", 1) for line in Path(f"/proc/{pid}/io").read_text().splitlines()
            )
        except OSError:
            continue
        out[name] = (int(rows["rchar"]), int(rows["wchar"]))
    return out


def identity_side(user: str) -> str:
    """Which side an API caller belongs to: upstream's controllers, Steward's, or other
    (the metrics pipeline's components, though named ``steward:``, serve both sides)."""
    if user == "system:kube-controller-manager" or user.startswith(
        "system:serviceaccount:kube-system:"
    ):
        return "upstream"
    if user in METRICS_USERS:
        return "other"
    if user.startswith("steward:"):
        return "steward"
    return "other"


def audit_time(seconds: float) -> str:
    """A time (``time.time()``) as the audit log writes its timestamps (RFC 3339, UTC,
    microseconds: fixed width, so that the strings compare as the times do)."""
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def audit_requests(
    path: Path, offset: int, between: tuple[float, float] | None = None
) -> dict[str, dict[str, dict[str, int]]]:
    """Requests in the audit log after byte ``offset``: side → user → "verb resource" →
    count. A watch is counted when it starts, any other request when it completes; with
    ``between`` (two ``time.time()`` values), only those whose stage is timestamped from
    the first to the second."""
    found: dict[str, dict[str, Counter[str]]] = {}
    since, until = (audit_time(between[0]), audit_time(between[1])) if between else ("", "")
    with path.open("rb") as f:
        f.seek(offset)
        for line in f:
            try:
                event = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # a line still being written
            verb = event.get("verb", "")
            stage = event.get("stage", "")
            if stage != ("ResponseStarted" if verb == "watch" else "ResponseComplete"):
                continue
            if between and not since <= event.get("stageTimestamp", "") <= until:
                continue
            user = (event.get("user") or {}).get("username", "")
            ref = event.get("objectRef") or {}
            resource = ref.get("resource", "?")
            if ref.get("subresource"):
                resource += "/" + ref["subresource"]
            side = identity_side(user)
            found.setdefault(side, {}).setdefault(user, Counter())[f"{verb} {resource}"] += 1
    return {side: {u: dict(c) for u, c in users.items()} for side, users in found.items()}


class Meter:
    """CPU, bytes and API requests of a cluster's processes over one measured span.

    By default the span's requests are all the audit log holds from its beginning until
    its batches are flushed after the end (right for a phase that ends idle). With
    ``clock_bounded`` they are only those timestamped within the span, as its CPU
    seconds are (for a span of steady work, such as the HPA workload's window); the
    figures then hold ``span_seconds``."""

    def __init__(self, cluster: LocalCluster, *, clock_bounded: bool = False) -> None:
        self.pids = {r.name: r.pid for r in cluster.iter_processes()}
        self.audit = cluster.directory / "audit.log"
        self.clock_bounded = clock_bounded
        self._cpu: dict[str, float] = {}
        self._io: dict[str, tuple[int, int]] = {}
        self._offset = 0
        self._began = 0.0

    def begin(self) -> None:
        time.sleep(AUDIT_FLUSH_SECONDS)  # the warm-up's requests land before the mark
        self._offset = self.audit.stat().st_size if self.audit.exists() else 0
        self._cpu = cpu_seconds(self.pids)
        self._io = io_bytes(self.pids)
        self._began = time.time()

    def end(self) -> dict[str, Any]:
        ended = time.time()
        cpu = cpu_seconds(self.pids)
        io = io_bytes(self.pids)
        time.sleep(AUDIT_FLUSH_SECONDS)
        bounded = (self._began, ended) if self.clock_bounded else None
        return ({"span_seconds": round(ended - self._began, 3)} if bounded else {}) | {
            "cpu_seconds": {
                n: round(cpu[n] - self._cpu.get(n, 0.0), 2) for n in sorted(cpu) if n in self._cpu
            },
            "io_bytes": {
                n: {"read": io[n][0] - self._io[n][0], "written": io[n][1] - self._io[n][1]}
                for n in sorted(io)
                if n in self._io
            },
            "requests": audit_requests(self.audit, self._offset, bounded),
        }


# ----------------------------------------------------------------------------- running


def start_cluster(
    side: Side,
    setting: Setting,
    out: Progress,
    nodes: int = NODES,
    purpose: str = "",
    *,
    only: tuple[str, ...] | None = None,
    metrics: bool = False,
    kcm_controllers: str = "*",
) -> LocalCluster:
    """A side's cluster. ``only``: on Steward's side, run only these of Steward's
    controllers (registry names), kube-controller-manager every other controller; on
    upstream's side it changes nothing. ``metrics``: the metrics pipeline
    (``ClusterConfig.metrics``). ``kcm_controllers``: upstream's side's
    kube-controller-manager ``--controllers`` (every one by default)."""
    name = "-".join(filter(None, ("steward-bench", side.name, setting.name, purpose)))
    state = Path(tempfile.mkdtemp(prefix=f"{name}-"))
    controllers = "*" if side.steward else kcm_controllers
    if side.steward and only is not None:
        controllers = ",".join(["*", *(f"-{c}" for c in only)])
    return LocalCluster.up(
        ClusterConfig(
            name=name,
            state_dir=state,
            nodes=nodes,
            die_with_parent=True,
            controllers=controllers,
            steward=side.steward,
            steward_controllers=only if side.steward else None,
            steward_tracing=False,
            metrics=metrics,
            kube_api_qps=setting.qps,
            kube_api_burst=setting.burst,
            kube_api_content_type=side.content_type,
            audit_log=True,
        ),
        progress=out,
    )


def profile_job_controller(
    cluster: LocalCluster, api: Api, args: argparse.Namespace, out: Progress
) -> dict[str, Any]:
    """An extra Job round under py-spy (not measured): the Job controller's samples by
    function, innermost frame (self) and anywhere on the stack (total)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        return {"error": "py-spy is not installed (make venv installs it)"}
    pid = next(r.pid for r in cluster.iter_processes() if r.name == "job-controller")
    raw = Path(tempfile.mkdtemp(prefix="steward-bench-profile-")) / "job-controller.txt"
    spy_proc = subprocess.Popen(
        [
            spy,
            "record",
            "--pid",
            str(pid),
            "--format",
            "raw",
            "--rate",
            "250",
            "--gil",  # only the thread holding the GIL: Python at work, never a wait
            "--output",
            str(raw),
            "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    time.sleep(1.0)
    try:
        job.run_phase(api, "bench-profile", args.jobs, args.threads, args.timeout)
    finally:
        spy_proc.send_signal(2)  # SIGINT: py-spy writes what it sampled and exits
        _, err = spy_proc.communicate(timeout=60)
    if not raw.exists():
        return {"error": f"py-spy wrote no profile: {err.decode(errors='replace')[-500:]}"}
    own: Counter[str] = Counter()
    anywhere: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [f.rsplit(" (", 1)[0] + " " + _where(f) for f in stack.split(";")]
        if "idle" in stack or not frames:
            continue
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            anywhere[f] += n
    out.say(f"profile: {total} samples of the job controller in {raw}")
    return {
        "samples": total,
        "raw": str(raw),
        "self": [(f, round(100 * n / max(total, 1), 1)) for f, n in own.most_common(15)],
        "total": [(f, round(100 * n / max(total, 1), 1)) for f, n in anywhere.most_common(25)],
    }


SPANS_DROPPED = "Queue full, dropping"
"""The OpenTelemetry SDK's warning for each span its batch processor's full queue drops."""


def tracing_order(rounds: int) -> list[bool]:
    """Whether each tracing round exports spans: off, on, on, off, off, on, ..."""
    return [i % 4 in (1, 2) for i in range(rounds)]


def log_sizes(cluster: LocalCluster) -> dict[str, int]:
    """The size of each of Steward's services' logs now, to read what a round adds."""
    sizes = {}
    for name in STEWARD_PROCESSES:
        log = cluster.state.log(name)
        sizes[name] = log.stat().st_size if log.exists() else 0
    return sizes


def spans_dropped(cluster: LocalCluster, since: dict[str, int]) -> int:
    """How many spans Steward's services dropped (:data:`SPANS_DROPPED` lines) in their
    logs since ``since`` (:func:`log_sizes`)."""
    dropped = 0
    for name, offset in since.items():
        log = cluster.state.log(name)
        if not log.exists():
            continue
        with log.open("rb") as f:
            f.seek(offset)
            dropped += f.read().count(SPANS_DROPPED.encode())
    return dropped


def tracing_rounds(
    cluster: LocalCluster, api: Api, args: argparse.Namespace, out: Progress
) -> dict[str, Any]:
    """Job rounds in one cluster with Steward's tracing off and on (module docs: the cost
    of tracing); tracing is off again at the end."""
    rounds: list[dict[str, Any]] = []
    for i, traced in enumerate(tracing_order(args.tracing_rounds)):
        cluster.set_steward_tracing(traced, progress=out)
        mode = "on" if traced else "off"
        out.say(f"high: steward: tracing round {i + 1} of {args.tracing_rounds}: tracing {mode}")
        logs = log_sizes(cluster)
        timing = job.run_phase(
            api, f"bench-tracing-{i}", args.jobs, args.threads, args.timeout, Meter(cluster)
        )
        cpu = timing["cpu_seconds"]
        own = sum(cpu.get(n, 0.0) for n in STEWARD_PROCESSES) / timing["jobs"]
        rounds.append(
            {
                "traced": traced,
                "seconds": timing["seconds"],
                "jobs_per_s": timing["jobs_per_s"],
                "steward_cpu_per_job": round(own, 5),
                "cpu_per_job": {
                    n: round(cpu[n] / timing["jobs"], 5) for n in STEWARD_PROCESSES if n in cpu
                },
                "apiserver_cpu_per_job": round(cpu.get("kube-apiserver", 0.0) / timing["jobs"], 5),
                "spans_dropped": spans_dropped(cluster, logs),
            }
        )
        out.say(
            f"  {timing['seconds']:.2f} s, {timing['jobs_per_s']:.0f} Jobs/s, Steward's CPU "
            f"per Job {own * 1000:.1f} ms, spans dropped {rounds[-1]['spans_dropped']}"
        )
    cluster.set_steward_tracing(False, progress=Progress(quiet=True))
    return summarize_tracing(rounds)


def summarize_tracing(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The rounds, and the cost of tracing from their means (module docs)."""
    on = [r for r in rounds if r["traced"]]
    off = [r for r in rounds if not r["traced"]]
    result: dict[str, Any] = {"rounds": rounds}
    if on and off:

        def mean(rs: list[dict[str, Any]], key: str) -> float:
            return statistics.fmean(r[key] for r in rs)

        result |= {
            "throughput_cost": round(1 - mean(on, "jobs_per_s") / mean(off, "jobs_per_s"), 3),
            "cpu_cost": round(
                mean(on, "steward_cpu_per_job") / mean(off, "steward_cpu_per_job") - 1, 3
            ),
            "apiserver_cpu_cost": round(
                mean(on, "apiserver_cpu_per_job") / mean(off, "apiserver_cpu_per_job") - 1, 3
            ),
            "spans_dropped": sum(r["spans_dropped"] for r in on),
        }
    return result


def _where(frame: str) -> str:
    """``(path/to/module.py:12)`` → ``(module.py)``: one name per function, not per line."""
    place = frame.rsplit(" (", 1)[-1].rstrip(")")
    return "(" + Path(place.rsplit(":", 1)[0]).name + ")"


def run_side(
    side: Side, setting: Setting, args: argparse.Namespace, out: Progress
) -> dict[str, Any]:
    """Every workload of ``args`` on one side: those of :data:`SHARED_CLUSTER` in one
    cluster, then the DaemonSet workload in a cluster of its own."""
    result: dict[str, Any] = {}
    if any(w in SHARED_CLUSTER for w in args.workloads):
        result |= run_shared(side, setting, args, out)
    if "daemonset" in args.workloads:
        result |= run_daemonsets(side, setting, args, out)
    if "hpa" in args.workloads:
        result |= run_hpas(side, setting, args, out)
    if "quota" in args.workloads:
        result |= run_quota(side, setting, args, out)
    if "cronjob" in args.workloads:
        result |= run_cronjobs(side, setting, args, out)
    if "statefulset" in args.workloads:
        result |= run_statefulset(side, setting, args, out)
    if "gc" in args.workloads:
        result |= run_gc(side, setting, args, out)
    if "gc_memory" in args.workloads and setting.name == GC_MEMORY_SETTING:
        result |= run_gc_memory(side, setting, args, out)
    return result


GC_MEMORY_SETTING = "defaults"
"""The setting the ``gc_memory`` workload runs in (memory does not depend on the limits;
each of its clusters holds ``--gc-objects`` objects, and a run takes minutes)."""


def run_gc(side: Side, setting: Setting, args: argparse.Namespace, out: Progress) -> dict[str, Any]:
    """The ``gc`` workload (:mod:`bench.garbage`): Deployments deleted in the background,
    then in the foreground, then namespaces full of objects, in a cluster of its own."""
    nodes = garbage.nodes_for(max(args.gc_deployments * args.gc_replicas, 1))
    out.say(
        f"{setting.name}: {side.name}: starting a cluster of {nodes} nodes for the garbage "
        f"collection workload ({setting.describe()})"
    )
    cluster = start_cluster(side, setting, out, nodes, "gc")
    result: dict[str, Any] = {}
    try:
        api = Api(cluster)
        for policy in garbage.POLICIES:
            out.say(
                f"{setting.name}: {side.name}: {args.gc_deployments} Deployments x "
                f"{args.gc_replicas} replicas, deleted with propagationPolicy {policy}"
            )
            timing = garbage.deletion_phase(
                api,
                f"bench-gc-{policy.lower()}",
                args.gc_deployments,
                args.gc_replicas,
                policy,
                args.threads,
                args.timeout,
                out,
                Meter(cluster),
            )
            result[f"gc_{policy.lower()}"] = timing | {"nodes": nodes}
            out.say(f"  gone in {timing['seconds']:.2f} s ({timing['gone_seconds']})")
        out.say(
            f"{setting.name}: {side.name}: {args.gc_namespaces} namespaces of "
            f"{args.gc_namespace_objects} objects, deleted"
        )
        timing = garbage.namespace_phase(
            api,
            "bench-gc-ns",
            args.gc_namespaces,
            args.gc_namespace_objects,
            args.gc_namespace_deployments,
            args.threads,
            args.timeout,
            out,
            Meter(cluster),
        )
        result["gc_namespaces"] = timing | {"nodes": nodes}
        out.say(
            f"  gone in {timing['seconds']:.2f} s (first {timing['first_gone_seconds']:.2f} s, "
            f"median {timing['median_gone_seconds']:.2f} s)"
        )
    finally:
        cluster.down(progress=Progress(quiet=True))
    return result


GC_MEMORY_PROCESSES = (KCM, "garbagecollector-controller", "informer")
"""The processes whose resident memory the ``gc_memory`` workload reads (those a side
has)."""


def run_gc_memory(
    side: Side, setting: Setting, args: argparse.Namespace, out: Progress
) -> dict[str, Any]:
    """The ``gc_memory`` workload (:mod:`bench.garbage`): resident memory with
    ``--gc-objects`` objects, in a cluster of its own. Upstream's side runs it twice:
    kube-controller-manager with every controller (``gc_memory``), and with only its
    garbage collector (``gc_memory_alone``); Steward's side runs its garbage collector as
    the only one of Steward's controllers, kube-controller-manager all the others."""
    runs = [("gc_memory", "*")] + (
        [("gc_memory_alone", "garbagecollector")] if not side.steward else []
    )
    result: dict[str, Any] = {}
    for key, controllers in runs:
        out.say(
            f"{setting.name}: {side.name}: starting a cluster for the garbage collector's "
            f"memory (kube-controller-manager --controllers={controllers})"
        )
        cluster = start_cluster(
            side,
            setting,
            out,
            2,
            key.replace("_", "-"),
            only=("garbagecollector",),
            kcm_controllers=controllers,
        )
        try:
            api = Api(cluster)
            pids = {
                r.name: r.pid for r in cluster.iter_processes() if r.name in GC_MEMORY_PROCESSES
            }
            out.say(f"{setting.name}: {side.name}: {args.gc_objects:,} objects of 20 types")
            measured = garbage.memory_phase(
                api, pids, args.gc_objects, args.threads, args.timeout, out
            )
            after = measured["rss_after"]
            out.say(
                "  resident: "
                + ", ".join(f"{n} {b / 2**20:.1f} MiB" for n, b in sorted(after.items()))
            )
            result[key] = measured | {"kcm_controllers": controllers}
        finally:
            cluster.down(progress=Progress(quiet=True))
    return result


def run_hpas(
    side: Side, setting: Setting, args: argparse.Namespace, out: Progress
) -> dict[str, Any]:
    """The HPA workload (:mod:`bench.hpa`) in a cluster of its own with the metrics
    pipeline; on Steward's side, Steward's HPA controller is the only one of Steward's."""
    nodes = hpa.nodes_for(args.hpas)
    out.say(
        f"{setting.name}: {side.name}: starting a cluster of {nodes} nodes with the metrics "
        f"pipeline for the HPA workload ({setting.describe()})"
    )
    cluster = start_cluster(side, setting, out, nodes, "hpa", only=(hpa.CONTROLLER,), metrics=True)
    try:
        api = Api(cluster)
        out.say(
            f"{setting.name}: {side.name}: {args.hpas} HPAs over one-replica Deployments, "
            f"{args.hpa_window:g} s of steady state measured"
        )
        measured = hpa.run_phase(
            api,
            "bench-hpas",
            args.hpas,
            args.hpa_window,
            side.steward,
            args.threads,
            args.timeout,
            out,
            Meter(cluster, clock_bounded=True),
        )
        out.say(
            f"  {measured['syncs']} HPA syncs in {measured['window_seconds']:.1f} s "
            f"({measured['syncs_per_s']:.1f}/s; every HPA every "
            f"{hpa.SYNC_PERIOD:g} s would be {measured['full_rate_syncs_per_s']:.1f}/s)"
        )
        return {"hpa": measured | {"nodes": nodes}}
    finally:
        cluster.down(progress=Progress(quiet=True))


def run_quota(
    side: Side, setting: Setting, args: argparse.Namespace, out: Progress
) -> dict[str, Any]:
    """The resource quota workload (:mod:`bench.quota`) in a cluster of its own; on
    Steward's side, Steward's resource quota controller is the only one of Steward's."""
    nodes = quota.nodes_for(args.quota_namespaces, args.quota_pods)
    out.say(
        f"{setting.name}: {side.name}: starting a cluster of {nodes} nodes for the resource "
        f"quota workload ({setting.describe()})"
    )
    cluster = start_cluster(side, setting, out, nodes, "quota", only=(quota.CONTROLLER,))
    try:
        api = Api(cluster)
        out.say(
            f"{setting.name}: {side.name}: {args.quota_namespaces} namespaces x "
            f"{args.quota_pods} pods and a quota each, then half the pods churned"
        )
        measured = quota.run_phase(
            api,
            args.quota_namespaces,
            args.quota_pods,
            nodes,
            side.steward,
            args.threads,
            args.timeout,
            out,
            Meter(cluster, clock_bounded=True),
        )
        out.say(
            f"  every quota right {measured['seconds']:.2f} s after the burst's first request "
            f"({measured['trailing_seconds']:.2f} s after its last); "
            f"{measured['status_writes']} status writes"
        )
        return {"quota": measured}
    finally:
        cluster.down(progress=Progress(quiet=True))


def run_cronjobs(
    side: Side, setting: Setting, args: argparse.Namespace, out: Progress
) -> dict[str, Any]:
    """The CronJob workload (:mod:`bench.cronjob`) in a cluster of its own; on Steward's
    side, Steward's CronJob and Job controllers are the only ones of Steward's."""
    out.say(
        f"{setting.name}: {side.name}: starting a cluster of {cronjob.NODES} nodes for the "
        f"CronJob workload ({setting.describe()})"
    )
    cluster = start_cluster(side, setting, out, cronjob.NODES, "cronjob", only=cronjob.CONTROLLERS)
    try:
        api = Api(cluster)
        out.say(
            f"{setting.name}: {side.name}: {args.cronjobs} CronJobs every minute, "
            f"{args.cronjob_minutes} minutes"
        )
        measured = cronjob.run_phase(
            api,
            "bench-cronjobs",
            args.cronjobs,
            args.cronjob_minutes,
            args.threads,
            out,
            Meter(cluster),
        )
        out.say(
            f"  {measured['jobs_seen']}/{measured['jobs_expected']} Jobs, lag seen p50 "
            f"{measured['seen_lag_p50_s']:.3f} s, p99 {measured['seen_lag_p99_s']:.3f} s, max "
            f"{measured['seen_lag_max_s']:.3f} s; missing per minute "
            f"{measured['missing_per_minute']}"
        )
        return {"cronjob": measured}
    finally:
        cluster.down(progress=Progress(quiet=True))


def run_statefulset(
    side: Side, setting: Setting, args: argparse.Namespace, out: Progress
) -> dict[str, Any]:
    """The StatefulSet workload (:mod:`bench.statefulset`) in a cluster of its own; on
    Steward's side, Steward's StatefulSet controller is the only one of Steward's."""
    nodes = statefulset.nodes_for(args.sts_replicas)
    out.say(
        f"{setting.name}: {side.name}: starting a cluster of {nodes} nodes for the "
        f"StatefulSet workload ({setting.describe()})"
    )
    cluster = start_cluster(
        side, setting, out, nodes, "statefulset", only=(statefulset.CONTROLLER,)
    )
    try:
        api = Api(cluster)
        out.say(
            f"{setting.name}: {side.name}: a StatefulSet of {args.sts_replicas} replicas, "
            "then a template change"
        )
        measured = statefulset.run_phase(
            api, "bench-statefulset", args.sts_replicas, args.timeout, out, Meter(cluster)
        )
        out.say(
            f"  all Ready {measured['ready_seconds']:.2f} s, rollout "
            f"{measured['rollout_seconds']:.2f} s"
        )
        return {"statefulset": measured | {"nodes": nodes}}
    finally:
        cluster.down(progress=Progress(quiet=True))


def run_daemonsets(
    side: Side, setting: Setting, args: argparse.Namespace, out: Progress
) -> dict[str, Any]:
    """The DaemonSet workload in a cluster of ``args.daemonset_nodes`` kwok nodes."""
    out.say(
        f"{setting.name}: {side.name}: starting a cluster of {args.daemonset_nodes} nodes "
        f"for the DaemonSet workload ({setting.describe()})"
    )
    cluster = start_cluster(side, setting, out, args.daemonset_nodes, "daemonset")
    try:
        api = Api(cluster)
        out.say(
            f"{setting.name}: {side.name}: {args.daemonsets} DaemonSets on "
            f"{args.daemonset_nodes} nodes, then a rolling update of all"
        )
        timing = daemonset.run_phase(
            api,
            "bench-daemonsets",
            args.daemonsets,
            args.threads,
            args.timeout,
            out,
            Meter(cluster),
        )
        out.say(
            f"  rollout {timing['rollout_seconds']:.2f} s, rolling update "
            f"{timing['rolling_update_seconds']:.2f} s"
        )
        return {"daemonset": timing}
    finally:
        cluster.down(progress=Progress(quiet=True))


def run_shared(
    side: Side, setting: Setting, args: argparse.Namespace, out: Progress
) -> dict[str, Any]:
    """The workloads of :data:`SHARED_CLUSTER` in one cluster of :data:`NODES` nodes."""
    out.say(f"{setting.name}: {side.name}: starting its cluster ({setting.describe()})")
    cluster = start_cluster(side, setting, out)
    result: dict[str, Any] = {}
    try:
        api = Api(cluster)
        meter = Meter(cluster)
        if "job" in args.workloads:
            out.say(f"{setting.name}: {side.name}: {args.jobs} Jobs")
            # The warm-up Job of run_phase syncs the controller; the meter starts after it.
            timing = job.run_phase(api, "bench-jobs", args.jobs, args.threads, args.timeout, meter)
            result["job"] = timing
            out.say(f"  {timing['seconds']:.2f} s, {timing['jobs_per_s']:.0f} Jobs/s")
        if "deployment" in args.workloads:
            out.say(
                f"{setting.name}: {side.name}: {args.deployments} Deployments x "
                f"{args.replicas} replicas"
            )
            meter.begin()
            timing = deployment.run_phase(
                api,
                "bench-deployments",
                args.deployments,
                args.replicas,
                args.threads,
                args.timeout,
                out,
            )
            timing.update(meter.end())
            result["deployment"] = timing
            out.say(
                f"  rollout {timing['initial_rollout_seconds']:.2f} s, rolling update "
                f"{timing['rolling_update_seconds']:.2f} s"
            )
        if "endpoints" in args.workloads:
            out.say(
                f"{setting.name}: {side.name}: {args.services} Services x "
                f"{args.pods_per_service} pods, then every pod's readiness flipped"
            )
            meter.begin()
            timing = endpoints.run_phase(
                api,
                "bench-endpoints",
                args.services,
                args.pods_per_service,
                args.threads,
                args.timeout,
                out,
                slice_manager=STEWARD_SLICES if side.steward else endpoints.UPSTREAM_MANAGER,
                rate=args.endpoints_rate,
            )
            timing.update(meter.end())
            result["endpoints"] = timing
            out.say(
                f"  created → correct {timing['created_to_correct_seconds']:.1f} s, flip → "
                f"correct {timing['flip_to_correct_seconds']:.1f} s; latency p50/p99 "
                f"Endpoints {timing['endpoints_latency_p50_ms']:.0f}/"
                f"{timing['endpoints_latency_p99_ms']:.0f} ms, slices "
                f"{timing['slices_latency_p50_ms']:.0f}/{timing['slices_latency_p99_ms']:.0f} ms"
            )
        if side == STEWARD and setting.name == "high" and "job" in args.workloads:
            if args.tracing_rounds:
                result["tracing"] = tracing_rounds(cluster, api, args, out)
            if args.profile:
                result["profile"] = profile_job_controller(cluster, api, args, out)
    finally:
        cluster.down(progress=Progress(quiet=True))
    return result


# ---------------------------------------------------------------------------- reporting


def summarize(side: Side, measured: dict[str, Any], units: int) -> dict[str, Any]:
    """The figures the table compares, per unit of work (a Job, a Deployment)."""
    cpu = measured["cpu_seconds"]
    if side.steward:
        own = {n: cpu[n] for n in STEWARD_PROCESSES if n in cpu}
        controller_cpu = sum(own.values()) + cpu.get(KCM, 0.0)
        processes = [*STEWARD_PROCESSES, KCM]
    else:
        own = {KCM: cpu.get(KCM, 0.0)}
        controller_cpu = cpu.get(KCM, 0.0)
        processes = [KCM]
    wire = sum(v["read"] + v["written"] for n, v in measured["io_bytes"].items() if n in processes)
    mine = "steward" if side.steward else "upstream"
    requests: Counter[str] = Counter()
    for per_user in measured["requests"].get(mine, {}).values():
        requests.update(per_user)
    return {
        "controller_cpu_per_unit": round(controller_cpu / units, 5),
        "own_cpu_per_unit": {n: round(s / units, 5) for n, s in own.items()},
        "apiserver_cpu_per_unit": round(cpu.get("kube-apiserver", 0.0) / units, 5),
        "etcd_cpu_per_unit": round(cpu.get("etcd", 0.0) / units, 5),
        "requests_per_unit": {
            k: round(n / units, 3) for k, n in sorted(requests.items(), key=lambda kv: -kv[1])
        },
        "requests_total_per_unit": round(sum(requests.values()) / units, 3),
        "wire_bytes_per_unit": round(wire / units),
    }


ENDPOINTS_FIGURES = (
    "created_to_correct_seconds",
    "flip_to_correct_seconds",
    "create_trailing_seconds",
    "flip_trailing_seconds",
    "endpoints_latency_p50_ms",
    "endpoints_latency_p99_ms",
    "slices_latency_p50_ms",
    "slices_latency_p99_ms",
)
"""The endpoints workload's figures, compared Steward / upstream (lower is better)."""


DAEMONSET_FIGURES = ("rollout_seconds", "rolling_update_seconds")
"""The DaemonSet workload's times, compared Steward / upstream (lower is better)."""


DAEMONSET_IDENTITIES = {
    False: "system:serviceaccount:kube-system:daemon-set-controller",
    True: "steward:controller:daemonset",
}
"""The DaemonSet controller's identity on each side (Steward's side: True). At upstream's
default limits its token bucket is what bounds the workload's times."""


HPA_CPU_FIGURES = (
    "controller_cpu_per_unit",
    "own_cpu_total_per_unit",
    "apiserver_cpu_per_unit",
    "metrics_server_cpu_per_unit",
)
"""The HPA workload's CPU seconds per sync, compared Steward / upstream: the controller
side (kube-controller-manager on both sides, Steward's processes on its own), the side's
own processes alone (upstream: kube-controller-manager), kube-apiserver, metrics-server."""


CRONJOB_FIGURES = (
    "seen_lag_p50_s",
    "seen_lag_p99_s",
    "seen_lag_max_s",
    "created_lag_p50_s",
    "created_lag_p99_s",
    "created_lag_max_s",
)
"""The CronJob workload's lags, compared Steward / upstream (lower is better)."""

CRONJOB_IDENTITIES = {
    False: "system:serviceaccount:kube-system:cronjob-controller",
    True: "steward:controller:cronjob",
}
"""The CronJob controller's identity on each side (Steward's side: True)."""

STATEFULSET_FIGURES = ("ready_seconds", "rollout_seconds")
"""The StatefulSet workload's times, compared Steward / upstream (lower is better)."""


QUOTA_FIGURES = ("seconds", "trailing_seconds", "settle_seconds")
"""The resource quota workload's times, compared Steward / upstream (lower is better): the
burst's span, its part after the last request, and the settle time."""

QUOTA_CPU_FIGURES = (
    "controller_cpu_per_unit",
    "own_cpu_total_per_unit",
    "apiserver_cpu_per_unit",
)
"""The resource quota workload's CPU seconds per pod churned, compared Steward / upstream:
the controller side (kube-controller-manager on both sides, Steward's processes on its
own), the side's own processes alone (upstream: kube-controller-manager), kube-apiserver."""


def identity_requests(measured: dict[str, Any], user: str, units: int) -> dict[str, float]:
    """One identity's API requests per unit, by verb and resource, and their total."""
    mine: Counter[str] = Counter()
    for per_user in measured["requests"].values():
        mine.update(per_user.get(user, {}))
    found = {k: round(n / units, 3) for k, n in sorted(mine.items(), key=lambda kv: -kv[1])}
    return found | {"total": round(sum(mine.values()) / units, 3)}


def units_of(workload: str, measured: dict[str, Any]) -> int:
    """What a workload's figures are per: a Job, a Deployment, a pod, a DaemonSet pod, an
    HPA sync, a pod churned, a CronJob's Job made in the span, a StatefulSet replica."""
    if workload == "hpa":
        return int(measured["syncs"])
    if workload == "quota":
        return int(measured["pods_churned"])
    if workload == "endpoints":
        return int(measured["services"] * measured["pods_per_service"])
    if workload == "cronjob":
        return int(measured["jobs_in_span"])
    if workload == "statefulset":
        return int(measured["replicas"])
    if workload == "daemonset":
        return int(measured["daemonsets"] * measured["nodes"])
    if workload == "gc_namespaces":
        return int(measured["namespaces"])
    return int(measured["jobs" if workload == "job" else "deployments"])  # gc: Deployments


def summarize_workload(side: Side, workload: str, measured: dict[str, Any]) -> dict[str, Any]:
    """:func:`summarize` per unit of the workload; for the DaemonSet workload also the
    requests of the DaemonSet controller's own identity."""
    units = units_of(workload, measured)
    if units <= 0:
        raise RuntimeError(f"{side.name}: the {workload} workload measured no unit of work")
    summary = summarize(side, measured, units)
    if workload == "daemonset":
        summary["daemonset_controller_requests_per_unit"] = identity_requests(
            measured, DAEMONSET_IDENTITIES[side.steward], units
        )
    if workload == "cronjob":
        summary["cronjob_controller_requests_per_unit"] = identity_requests(
            measured, CRONJOB_IDENTITIES[side.steward], units
        )
    if workload == "statefulset":
        summary["statefulset_controller_requests_per_unit"] = identity_requests(
            measured, statefulset.IDENTITIES[side.steward], units
        )
    if workload in GC_SPANS:
        for name in garbage.CONTROLLERS:
            summary[f"{name}_requests_per_unit"] = identity_requests(
                measured, garbage.IDENTITIES[side.steward][name], units
            )
        summary["kwok_cpu_per_unit"] = round(measured["cpu_seconds"].get("kwok", 0.0) / units, 5)
    if workload == "hpa":
        cpu = measured["cpu_seconds"]
        summary["hpa_controller_requests_per_unit"] = identity_requests(
            measured, hpa.IDENTITIES[side.steward], units
        )
        summary["own_cpu_total_per_unit"] = round(sum(summary["own_cpu_per_unit"].values()), 5)
        for name in ("metrics-server", "metrics-adapter", "kwok"):
            key = f"{name.replace('-', '_')}_cpu_per_unit"
            summary[key] = round(cpu.get(name, 0.0) / units, 5)
    if workload == "quota":
        summary["quota_controller_requests_per_unit"] = identity_requests(
            measured, quota.IDENTITIES[side.steward], units
        )
        summary["own_cpu_total_per_unit"] = round(sum(summary["own_cpu_per_unit"].values()), 5)
        summary["kwok_cpu_per_unit"] = round(measured["cpu_seconds"].get("kwok", 0.0) / units, 5)
    return summary


def _ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else float("nan")


def compare(results: dict[str, Any]) -> dict[str, Any]:
    """Ratios Steward / upstream per setting and workload (time: lower is better; the HPA
    workload's syncs per second: higher is better)."""
    out: dict[str, Any] = {}
    for setting, sides in results["settings"].items():
        up, st = sides.get("upstream", {}), sides.get("steward", {})
        c: dict[str, Any] = {}
        if "job" in up and "job" in st:
            c["job_time_ratio"] = _ratio(up["job"]["jobs_per_s"], st["job"]["jobs_per_s"])
            u, s = up["job"]["summary"], st["job"]["summary"]
            c["job_controller_cpu_ratio"] = _ratio(
                s["controller_cpu_per_unit"], u["controller_cpu_per_unit"]
            )
            c["job_apiserver_cpu_ratio"] = _ratio(
                s["apiserver_cpu_per_unit"], u["apiserver_cpu_per_unit"]
            )
        if "deployment" in up and "deployment" in st:
            for key in ("initial_rollout_seconds", "rolling_update_seconds"):
                c[f"deployment_{key.removesuffix('_seconds')}_ratio"] = _ratio(
                    st["deployment"][key], up["deployment"][key]
                )
        if "endpoints" in up and "endpoints" in st:
            for key in ENDPOINTS_FIGURES:
                c[f"endpoints_{key}_ratio"] = _ratio(st["endpoints"][key], up["endpoints"][key])
        if "daemonset" in up and "daemonset" in st:
            for key in DAEMONSET_FIGURES:
                c[f"daemonset_{key.removesuffix('_seconds')}_ratio"] = _ratio(
                    st["daemonset"][key], up["daemonset"][key]
                )
            u, s = up["daemonset"]["summary"], st["daemonset"]["summary"]
            for key in ("controller_cpu_per_unit", "apiserver_cpu_per_unit"):
                c[f"daemonset_{key.removesuffix('_per_unit')}_ratio"] = _ratio(s[key], u[key])
        if "hpa" in up and "hpa" in st:
            c["hpa_syncs_per_s_ratio"] = _ratio(st["hpa"]["syncs_per_s"], up["hpa"]["syncs_per_s"])
            u, s = up["hpa"]["summary"], st["hpa"]["summary"]
            for key in HPA_CPU_FIGURES:
                c[f"hpa_{key.removesuffix('_per_unit')}_ratio"] = _ratio(s[key], u[key])
        if "quota" in up and "quota" in st:
            for key in QUOTA_FIGURES:
                c[f"quota_{key.removesuffix('_seconds')}_ratio"] = _ratio(
                    st["quota"][key], up["quota"][key]
                )
            u, s = up["quota"]["summary"], st["quota"]["summary"]
            for key in QUOTA_CPU_FIGURES:
                c[f"quota_{key.removesuffix('_per_unit')}_ratio"] = _ratio(s[key], u[key])
        if "cronjob" in up and "cronjob" in st:
            for key in CRONJOB_FIGURES:
                c[f"cronjob_{key.removesuffix('_s')}_ratio"] = _ratio(
                    st["cronjob"][key], up["cronjob"][key]
                )
            u, s = up["cronjob"]["summary"], st["cronjob"]["summary"]
            for key in ("controller_cpu_per_unit", "apiserver_cpu_per_unit"):
                c[f"cronjob_{key.removesuffix('_per_unit')}_ratio"] = _ratio(s[key], u[key])
        if "statefulset" in up and "statefulset" in st:
            for key in STATEFULSET_FIGURES:
                c[f"statefulset_{key.removesuffix('_seconds')}_ratio"] = _ratio(
                    st["statefulset"][key], up["statefulset"][key]
                )
            u, s = up["statefulset"]["summary"], st["statefulset"]["summary"]
            for key in ("controller_cpu_per_unit", "apiserver_cpu_per_unit"):
                c[f"statefulset_{key.removesuffix('_per_unit')}_ratio"] = _ratio(s[key], u[key])
        for span in GC_SPANS:
            if span in up and span in st:
                c[f"{span}_time_ratio"] = _ratio(st[span]["seconds"], up[span]["seconds"])
                u, s = up[span]["summary"], st[span]["summary"]
                for key in ("controller_cpu_per_unit", "apiserver_cpu_per_unit"):
                    c[f"{span}_{key.removesuffix('_per_unit')}_ratio"] = _ratio(s[key], u[key])
        if "gc_memory" in up and "gc_memory" in st:
            steward_gc = st["gc_memory"]["rss_after"].get("garbagecollector-controller", 0)
            for key in ("gc_memory", "gc_memory_alone"):
                if key in up:
                    c[f"{key}_rss_ratio"] = _ratio(steward_gc, up[key]["rss_after"].get(KCM, 0))
        as_json = sides.get("upstream_json", {})
        if "job" in as_json and "job" in up:
            c["upstream_json_apiserver_cpu_ratio"] = _ratio(
                as_json["job"]["summary"]["apiserver_cpu_per_unit"],
                up["job"]["summary"]["apiserver_cpu_per_unit"],
            )
        out[setting] = c
    return out


def _per_job_table(
    up: dict[str, Any], st: dict[str, Any], units: str
) -> list[tuple[str, str, str]]:
    u, s = up["summary"], st["summary"]
    rows = [
        (
            f"controller-side CPU s per {units}",
            f"{u['controller_cpu_per_unit'] * 1000:.1f} ms",
            f"{s['controller_cpu_per_unit'] * 1000:.1f} ms",
        ),
        *[
            (f"  {name}", "", f"{secs * 1000:.1f} ms")
            for name, secs in s["own_cpu_per_unit"].items()
        ],
        (
            "  kube-controller-manager (its other controllers, Steward's side)",
            "",
            f"{(s['controller_cpu_per_unit'] - sum(s['own_cpu_per_unit'].values())) * 1000:.1f} ms",
        ),
        (
            f"kube-apiserver CPU s per {units}",
            f"{u['apiserver_cpu_per_unit'] * 1000:.1f} ms",
            f"{s['apiserver_cpu_per_unit'] * 1000:.1f} ms",
        ),
        (
            f"etcd CPU s per {units}",
            f"{u['etcd_cpu_per_unit'] * 1000:.1f} ms",
            f"{s['etcd_cpu_per_unit'] * 1000:.1f} ms",
        ),
        (
            f"API requests per {units} (own identities, audit log)",
            f"{u['requests_total_per_unit']:.2f}",
            f"{s['requests_total_per_unit']:.2f}",
        ),
    ]
    keys = list(dict.fromkeys([*u["requests_per_unit"], *s["requests_per_unit"]]))
    for key in keys:
        a, b = u["requests_per_unit"].get(key, 0.0), s["requests_per_unit"].get(key, 0.0)
        if a >= 0.01 or b >= 0.01:
            rows.append((f"  {key}", f"{a:.2f}", f"{b:.2f}"))
    rows.append(
        (
            f"bytes read+written per {units} by the controller side",
            f"{u['wire_bytes_per_unit'] / 1024:.1f} KiB",
            f"{s['wire_bytes_per_unit'] / 1024:.1f} KiB",
        )
    )
    return rows


def _identity_request_rows(
    label: str, u: dict[str, float], s: dict[str, float], digits: int = 2
) -> list[tuple[str, str, str]]:
    """A controller identity's API requests per unit, the total then each verb and type."""
    rows = [(label, f"{u['total']:.{digits}f}", f"{s['total']:.{digits}f}")]
    for key in dict.fromkeys([*u, *s]):
        if key != "total":
            rows.append(
                (f"  {key}", f"{u.get(key, 0.0):.{digits}f}", f"{s.get(key, 0.0):.{digits}f}")
            )
    return rows


def _kcm_cpu_rows(
    up: dict[str, Any], st: dict[str, Any], unit: str, ratios: dict[str, Any], prefix: str
) -> list[tuple[str, str, str]]:
    """The per-unit rows of a workload whose upstream side is all of kube-controller-manager
    (its first row, CPU, with the ``<prefix>_controller_cpu_ratio``), then Steward's own
    processes against it (``<prefix>_own_cpu_total_ratio``)."""
    cpu_label, cpu_up, cpu_st = (per_unit := _per_job_table(up, st, unit))[0]
    u, s = up["summary"], st["summary"]
    return [
        (
            f"{cpu_label} (kube-controller-manager on both sides)",
            cpu_up,
            f"{cpu_st} (ratio {ratios[f'{prefix}_controller_cpu_ratio']:.2f})",
        ),
        *per_unit[1:],
        (
            "Steward's processes alone / all of upstream's kube-controller-manager",
            f"{u['own_cpu_total_per_unit'] * 1000:.2f} ms",
            f"{s['own_cpu_total_per_unit'] * 1000:.2f} ms "
            f"(ratio {ratios[f'{prefix}_own_cpu_total_ratio']:.2f})",
        ),
    ]


def _daemonset_rows(
    up: dict[str, Any], st: dict[str, Any], ratios: dict[str, Any]
) -> list[tuple[str, str, str]]:
    what = f"{up['daemonsets']} DaemonSets x {up['nodes']} nodes"
    rows = []
    for key, label in (
        ("rollout_seconds", "rolled out"),
        ("rolling_update_seconds", "rolling update of all"),
    ):
        r = ratios[f"daemonset_{key.removesuffix('_seconds')}_ratio"]
        rows.append((f"{what}: {label}", f"{up[key]:.2f} s", f"{st[key]:.2f} s (ratio {r:.2f})"))
    rows += _per_job_table(up, st, "DaemonSet pod")
    u = up["summary"].get("daemonset_controller_requests_per_unit")
    s = st["summary"].get("daemonset_controller_requests_per_unit")
    if u is not None and s is not None:
        rows += _identity_request_rows(
            "API requests per DaemonSet pod of the DaemonSet controller's identity", u, s
        )
    return rows


def _cronjob_rows(
    up: dict[str, Any], st: dict[str, Any], ratios: dict[str, Any]
) -> list[tuple[str, str, str]]:
    what = f"{up['cronjobs']} CronJobs x {up['minutes']} minutes"
    rows = [
        (
            f"{what}: Jobs seen of expected",
            f"{up['jobs_seen']}/{up['jobs_expected']}",
            f"{st['jobs_seen']}/{st['jobs_expected']}",
        ),
        (
            "  Jobs missing per minute",
            " ".join(str(n) for n in up["missing_per_minute"]),
            " ".join(str(n) for n in st["missing_per_minute"]),
        ),
        (
            "  Jobs made in the span, any minute (the unit of the figures per Job)",
            f"{up['jobs_in_span']}",
            f"{st['jobs_in_span']}",
        ),
    ]
    for key, label in (
        ("seen_lag", "lag, scheduled → seen by a watch"),
        ("created_lag", "lag, scheduled → creationTimestamp (whole seconds)"),
    ):
        for q in ("p50", "p99", "max"):
            r = ratios[f"cronjob_{key}_{q}_ratio"]
            rows.append(
                (
                    f"  {label} {q}",
                    f"{up[f'{key}_{q}_s']:.3f} s",
                    f"{st[f'{key}_{q}_s']:.3f} s (ratio {r:.2f})",
                )
            )
    rows += _per_job_table(up, st, "Job")
    rows += _identity_request_rows(
        "API requests per Job of the CronJob controller's identity",
        up["summary"]["cronjob_controller_requests_per_unit"],
        st["summary"]["cronjob_controller_requests_per_unit"],
    )
    return rows


def _statefulset_rows(
    up: dict[str, Any], st: dict[str, Any], ratios: dict[str, Any]
) -> list[tuple[str, str, str]]:
    what = f"a StatefulSet of {up['replicas']} replicas"
    rows = []
    for key, label in (
        ("ready_seconds", "created → all Ready"),
        ("rollout_seconds", "template changed → all updated and Ready"),
    ):
        r = ratios[f"statefulset_{key.removesuffix('_seconds')}_ratio"]
        rows.append((f"{what}: {label}", f"{up[key]:.2f} s", f"{st[key]:.2f} s (ratio {r:.2f})"))
    rows += _per_job_table(up, st, "replica")
    rows += _identity_request_rows(
        "API requests per replica of the StatefulSet controller's identity",
        up["summary"]["statefulset_controller_requests_per_unit"],
        st["summary"]["statefulset_controller_requests_per_unit"],
    )
    return rows


def _hpa_rows(
    up: dict[str, Any], st: dict[str, Any], ratios: dict[str, Any]
) -> list[tuple[str, str, str]]:
    what = f"{up['hpas']} HPAs in steady state"
    r = ratios["hpa_syncs_per_s_ratio"]
    rows = [
        (
            f"{what}: HPA syncs in the window",
            f"{up['syncs']} in {up['window_seconds']:.1f} s",
            f"{st['syncs']} in {st['window_seconds']:.1f} s",
        ),
        (
            f"  syncs/s (each HPA every {up['sync_period_seconds']:g} s: "
            f"{up['full_rate_syncs_per_s']:.1f}/s)",
            f"{up['syncs_per_s']:.2f}",
            f"{st['syncs_per_s']:.2f} (ratio {r:.2f})",
        ),
        (
            "  status writes in the window; targets rescaled",
            f"{up['status_writes']}; {up['targets_rescaled']}",
            f"{st['status_writes']}; {st['targets_rescaled']}",
        ),
        (
            "  HPAs created → every one ScalingActive",
            f"{up['all_scaling_active_seconds']:.1f} s",
            f"{st['all_scaling_active_seconds']:.1f} s",
        ),
    ]
    u, s = up["summary"], st["summary"]
    rows += _kcm_cpu_rows(up, st, "HPA sync", ratios, "hpa")
    rows += [
        (
            "metrics-server CPU s per HPA sync",
            f"{u['metrics_server_cpu_per_unit'] * 1000:.2f} ms",
            f"{s['metrics_server_cpu_per_unit'] * 1000:.2f} ms "
            f"(ratio {ratios['hpa_metrics_server_cpu_ratio']:.2f})",
        ),
        (
            "kwok CPU s per HPA sync (simulated nodes, usage served)",
            f"{u['kwok_cpu_per_unit'] * 1000:.2f} ms",
            f"{s['kwok_cpu_per_unit'] * 1000:.2f} ms",
        ),
    ]
    rows += _identity_request_rows(
        "API requests per HPA sync of the HPA controller's identity",
        u["hpa_controller_requests_per_unit"],
        s["hpa_controller_requests_per_unit"],
    )
    return rows


def _quota_rows(
    up: dict[str, Any], st: dict[str, Any], ratios: dict[str, Any]
) -> list[tuple[str, str, str]]:
    what = f"{up['namespaces']} quotas over {up['namespaces']} x {up['pods_per_namespace']} pods"
    rows = []
    for key, label in (
        ("settle_seconds", "quotas created → every status.used right"),
        ("seconds", f"burst of {up['pods_churned']:,} pods churned → every status.used right"),
        ("trailing_seconds", "  of which after the burst's last request"),
    ):
        r = ratios[f"quota_{key.removesuffix('_seconds')}_ratio"]
        rows.append(
            (
                f"{what}: {label}" if not label.startswith(" ") else label,
                f"{up[key]:.2f} s",
                f"{st[key]:.2f} s (ratio {r:.2f})",
            )
        )
    rows.append(
        (
            "  the burst's requests (both sides alike)",
            f"{up['burst_requests_seconds']:.2f} s",
            f"{st['burst_requests_seconds']:.2f} s",
        )
    )
    u, s = up["summary"], st["summary"]
    rows += _kcm_cpu_rows(up, st, "pod churned", ratios, "quota")
    rows.append(
        (
            "kwok CPU s per pod churned (simulated nodes)",
            f"{u['kwok_cpu_per_unit'] * 1000:.2f} ms",
            f"{s['kwok_cpu_per_unit'] * 1000:.2f} ms",
        )
    )
    rows += _identity_request_rows(
        "API requests per pod churned of the resource quota controller's identity",
        u["quota_controller_requests_per_unit"],
        s["quota_controller_requests_per_unit"],
        digits=3,
    )
    rows.append(
        (
            "  quota status writes in the span (all)",
            f"{up['status_writes']}",
            f"{st['status_writes']}",
        )
    )
    return rows


GC_SPAN_LABELS = {
    "gc_background": ("propagationPolicy Background: every ReplicaSet and pod gone", "Deployment"),
    "gc_foreground": ("propagationPolicy Foreground: every Deployment gone", "Deployment"),
    "gc_namespaces": ("every namespace gone", "namespace"),
}


def _gc_rows(
    up: dict[str, Any], st: dict[str, Any], ratios: dict[str, Any]
) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    for span, (label, unit) in GC_SPAN_LABELS.items():
        if span not in up or span not in st:
            continue
        u, s = up[span], st[span]
        if span == "gc_namespaces":
            split = u["split"]
            what = (
                f"{u['namespaces']} namespaces x {u['objects_per_namespace']} objects "
                f"({split['configmaps']} ConfigMaps, {split['secrets']} Secrets, "
                f"{split['deployments']} one-pod Deployments)"
            )
        else:
            what = f"{u['deployments']} Deployments x {u['replicas']} deleted"
        r = ratios[f"{span}_time_ratio"]
        rows.append(
            (f"{what}: {label}", f"{u['seconds']:.2f} s", f"{s['seconds']:.2f} s (ratio {r:.2f})")
        )
        rows += _per_job_table(u, s, unit)
        for name in garbage.CONTROLLERS:
            uq, sq = (
                u["summary"][f"{name}_requests_per_unit"],
                s["summary"][f"{name}_requests_per_unit"],
            )
            rows.append(
                (f"  of which the {name} identity's", f"{uq['total']:.2f}", f"{sq['total']:.2f}")
            )
    if "gc_memory" in up and "gc_memory" in st:
        m = st["gc_memory"]
        rows.append(
            (
                f"resident memory, {m['objects']:,} objects of {m['types']} types, "
                "the collector synced",
                "",
                "",
            )
        )
        gc_rss = m["rss_after"].get("garbagecollector-controller", 0)
        for key, label in (
            ("gc_memory", "kube-controller-manager, every controller"),
            ("gc_memory_alone", "kube-controller-manager --controllers=garbagecollector"),
        ):
            if key not in up:
                continue
            kcm = up[key]
            rows.append(
                (
                    f"  {label} / Steward's garbage collector",
                    f"{kcm['rss_after'].get(KCM, 0) / 2**20:.1f} MiB "
                    f"(+{kcm['rss_growth_per_object'].get(KCM, 0):.0f} B/object)",
                    f"{gc_rss / 2**20:.1f} MiB "
                    f"(+{m['rss_growth_per_object'].get('garbagecollector-controller', 0):.0f} "
                    f"B/object; ratio {ratios[f'{key}_rss_ratio']:.2f})",
                )
            )
        rows.append(
            (
                "  Steward's informer (apart)",
                "",
                f"{m['rss_after'].get('informer', 0) / 2**20:.1f} MiB "
                f"(+{m['rss_growth_per_object'].get('informer', 0):.0f} B/object)",
            )
        )
    return rows


def _tracing_rows(tracing: dict[str, Any]) -> list[tuple[str, str, str]]:
    rounds = tracing["rounds"]
    listed = ", ".join(f"{'on' if r['traced'] else 'off'} {r['jobs_per_s']:.0f}" for r in rounds)
    return [
        (
            f"tracing on, every span exported: {len(rounds)} more Job rounds in Steward's cluster",
            "",
            f"Jobs/s {listed}",
        ),
        (
            "  cost of tracing (mean on ÷ mean off)",
            "",
            f"throughput {tracing['throughput_cost'] * 100:.1f} %; Steward's CPU per Job "
            f"{tracing['cpu_cost'] * 100:+.1f} %; kube-apiserver's "
            f"{tracing['apiserver_cpu_cost'] * 100:+.1f} %; spans dropped "
            f"{tracing['spans_dropped']}",
        ),
    ]


def table(results: dict[str, Any]) -> str:
    lines: list[str] = []
    for name, sides in results["settings"].items():
        setting = SETTINGS[name]
        up, st = sides.get("upstream", {}), sides.get("steward", {})
        ratios = results["ratios"].get(name, {})
        lines.append("")
        clusters = []
        if any(w in up for w in SHARED_CLUSTER):
            clusters.append(f"{WORKERS} workers per controller and {NODES} kwok nodes")
        if "daemonset" in up:
            d = up["daemonset"]
            clusters.append(
                f"{d['workers']} DaemonSet workers and {d['nodes']} kwok nodes in a cluster of "
                "the DaemonSet workload's own"
            )
        if "hpa" in up:
            h = up["hpa"]
            clusters.append(
                f"{h['workers']} HPA workers (kube-controller-manager's "
                "--concurrent-horizontal-pod-autoscaler-syncs, Steward's --workers), sync "
                f"period {h['sync_period_seconds']:g} s, {h['nodes']} kwok nodes and "
                "metrics-server in a cluster of the HPA workload's own (Steward's side: its "
                "HPA controller only; the Deployments' controllers upstream's on both sides, "
                "idle in the window)"
            )
        if "quota" in up:
            q = up["quota"]
            clusters.append(
                f"{q['workers']} resource quota workers (kube-controller-manager's "
                "--concurrent-resource-quota-syncs, Steward's --workers), full resync every "
                f"{q['sync_period_seconds']:g} s, {q['nodes']} kwok nodes in a cluster of the "
                "quota workload's own (Steward's side: its resource quota controller only)"
            )
        if "cronjob" in up:
            c = up["cronjob"]
            clusters.append(
                f"{c['workers']} CronJob workers and {c['nodes']} kwok nodes in a cluster of "
                "the CronJob workload's own (suspended Jobs: no pods; Steward's side: its CronJob "
                "and Job controllers only)"
            )
        if "statefulset" in up:
            t = up["statefulset"]
            clusters.append(
                f"{t['workers']} StatefulSet workers and {t['nodes']} kwok nodes in a cluster "
                "of the StatefulSet workload's own (Steward's side: its StatefulSet controller "
                "only)"
            )
        spans = [up[span] for span in GC_SPANS if span in up]
        if spans:
            clusters.append(
                f"20 garbage collector and 10 namespace workers and {spans[0]['nodes']} kwok "
                "nodes in a cluster of the gc workload's own"
            )
        if "gc_memory" in up:
            clusters.append("2 kwok nodes in each cluster of the gc_memory workload")
        lines.append(
            f"== setting '{name}': {setting.describe()}; {'; '.join(clusters)}; Steward as "
            "deployed (own identities, manager, mTLS), tracing off unless said"
        )
        rows: list[tuple[str, str, str]] = [("", "upstream", "Steward")]
        if "job" in up and "job" in st:
            n = up["job"]["jobs"]
            rows.append(
                (
                    f"{n} one-pod Jobs → Complete",
                    f"{up['job']['seconds']:.2f} s",
                    f"{st['job']['seconds']:.2f} s (ratio {ratios['job_time_ratio']:.2f})",
                )
            )
            rows.append(
                ("  Jobs/s", f"{up['job']['jobs_per_s']:.0f}", f"{st['job']['jobs_per_s']:.0f}")
            )
            rows += _per_job_table(up["job"], st["job"], "Job")
        tracing = st.get("tracing", {})
        if "throughput_cost" in tracing:
            rows += _tracing_rows(tracing)
        if "job" in sides.get("upstream_json", {}):
            js = sides["upstream_json"]["job"]
            rows.append(
                (
                    "upstream speaking JSON (--kube-api-content-type application/json)",
                    f"{js['seconds']:.2f} s",
                    f"kube-apiserver CPU per Job "
                    f"{js['summary']['apiserver_cpu_per_unit'] * 1000:.1f} ms, "
                    f"{ratios['upstream_json_apiserver_cpu_ratio']:.2f}x upstream's with protobuf",
                )
            )
        if "deployment" in up and "deployment" in st:
            d = up["deployment"]
            what = f"{d['deployments']} Deployments x {d['replicas']}"
            for key, label in (
                ("initial_rollout_seconds", "initial rollout"),
                ("rolling_update_seconds", "rolling update"),
            ):
                r = ratios[f"deployment_{key.removesuffix('_seconds')}_ratio"]
                rows.append(
                    (
                        f"{what}: {label}",
                        f"{up['deployment'][key]:.2f} s",
                        f"{st['deployment'][key]:.2f} s (ratio {r:.2f})",
                    )
                )
            rows += _per_job_table(up["deployment"], st["deployment"], "Deployment")
        if "endpoints" in up and "endpoints" in st:
            e = up["endpoints"]
            what = f"{e['services']} Services x {e['pods_per_service']} pods at {e['rate']:g}/s"
            for key, label, unit in (
                ("created_to_correct_seconds", "created → all correct", "s"),
                ("flip_to_correct_seconds", "readiness flipped → all correct", "s"),
                ("create_trailing_seconds", "  all correct after the last creation", "s"),
                ("flip_trailing_seconds", "  all correct after the last flip", "s"),
                ("endpoints_latency_p50_ms", "  flip → Endpoints p50", "ms"),
                ("endpoints_latency_p99_ms", "  flip → Endpoints p99", "ms"),
                ("slices_latency_p50_ms", "  flip → EndpointSlice p50", "ms"),
                ("slices_latency_p99_ms", "  flip → EndpointSlice p99", "ms"),
            ):
                r = ratios[f"endpoints_{key}_ratio"]
                rows.append(
                    (
                        f"{what}: {label}",
                        f"{e[key]:.1f} {unit}",
                        f"{st['endpoints'][key]:.1f} {unit} (ratio {r:.2f})",
                    )
                )
            rows += _per_job_table(up["endpoints"], st["endpoints"], "pod")
        if "daemonset" in up and "daemonset" in st:
            rows += _daemonset_rows(up["daemonset"], st["daemonset"], ratios)
        if "hpa" in up and "hpa" in st:
            rows += _hpa_rows(up["hpa"], st["hpa"], ratios)
        if "quota" in up and "quota" in st:
            rows += _quota_rows(up["quota"], st["quota"], ratios)
        if "cronjob" in up and "cronjob" in st:
            rows += _cronjob_rows(up["cronjob"], st["cronjob"], ratios)
        if "statefulset" in up and "statefulset" in st:
            rows += _statefulset_rows(up["statefulset"], st["statefulset"], ratios)
        rows += _gc_rows(up, st, ratios)
        w0 = max(len(r[0]) for r in rows)
        w1 = max(len(r[1]) for r in rows)
        lines += [f"{a:{w0}}  {b:>{w1}}  {c}".rstrip() for a, b, c in rows]
        profile = sides.get("steward", {}).get("profile")
        if profile:
            lines.append("")
            if "error" in profile:
                lines.append(f"profile of Steward's Job controller: {profile['error']}")
            else:
                lines.append(
                    f"profile of Steward's Job controller ({profile['samples']} py-spy samples "
                    f"of an extra, unmeasured round; raw: {profile['raw']}), self time:"
                )
                lines += [f"  {pct:5.1f} %  {fn}" for fn, pct in profile["self"]]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    out = Progress()
    results: dict[str, Any] = {
        "machine": {"cores": os.cpu_count()},
        "workers": WORKERS,
        "nodes": NODES,
        "settings": {},
    }
    for name in args.settings:
        setting = SETTINGS[name]
        sides = [UPSTREAM, STEWARD] + ([UPSTREAM_JSON] if name == "high" else [])
        sides = [s for s in sides if s.name in args.sides]
        per_side: dict[str, Any] = {}
        for side in sides:
            measured = run_side(side, setting, args, out)
            for workload in SUMMARIZED:
                if workload in measured:
                    measured[workload]["summary"] = summarize_workload(
                        side, workload, measured[workload]
                    )
            per_side[side.name] = measured
        results["settings"][name] = per_side | {
            "setting": {"qps": setting.qps, "burst": setting.burst}
        }
    results["ratios"] = compare(results)
    report(results, table(results), args.out)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.controllers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--settings",
        type=lambda s: s.split(","),
        default=["defaults", "high"],
        help="comma-separated settings to run: defaults, high (default: both)",
    )
    parser.add_argument(
        "--workloads",
        type=lambda s: s.split(","),
        default=list(DEFAULT_WORKLOADS),
        help=f"comma-separated workloads: {', '.join(WORKLOADS)} (default: "
        f"{', '.join(DEFAULT_WORKLOADS)}; "
        f"gc_memory runs in the {GC_MEMORY_SETTING} setting only)",
    )
    parser.add_argument(
        "--sides",
        type=lambda s: s.split(","),
        default=["upstream", "steward", "upstream_json"],
        help="comma-separated sides: upstream, steward, upstream_json (default: all; the "
        "last runs in the high setting only)",
    )
    parser.add_argument(
        "--tracing-rounds",
        type=int,
        default=4,
        help="Job rounds in Steward's high-setting cluster that measure the cost of tracing, "
        "off, on, on, off, ... (default 4; 0 skips them)",
    )
    parser.add_argument("--jobs", type=int, default=500, help="Jobs per phase (default 500)")
    parser.add_argument("--deployments", type=int, default=100, help="Deployments (default 100)")
    parser.add_argument("--replicas", type=int, default=10, help="replicas each (default 10)")
    parser.add_argument(
        "--services", type=int, default=200, help="Services of the endpoints workload (default 200)"
    )
    parser.add_argument(
        "--pods-per-service", type=int, default=50, help="pods of each Service (default 50)"
    )
    parser.add_argument(
        "--endpoints-rate",
        type=float,
        default=100.0,
        help="pods created, and later flipped, per second in the endpoints workload, the "
        "same on both sides (default 100)",
    )
    parser.add_argument(
        "--daemonsets",
        type=int,
        default=20,
        help="DaemonSets of the DaemonSet workload (default 20)",
    )
    parser.add_argument(
        "--daemonset-nodes",
        type=int,
        default=50,
        help="kwok nodes of the DaemonSet workload's cluster (default 50)",
    )
    parser.add_argument(
        "--hpas",
        type=int,
        default=500,
        help="HPAs of the HPA workload, each over a Deployment of its own (default 500)",
    )
    parser.add_argument(
        "--hpa-window",
        type=float,
        default=60.0,
        help="seconds of the HPA workload's steady state measured (default 60)",
    )
    parser.add_argument(
        "--quota-namespaces",
        type=int,
        default=100,
        help="namespaces of the resource quota workload, a quota each (default 100)",
    )
    parser.add_argument(
        "--quota-pods",
        type=int,
        default=100,
        help="pods of each of them, half churned in the burst (default 100)",
    )
    parser.add_argument(
        "--cronjobs",
        type=int,
        default=500,
        help="CronJobs of the CronJob workload, each every minute (default 500)",
    )
    parser.add_argument(
        "--cronjob-minutes",
        type=int,
        default=5,
        help="minutes the CronJob workload measures (default 5)",
    )
    parser.add_argument(
        "--sts-replicas",
        type=int,
        default=100,
        help="replicas of the StatefulSet workload's StatefulSet (default 100)",
    )
    parser.add_argument(
        "--gc-deployments",
        type=int,
        default=200,
        help="Deployments of the gc workload, deleted in each of its two phases (default 200)",
    )
    parser.add_argument(
        "--gc-replicas", type=int, default=10, help="replicas of each of them (default 10)"
    )
    parser.add_argument(
        "--gc-namespaces",
        type=int,
        default=50,
        help="namespaces of the gc workload's namespace phase (default 50)",
    )
    parser.add_argument(
        "--gc-namespace-objects",
        type=int,
        default=100,
        help="objects in each of them, Deployments, ReplicaSets and pods counted (default 100)",
    )
    parser.add_argument(
        "--gc-namespace-deployments",
        type=int,
        default=2,
        help="one-pod Deployments among each namespace's objects (default 2)",
    )
    parser.add_argument(
        "--gc-objects",
        type=int,
        default=100_000,
        help="objects of the gc_memory workload, as many of each of its 20 types (default 100000)",
    )
    parser.add_argument("--threads", type=int, default=8, help="requesting threads (default 8)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per phase")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="profile Steward's Job controller with py-spy in an extra round (high setting)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "controllers.json")
    args = parser.parse_args()
    unknown = [s for s in args.settings if s not in SETTINGS]
    if unknown:
        parser.error(f"unknown setting {', '.join(unknown)}; known: {', '.join(SETTINGS)}")
    bad = [w for w in args.workloads if w not in WORKLOADS]
    if bad:
        parser.error(f"unknown workload {', '.join(bad)}; known: {', '.join(WORKLOADS)}")
    if "gc_memory" in args.workloads and GC_MEMORY_SETTING not in args.settings:
        parser.error(
            f"gc_memory runs in the {GC_MEMORY_SETTING} setting only: add it to --settings"
        )
    sides = [s.name for s in (UPSTREAM, STEWARD, UPSTREAM_JSON)]
    bad = [s for s in args.sides if s not in sides]
    if bad:
        parser.error(
            f"unknown side {', '.join(bad)}; known: {', '.join(sides)} (the cost of tracing "
            "is measured in Steward's cluster: --tracing-rounds)"
        )
    if args.quota_namespaces < 1 or args.quota_pods < 2:
        parser.error("the quota workload needs a namespace or more and 2 pods or more in each")
    if args.cronjobs < 1 or args.cronjob_minutes < 1 or args.sts_replicas < 1:
        parser.error("--cronjobs, --cronjob-minutes and --sts-replicas must be 1 or more")
    if args.tracing_rounds < 0:
        parser.error(f"--tracing-rounds must not be negative, not {args.tracing_rounds}")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
