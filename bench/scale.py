"""Scale benchmark: Steward's informer side by side with a client-go informer, at scale.

Run with ``python -m bench.scale`` (``--help`` for the settings). Prints a table and writes
``bench-results/scale.json``. A local control plane of no nodes is started for the run; on
it, the same objects are informed on by Steward's informer (``steward informer`` as its
own process, plaintext and without authorization, with subscriber processes over gRPC, as
in :mod:`bench.informer`) and by the client-go peer (``bench/peer/``: a
``SharedInformerFactory`` informer of client-go v0.37.2, the release of the pinned
kube-apiserver, built and cached like the control plane's binaries). Both talk to
kube-apiserver as the cluster's admin. In the order they run:

1. burst: a burst of stamped writes (merge patches of ConfigMaps, as fast as the writer
   threads go) fanned out to 10 subscriber processes over gRPC, and, for client-go, to 10
   event handlers of one shared informer in one process (how kube-controller-manager
   fans out): events/s delivered (all receivers together, first arrival to last), and
   the delay from just before each write request to the event's arrival at each
   receiver (p50, p99).
2. watches: kube-apiserver's open WATCH requests on pods
   (``apiserver_longrunning_requests{verb="WATCH",resource="pods"}``, summed over scopes;
   this release no longer serves ``apiserver_registered_watchers``), less those open
   before, with 1 and with 10 controllers subscribed to pods: Steward's subscriber
   processes through one informer (the goal: the same count), and client-go controllers
   as separate processes, each with its own informer.
3. ingest: N ConfigMaps of about 1 KB (100,000 by default), then N Pods of about 4 KB
   (30,000: labels, annotations, two containers with env, resources, probes and volume
   mounts, volumes; ``spec.schedulerName`` names a scheduler that does not exist, so
   kube-scheduler leaves them alone, and there are no nodes). Per side: objects/s of the
   initial sync (Steward: the subscriber's Watch request to its INITIAL_EVENTS_END;
   client-go: ``factory.Start`` to ``HasSynced``), and the informer process's resident
   memory growth (VmRSS a settle time after the sync less VmRSS before the sync started)
   over the raw JSON size: the sum of every object's JSON bytes as a JSON LIST of the API
   server serves them (items re-encoded compactly, which for these objects is the API
   server's own encoding). The goal for Steward: at most 1.5, and no more than client-go's.

Content types. Steward's informer requests ``application/json``: a paginated LIST (500 a
page), then a WATCH. The client-go peer runs in modes (``--peer-modes``): ``json`` is
client-go's defaults for built-in types (``ContentType`` unset, so ``application/json``;
the WatchListClient feature on, so the initial sync is a WATCH with ``sendInitialEvents``
when the server allows it, which the table reports); ``json-list`` is the same with
WatchListClient off (a LIST, as Steward syncs); ``kcm`` is how kube-controller-manager
configures its informers (``application/vnd.kubernetes.protobuf`` and ``managedFields``
dropped by a transform). Steward's goal is judged against ``json``: same wire format, same
objects kept whole.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import operator
import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from bench.informer import Api, InformerProcess, Subscriber, report, start_cluster
from steward.cluster import LocalCluster
from steward.cluster.binaries import BENCH_PEER, resolve_tool
from steward.cluster.process import free_port
from steward.cluster.progress import Progress

ROOT = Path(__file__).resolve().parent.parent
NO_SCHEDULER = "steward-bench-no-such-scheduler"
"""``spec.schedulerName`` of the benchmark's Pods: no scheduler serves it."""
MiB = 1024 * 1024


@dataclass(frozen=True)
class PeerMode:
    """How the client-go peer is configured."""

    name: str
    content_type: str
    watch_list: bool
    trim_managed_fields: bool
    description: str

    def flags(self) -> list[str]:
        return [
            f"--content-type={self.content_type}",
            f"--watch-list={str(self.watch_list).lower()}",
            f"--trim-managed-fields={str(self.trim_managed_fields).lower()}",
        ]


PEER_MODES = {
    mode.name: mode
    for mode in (
        PeerMode("json", "json", True, False, "client-go defaults: JSON, WatchListClient on"),
        PeerMode("json-list", "json", False, False, "JSON, WatchListClient off (a LIST)"),
        PeerMode("kcm", "protobuf", True, True, "protobuf, managedFields dropped (as kcm)"),
    )
}


# --------------------------------------------------------------------------- measuring


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process, in bytes."""
    values: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) * 1024
    return values


def cpu_seconds(pid: int) -> float:
    """User and system CPU a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_SAMPLE = re.compile(r"^(\w+)\{([^}]*)\} (\S+)$")


def metric_sum(api: Api, name: str, **labels: str) -> float:
    """Sum of kube-apiserver's samples of ``name`` whose labels include ``labels``."""
    text = api.pool.request("GET", api.base + "/metrics").data.decode()
    total = 0.0
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match or match.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(match.group(3))
    return total


def open_watches(api: Api, resource: str) -> int:
    return int(metric_sum(api, "apiserver_longrunning_requests", verb="WATCH", resource=resource))


def settled_watches(
    api: Api, resource: str, want: Callable[[int], bool] = lambda _: True, timeout: float = 15
) -> int:
    """Open watches on ``resource`` once ``want`` holds of the count and it has not changed
    for a second (``timeout`` seconds at most)."""
    last, since = open_watches(api, resource), time.monotonic()
    deadline = since + timeout
    while time.monotonic() < deadline:
        if want(last) and time.monotonic() - since >= 1.0:
            break
        time.sleep(0.1)
        now = open_watches(api, resource)
        if now != last:
            last, since = now, time.monotonic()
    return last


def sync_requests(api: Api, resource: str) -> dict[str, float]:
    """kube-apiserver's counts of LISTs and of watch-list syncs of ``resource`` so far."""
    return {
        "lists": metric_sum(api, "apiserver_request_total", verb="LIST", resource=resource),
        "watch_lists": metric_sum(
            api, "apiserver_watch_list_duration_seconds_count", resource=resource
        ),
    }


def raw_json(api: Api, resource: str) -> tuple[int, int]:
    """Number of ``resource`` objects in the cluster and the sum of their JSON bytes, from
    a paginated JSON LIST (each item re-encoded compactly, as the API server encodes it)."""
    count = size = 0
    token = ""
    while True:
        query = "limit=500" + (f"&continue={token}" if token else "")
        page = api.request("GET", f"/api/v1/{resource}?{query}")
        for item in page["items"]:
            count += 1
            size += len(orjson.dumps(item))
        token = page["metadata"].get("continue") or ""
        if not token:
            return count, size


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else 0.0


# --------------------------------------------------------------------------- objects


def configmap_request(namespace: str, i: int) -> tuple[str, Any]:
    """A ConfigMap of about 1 KB as served (``Api.create_configmaps``'s shape)."""
    body = {"metadata": {"name": f"cm-{i:06d}", "labels": {"bench": "1"}}, "data": {"p": "x" * 800}}
    return f"/api/v1/namespaces/{namespace}/configmaps", body


def pod_body(i: int) -> dict[str, Any]:
    """A Pod of about 4 KB as served (managedFields and defaults included): a Deployment's
    backend with a log-shipping sidecar, no service account token mounted."""
    app = f"svc-{i % 40:02d}"
    main = {
        "name": "app",
        "image": f"registry.example.com/shop/{app}:1.24.3",
        "ports": [{"name": "http", "containerPort": 8080}],
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {
                "name": "DATABASE_PASSWORD",
                "valueFrom": {"secretKeyRef": {"name": f"{app}-db", "key": "password"}},
            },
        ],
        "resources": {
            "requests": {"cpu": "250m", "memory": "256Mi"},
            "limits": {"memory": "512Mi"},
        },
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10},
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}},
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/app", "readOnly": True},
            {"name": "cache", "mountPath": "/var/cache/app"},
        ],
    }
    sidecar = {
        "name": "log-shipper",
        "image": "registry.example.com/infra/log-shipper:3.1.0",
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
        "volumeMounts": [{"name": "cache", "mountPath": "/var/cache/app", "readOnly": True}],
    }
    return {
        "metadata": {
            "name": f"{app}-7d9f8c6b5d-{i:06d}",
            "labels": {"app": app, "pod-template-hash": "7d9f8c6b5d", "bench": "1"},
            "annotations": {
                "prometheus.io/scrape": "true",
                "checksum/config": hashlib.sha256(app.encode()).hexdigest()[:16],
            },
        },
        "spec": {
            "schedulerName": NO_SCHEDULER,
            "automountServiceAccountToken": False,
            "containers": [main, sidecar],
            "volumes": [
                {"name": "config", "configMap": {"name": f"{app}-config"}},
                {"name": "cache", "emptyDir": {}},
            ],
        },
    }


def namespaces(api: Api, prefix: str, count: int) -> list[str]:
    """``count`` namespaces, each with its ``default`` ServiceAccount (Pods need it)."""
    names = [f"{prefix}-{i}" for i in range(count)]
    for name in names:
        api.namespace(name)
    for name in names:
        deadline = time.monotonic() + 60
        while True:
            try:
                api.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    return names


def spread(names: list[str], count: int, request: Callable[[str, int], Any]) -> Iterator[Any]:
    """``count`` requests, round robin over the namespaces ``names``."""
    return (request(names[i % len(names)], i) for i in range(count))


def stamped_writes(api: Api, namespace: str, names: list[str], writes: int, threads: int) -> float:
    """``writes`` merge patches of the ConfigMaps ``names``, each stamping ``bench/sent``
    (Unix ns, taken just before its request), as fast as ``threads`` threads go; returns
    the achieved writes/s."""
    lock = threading.Lock()
    sent = 0

    def writer() -> None:
        nonlocal sent
        while True:
            with lock:
                i = sent
                if i >= writes:
                    return
                sent += 1
            patch = {"metadata": {"annotations": {"bench/sent": str(time.time_ns())}}}
            api.request(
                "PATCH",
                f"/api/v1/namespaces/{namespace}/configmaps/{names[i % len(names)]}",
                patch,
                "application/merge-patch+json",
            )

    started = time.perf_counter()
    workers = [threading.Thread(target=writer) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return writes / (time.perf_counter() - started)


# --------------------------------------------------------------------------- client-go


class Peer:
    """The client-go peer process (``bench/peer``), driven over its standard streams."""

    def __init__(
        self,
        binary: Path,
        cluster: LocalCluster,
        resource: str,
        mode: PeerMode,
        *,
        namespace: str = "",
        handlers: int = 1,
        expect: int = 0,
    ) -> None:
        cmd = [
            str(binary),
            f"--kubeconfig={cluster.kubeconfig}",
            f"--resource={resource}",
            f"--namespace={namespace}",
            f"--handlers={handlers}",
            f"--expect={expect}",
            *mode.flags(),
        ]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.read(30)  # {"ready": true}: the informer is built, not started

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put("")

    def read(self, timeout: float) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"the client-go peer said nothing for {timeout:.0f}s") from None
        if not line:
            raise RuntimeError(f"the client-go peer exited with {self.proc.wait()}")
        result: dict[str, Any] = json.loads(line)
        return result

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def start(self, timeout: float = 1800) -> dict[str, Any]:
        """Start the informer; its sync report once synced."""
        self.send("start")
        return self.read(timeout)

    def heap_live(self) -> int:
        """Go's live heap after a garbage collection, in bytes."""
        self.send("gc")
        return int(self.read(60)["heap_live_bytes"])

    def handler_results(self, handlers: int, timeout: float = 600) -> list[dict[str, Any]]:
        results = [self.read(timeout) for _ in range(handlers)]
        self.read(timeout)  # {"done": true}
        return results

    def stop(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --------------------------------------------------------------------------- benchmarks


Starter = Callable[[int], Callable[[], None]]
"""Starts controller ``i`` (once subscribed) and returns what stops it."""


def _watches_with(
    api: Api, controllers: int, side: Callable[[], AbstractContextManager[Starter]]
) -> dict[str, int]:
    """Open WATCHes on pods that 1, then ``controllers`` controllers add, each started by
    the starter that ``side()`` gives (what it needs runs while it is entered). Other
    components' watches come and go (the garbage collector's appear some seconds after
    start-up), so the count before must be back once the side is gone, else the round is
    measured again (3 rounds at most)."""
    rounds = 0
    while True:
        rounds += 1
        before = settled_watches(api, "pods")
        with side() as start:
            stops: list[Callable[[], None]] = []
            try:
                stops.append(start(0))
                one = settled_watches(api, "pods", partial(operator.lt, before)) - before
                stops += [start(i) for i in range(1, controllers)]
                many = settled_watches(api, "pods") - before
            finally:
                for stop in stops:
                    stop()
        after = settled_watches(api, "pods", partial(operator.eq, before), timeout=5)
        if after == before or rounds == 3:
            break
    return {"before": before, "one": one, "many": many, "after": after, "rounds": rounds}


def bench_watches(
    cluster: LocalCluster, api: Api, peer: Path, controllers: int, out: Progress
) -> dict[str, Any]:
    """Open WATCHes on pods at kube-apiserver with 1 and with ``controllers`` controllers:
    Steward's subscribers of one informer, and client-go processes."""

    @contextlib.contextmanager
    def steward() -> Iterator[Starter]:
        informer = InformerProcess(cluster, free_port())

        def start(i: int) -> Callable[[], None]:
            sub = Subscriber(
                informer.target, "", f"watch-{i}", 10**9, latency=False, resource="pods"
            )
            sub.ready()
            return sub.stop

        try:
            yield start
        finally:
            informer.stop()

    @contextlib.contextmanager
    def client_go() -> Iterator[Starter]:
        def start(_: int) -> Callable[[], None]:
            p = Peer(peer, cluster, "pods", PEER_MODES["json"])
            p.start()
            return p.stop

        yield start

    result: dict[str, Any] = {"controllers": controllers}
    result["steward"] = _watches_with(api, controllers, steward)
    out.say(f"watches: Steward {result['steward']['one']} → {result['steward']['many']}")
    result["client_go"] = _watches_with(api, controllers, client_go)
    out.say(f"watches: client-go {result['client_go']['one']} → {result['client_go']['many']}")
    return result


def _delivery(results: list[dict[str, Any]], writes: int, write_rate: float) -> dict[str, Any]:
    latencies = [lat for r in results for lat in r["latencies"]]
    total = sum(r["events"] for r in results)
    span = max(r["last"] for r in results) - min(r["first"] for r in results)
    return {
        "receivers": len(results),
        "writes": writes,
        "write_rate_per_s": write_rate,
        "delivered": total,
        "expected": writes * len(results),
        "events_per_s": total / max(span, 1e-9),
        "p50_ms": percentile(latencies, 50) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
        "max_ms": max(latencies, default=0.0) * 1000,
    }


def bench_burst(
    cluster: LocalCluster, api: Api, peer: Path, args: argparse.Namespace, out: Progress
) -> dict[str, Any]:
    """A burst of stamped writes to ``args.subscribers`` receivers, for each side."""
    ns = "scale-burst"
    api.namespace(ns)
    names = [f"burst-{i}" for i in range(args.burst_objects)]
    api.create_configmaps(ns, names, threads=args.threads)
    writes, receivers = args.burst_writes, args.subscribers
    informer = InformerProcess(cluster, free_port())
    try:
        subs = [
            Subscriber(informer.target, ns, f"burst-{i}", writes, latency=True)
            for i in range(receivers)
        ]
        for sub in subs:
            sub.ready()
        rate = stamped_writes(api, ns, names, writes, args.threads)
        steward = _delivery([sub.result() for sub in subs], writes, rate)
    finally:
        informer.stop()
    out.say(
        f"burst: Steward {steward['events_per_s']:,.0f} events/s, p99 {steward['p99_ms']:.0f} ms"
    )
    p = Peer(
        peer,
        cluster,
        "configmaps",
        PEER_MODES["json"],
        namespace=ns,
        handlers=receivers,
        expect=writes,
    )
    try:
        p.start()
        rate = stamped_writes(api, ns, names, writes, args.threads)
        client_go = _delivery(p.handler_results(receivers), writes, rate)
    finally:
        p.stop()
    out.say(
        f"burst: client-go {client_go['events_per_s']:,.0f} events/s, "
        f"p99 {client_go['p99_ms']:.0f} ms"
    )
    return {"steward": steward, "client_go": client_go}


def _growth(before: dict[str, int], after: dict[str, int], raw: int) -> dict[str, Any]:
    return {
        "rss_before_bytes": before["VmRSS"],
        "rss_after_bytes": after["VmRSS"],
        "rss_growth_bytes": after["VmRSS"] - before["VmRSS"],
        "peak_rss_bytes": after["VmHWM"],
        "rss_growth_per_raw_byte": (after["VmRSS"] - before["VmRSS"]) / raw,
    }


def steward_ingest(
    cluster: LocalCluster, resource: str, objects: int, raw: int, settle: float
) -> dict[str, Any]:
    informer = InformerProcess(cluster, free_port())
    pid = informer.proc.pid
    try:
        time.sleep(settle)
        before, cpu = memory(pid), cpu_seconds(pid)
        sub = Subscriber(
            informer.target, "", f"scale-{resource}", 10**9, latency=False, resource=resource
        )
        try:
            seconds = float(sub.ready()["snapshot_seconds"])
            time.sleep(settle)
            after, cpu = memory(pid), cpu_seconds(pid) - cpu
        finally:
            sub.stop()
    finally:
        informer.stop()
    return {
        "sync": "paginated LIST (JSON), then WATCH",
        "sync_seconds": seconds,
        "objects_per_s": objects / seconds,
        "cpu_seconds": cpu,
        **_growth(before, after, raw),
    }


def peer_ingest(
    cluster: LocalCluster,
    api: Api,
    peer: Path,
    resource: str,
    mode: PeerMode,
    objects: int,
    raw: int,
    settle: float,
) -> dict[str, Any]:
    p = Peer(peer, cluster, resource, mode)
    pid = p.proc.pid
    try:
        time.sleep(settle)
        before, cpu, requests = memory(pid), cpu_seconds(pid), sync_requests(api, resource)
        synced = p.start()
        time.sleep(settle)
        after, cpu = memory(pid), cpu_seconds(pid) - cpu
        done = sync_requests(api, resource)
        live = p.heap_live()
    finally:
        p.stop()
    if synced["objects"] != objects:
        raise RuntimeError(f"client-go cached {synced['objects']} {resource}, expected {objects}")
    if done["watch_lists"] > requests["watch_lists"]:
        how = f"WATCH with sendInitialEvents ({mode.content_type})"
    else:
        how = f"LIST ({mode.content_type}), then WATCH"
    seconds = float(synced["sync_seconds"])
    return {
        "mode": mode.name,
        "sync": how,
        "sync_seconds": seconds,
        "objects_per_s": objects / seconds,
        "cpu_seconds": cpu,
        "go_heap_live_bytes": live,
        **_growth(before, after, raw),
    }


def bench_ingest(
    cluster: LocalCluster,
    api: Api,
    peer: Path,
    resource: str,
    count: int,
    args: argparse.Namespace,
    out: Progress,
) -> dict[str, Any]:
    """Create ``count`` objects of ``resource``, then sync them with each side."""
    ns = namespaces(api, f"scale-{resource}", args.namespaces)
    request = configmap_request if resource == "configmaps" else _pod_request
    out.say(f"ingest: creating {count:,} {resource} in {len(ns)} namespaces")
    seconds = api.create_all(spread(ns, count, request), threads=args.threads, out=out, total=count)
    objects, raw = raw_json(api, resource)
    out.say(
        f"ingest: {count:,} {resource} created in {seconds:.0f}s ({count / seconds:,.0f}/s); "
        f"{objects:,} in the cluster, {raw / MiB:,.1f} MiB of JSON"
    )
    result: dict[str, Any] = {
        "created": count,
        "create_per_s": count / seconds,
        "objects": objects,
        "raw_json_bytes": raw,
        "mean_object_bytes": raw / objects,
    }
    result["steward"] = steward_ingest(cluster, resource, objects, raw, args.settle)
    out.say(_ingest_line("Steward", result["steward"]))
    for name in args.peer_modes:
        measured = peer_ingest(
            cluster, api, peer, resource, PEER_MODES[name], objects, raw, args.settle
        )
        result[f"client_go_{name}"] = measured
        out.say(_ingest_line(f"client-go {name}", measured))
    return result


def _pod_request(namespace: str, i: int) -> tuple[str, Any]:
    return f"/api/v1/namespaces/{namespace}/pods", pod_body(i)


def _ingest_line(side: str, r: dict[str, Any]) -> str:
    return (
        f"ingest: {side}: {r['objects_per_s']:,.0f} objects/s, RSS "
        f"+{r['rss_growth_bytes'] / MiB:,.1f} MiB = {r['rss_growth_per_raw_byte']:.2f} of raw JSON"
    )


# --------------------------------------------------------------------------- report


Row = tuple[str, str, str, str]


def _watch_rows(r: dict[str, Any]) -> list[Row]:
    n, s, c = r["controllers"], r["steward"], r["client_go"]
    goal = "met" if s["one"] == s["many"] else "NOT met"
    return [
        (
            "kube-apiserver WATCHes on pods, 1 controller",
            "Steward informer",
            f"{s['one']}",
            "apiserver_longrunning_requests{verb=WATCH,resource=pods}, less the "
            f"{s['before']} open before",
        ),
        ("", "client-go", f"{c['one']}", "one process with its own informer"),
        (
            f"kube-apiserver WATCHes on pods, {n} controllers",
            "Steward informer",
            f"{s['many']}",
            f"{n} subscriber processes of one informer; goal: as with 1 ({goal})",
        ),
        ("", "client-go", f"{c['many']}", f"{n} processes, each with its own informer"),
    ]


def _burst_rows(r: dict[str, Any]) -> list[Row]:
    s, c = r["steward"], r["client_go"]
    return [
        (
            f"burst of {s['writes']:,} writes → {s['receivers']} receivers: events/s",
            "Steward informer",
            f"{s['events_per_s']:,.0f} events/s",
            f"{s['receivers']} subscriber processes over gRPC; writers reached "
            f"{s['write_rate_per_s']:,.0f} writes/s; {s['delivered']:,}/{s['expected']:,} "
            "delivered",
        ),
        (
            "",
            "client-go",
            f"{c['events_per_s']:,.0f} events/s",
            f"{c['receivers']} handlers of one shared informer, one process (kcm's way); "
            f"writers reached {c['write_rate_per_s']:,.0f} writes/s",
        ),
        (
            "  delay, just before the write → arrival",
            "Steward informer",
            f"p50 {s['p50_ms']:.1f} ms, p99 {s['p99_ms']:.1f} ms",
            f"over all {s['receivers']} receivers' events; max {s['max_ms']:.0f} ms",
        ),
        (
            "",
            "client-go",
            f"p50 {c['p50_ms']:.1f} ms, p99 {c['p99_ms']:.1f} ms",
            f"at each handler's call; max {c['max_ms']:.0f} ms",
        ),
    ]


def _ingest_rows(resource: str, r: dict[str, Any], modes: list[str]) -> list[Row]:
    what = f"{r['objects']:,} {resource}, {r['mean_object_bytes'] / 1024:.1f} KB mean JSON"
    sides = [("Steward informer", r["steward"])] + [
        (f"client-go {m}", r[f"client_go_{m}"]) for m in modes
    ]
    rows: list[Row] = []
    for i, (side, m) in enumerate(sides):
        rows.append(
            (
                f"initial sync, {what}: objects/s" if i == 0 else "",
                side,
                f"{m['objects_per_s']:,.0f} objects/s",
                f"{m['sync']}; {m['sync_seconds']:.1f} s, {m['cpu_seconds']:.1f} s CPU",
            )
        )
    for i, (side, m) in enumerate(sides):
        note = (
            f"+{m['rss_growth_bytes'] / MiB:,.1f} MiB RSS over {r['raw_json_bytes'] / MiB:,.1f} "
            f"MiB raw JSON; peak RSS {m['peak_rss_bytes'] / MiB:,.0f} MiB"
        )
        if "go_heap_live_bytes" in m:
            note += f"; Go live heap {m['go_heap_live_bytes'] / MiB:,.0f} MiB"
        rows.append(
            (
                "  RSS growth ÷ raw JSON size" if i == 0 else "",
                side,
                f"{m['rss_growth_per_raw_byte']:.2f}",
                note,
            )
        )
    if "json" in modes:
        ratio = r["steward"]["rss_growth_per_raw_byte"]
        peer = r["client_go_json"]["rss_growth_per_raw_byte"]
        verdict = "met" if ratio <= 1.5 and ratio <= peer else "NOT met"
        rows.append(
            (
                "  goal: Steward ≤ 1.5 and ≤ client-go json",
                "",
                verdict,
                f"{ratio:.2f} against 1.5 and {peer:.2f}",
            )
        )
    return rows


def table(results: dict[str, Any]) -> str:
    rows: list[Row] = []
    if "burst" in results:
        rows += _burst_rows(results["burst"])
    if "watches" in results:
        rows += _watch_rows(results["watches"])
    for resource in ("configmaps", "pods"):
        if resource in results:
            rows += _ingest_rows(resource, results[resource], results["settings"]["peer_modes"])
    header: Row = ("figure", "side", "result", "setting")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(3)]
    lines = ["  ".join(f"{c:{w}}" for c, w in zip(header[:3], widths, strict=True)) + "  setting"]
    lines.append("-" * (sum(widths) + 6 + 40))
    lines += [
        "  ".join(f"{c:{w}}" for c, w in zip(row[:3], widths, strict=True)) + f"  {row[3]}"
        for row in rows
    ]
    modes = ", ".join(
        f"{m}: {PEER_MODES[m].description}" for m in results["settings"]["peer_modes"]
    )
    lines += [
        "",
        "Content types: Steward's informer requests application/json (paginated LIST of 500, "
        "then WATCH);",
        f"client-go peer ({results['settings']['client_go']}) modes: {modes}.",
        "The burst and watch figures use client-go's defaults (json).",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def run(args: argparse.Namespace) -> int:
    out = Progress()
    peer = resolve_tool(BENCH_PEER, out=out)
    cluster = start_cluster("steward-bench-scale", out)
    only = set(args.only or ["watches", "burst", "ingest"])
    results: dict[str, Any] = {
        "machine": {"cores": os.cpu_count()},
        "settings": {
            "configmaps": args.configmaps,
            "pods": args.pods,
            "namespaces": args.namespaces,
            "subscribers": args.subscribers,
            "burst_writes": args.burst_writes,
            "threads": args.threads,
            "settle_seconds": args.settle,
            "peer_modes": args.peer_modes,
            "client_go": f"k8s.io/client-go {BENCH_PEER.version()}",
            "steward_content_type": "application/json",
        },
    }
    try:
        api = Api(cluster)
        if "burst" in only:
            out.say(f"burst: {args.burst_writes:,} writes to {args.subscribers} receivers")
            results["burst"] = bench_burst(cluster, api, peer, args, out)
        if "watches" in only:
            # After the burst: the garbage collector's watches open in the first seconds.
            out.say(f"watches: pods, 1 and {args.subscribers} controllers")
            results["watches"] = bench_watches(cluster, api, peer, args.subscribers, out)
        if "ingest" in only:
            for resource, count in (("configmaps", args.configmaps), ("pods", args.pods)):
                if count > 0:
                    results[resource] = bench_ingest(cluster, api, peer, resource, count, args, out)
    finally:
        cluster.down(progress=Progress(quiet=True))
    report(results, table(results), args.out)
    return 0


def _modes(value: str) -> list[str]:
    modes = [m for m in value.split(",") if m]
    unknown = [m for m in modes if m not in PEER_MODES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown mode {', '.join(unknown)}; known: {', '.join(PEER_MODES)}"
        )
    return modes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--configmaps", type=int, default=100_000, help="ConfigMaps to ingest")
    parser.add_argument("--pods", type=int, default=30_000, help="Pods to ingest")
    parser.add_argument(
        "--namespaces", type=int, default=10, help="namespaces the ingested objects spread over"
    )
    parser.add_argument(
        "--subscribers", type=int, default=10, help="controllers for the burst and watches"
    )
    parser.add_argument("--burst-writes", type=int, default=2000, help="writes in the burst")
    parser.add_argument(
        "--burst-objects", type=int, default=100, help="ConfigMaps the burst writes to"
    )
    parser.add_argument("--threads", type=int, default=12, help="writer threads (HTTP pool)")
    parser.add_argument(
        "--settle",
        type=float,
        default=1.0,
        help="seconds between a sync and reading the resident memory (and before it)",
    )
    parser.add_argument(
        "--peer-modes",
        type=_modes,
        default=list(PEER_MODES),
        help=f"client-go configurations to ingest with, comma-separated (default: "
        f"{','.join(PEER_MODES)})",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=["watches", "burst", "ingest"],
        help="run only this benchmark (repeatable; default: all)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "scale.json")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
