"""Informer benchmarks: ingest from the API server, fan-out, write-to-event latency.

Run with ``make bench`` (or ``python -m bench.informer``). Prints a table and writes
``bench-results/informer.json``. Everything runs on loopback against a real local control
plane started for the run. Subscribers are separate processes (``python -m bench.informer
subscribe ...``) so that a client's decoding never shares a core's GIL with the informer.

1. ingest: objects/s of the informer's initial LIST of N ConfigMaps into its cache and on
   to a subscriber (time from the Watch request to INITIAL_EVENTS_END), and events/s of a
   burst of API writes arriving through the informer.
2. fan-out: 1 KB objects from a synthetic feed injected into the informer's fan-out
   (no API server in the path): events/s to one subscriber, and aggregate to four.
3. latency: API writes at a fixed rate (default 500/s); time from just before each write
   request to the event arriving at a subscriber: p50, p99.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import grpc
import orjson

from steward.cluster import ClusterConfig, LocalCluster
from steward.cluster.process import free_port
from steward.cluster.progress import Progress
from steward.serving.security import DEVELOPMENT
from steward.v1 import informer_pb2 as pb
from steward.v1 import informer_pb2_grpc as pb_grpc

CONFIGMAPS = pb.ResourceType(group="", version="v1", resource="configmaps")
PODS = pb.ResourceType(group="", version="v1", resource="pods")
TYPES = {"configmaps": CONFIGMAPS, "pods": PODS}
ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- API writes


class Api:
    """A thread-safe raw HTTPS client to kube-apiserver as cluster admin (for load)."""

    def __init__(self, cluster: LocalCluster) -> None:
        import urllib3

        pki = cluster.directory / "pki"
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self.base = cluster.state.server
        self.pool = urllib3.PoolManager(maxsize=16, ssl_context=ctx, retries=False)

    def request(self, method: str, path: str, body: Any = None, ctype: str = "") -> Any:
        headers = {"Content-Type": ctype or "application/json"}
        data = orjson.dumps(body) if body is not None else None
        resp = self.pool.request(method, self.base + path, body=data, headers=headers)
        if resp.status >= 300 and resp.status != 409:
            raise RuntimeError(f"{method} {path}: {resp.status} {resp.data[:300]!r}")
        return orjson.loads(resp.data) if resp.data else None

    def namespace(self, name: str) -> None:
        self.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})

    def create_all(
        self,
        requests: Iterable[tuple[str, Any]],
        *,
        threads: int = 8,
        out: Progress | None = None,
        total: int = 0,
    ) -> float:
        """POST each ``(path, body)`` from ``threads`` threads; returns the seconds it took.

        ``requests`` is drawn lazily, so a large batch is never all in memory. With ``out``,
        reports how many are done (of ``total``) every ``out.interval``."""
        started = time.perf_counter()
        pending = iter(requests)
        lock = threading.Lock()
        failed = threading.Event()
        done = 0

        def worker() -> None:
            nonlocal done
            while not failed.is_set():
                with lock:
                    request = next(pending, None)
                if request is None:
                    return
                try:
                    self.request("POST", *request)
                except BaseException:
                    failed.set()  # the others stop too; the error is raised below
                    raise
                with lock:
                    done += 1
                    count = done
                if out is not None:
                    rate = count / (time.perf_counter() - started)
                    out.tick(f"created {count:,}/{total:,} at {rate:,.0f}/s")

        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            for future in [pool.submit(worker) for _ in range(threads)]:
                future.result()
        return time.perf_counter() - started

    def create_configmaps(
        self, namespace: str, names: list[str], threads: int = 8, out: Progress | None = None
    ) -> float:
        """Create ConfigMaps of about 1 KB in parallel; returns the seconds it took."""
        payload = "x" * 800
        path = f"/api/v1/namespaces/{namespace}/configmaps"
        requests = (
            (path, {"metadata": {"name": name, "labels": {"bench": "1"}}, "data": {"p": payload}})
            for name in names
        )
        return self.create_all(requests, threads=threads, out=out, total=len(names))


# --------------------------------------------------------------------------- subscriber


def subscribe(args: argparse.Namespace) -> int:
    """Subscriber process: watch, report readiness, count or time events, print JSON."""
    channel = grpc.insecure_channel(
        args.target, options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)]
    )
    stub = pb_grpc.InformerServiceStub(channel)
    request = pb.WatchRequest(
        targets=[pb.WatchTarget(type=TYPES[args.resource])],
        namespace=args.namespace,
        subscriber=args.name,
        max_batch_size=args.batch,
    )
    started = time.time()
    synced_at = 0.0
    count = 0
    first = last = 0.0
    latencies: list[float] = []
    for response in stub.Watch(request):
        now = time.time()
        for event in response.events:
            if event.type == pb.EVENT_TYPE_INITIAL_EVENTS_END:
                synced_at = now
                print(json.dumps({"ready": True, "snapshot_seconds": now - started}), flush=True)
                continue
            if not synced_at or event.type not in (
                pb.EVENT_TYPE_ADDED,
                pb.EVENT_TYPE_MODIFIED,
            ):
                continue
            if args.latency:
                annotations = orjson.loads(event.object)["metadata"].get("annotations") or {}
                sent = annotations.get("bench/sent")
                if sent is None:
                    continue  # not one of ours (e.g. the namespace's kube-root-ca.crt)
                latencies.append(now - int(sent) / 1e9)
            if count == 0:
                first = now
            count += 1
            last = now
        if synced_at and count >= args.expect:
            break
    channel.close()
    print(
        json.dumps({"events": count, "first": first, "last": last, "latencies": latencies}),
        flush=True,
    )
    return 0


def subscribe_direct(args: argparse.Namespace) -> int:
    """Baseline subscriber: WATCH the API server itself (no informer), same measurement."""
    import urllib3

    state = json.loads(Path(args.direct).read_text())
    pki = Path(args.direct).parent / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    http = urllib3.PoolManager(ssl_context=ctx, retries=False)
    base = f"{state['server']}/api/v1/namespaces/{args.namespace}/configmaps"
    listing = orjson.loads(http.request("GET", base).data)
    rv = listing["metadata"]["resourceVersion"]
    resp = http.request(
        "GET",
        f"{base}?watch=1&allowWatchBookmarks=true&resourceVersion={rv}",
        preload_content=False,
        timeout=urllib3.Timeout(connect=10, read=None),
    )
    print(json.dumps({"ready": True, "snapshot_seconds": 0.0}), flush=True)
    latencies: list[float] = []
    count = 0
    first = last = 0.0
    buffer = b""
    for chunk in resp.stream(65536, decode_content=False):
        now = time.time()
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if not line:
                continue
            event = orjson.loads(line)
            annotations = event["object"]["metadata"].get("annotations") or {}
            sent = annotations.get("bench/sent")
            if sent is None:
                continue
            latencies.append(now - int(sent) / 1e9)
            if count == 0:
                first = now
            count += 1
            last = now
        if count >= args.expect:
            break
    resp.release_conn()
    print(json.dumps({"events": count, "first": first, "last": last, "latencies": latencies}))
    return 0


class Subscriber:
    """A subscriber process, started and read from the benchmark."""

    def __init__(
        self,
        target: str,
        namespace: str,
        name: str,
        expect: int,
        *,
        latency: bool,
        batch: int = 0,
        direct: Path | None = None,
        resource: str = "configmaps",
    ) -> None:
        cmd = [
            sys.executable,
            "-m",
            "bench.informer",
            "subscribe",
            "--target",
            target,
            "--namespace",
            namespace,
            "--name",
            name,
            "--expect",
            str(expect),
            "--batch",
            str(batch),
            "--resource",
            resource,
        ]
        if latency:
            cmd.append("--latency")
        if direct is not None:
            cmd += ["--direct", str(direct)]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.stdout = self.proc.stdout

    def ready(self) -> dict[str, Any]:
        line = self.stdout.readline()
        if not line:
            raise RuntimeError(f"subscriber exited with {self.proc.wait()} before it synced")
        result: dict[str, Any] = json.loads(line)
        return result

    def result(self, timeout: float = 300.0) -> dict[str, Any]:
        out, _ = self.proc.communicate(timeout=timeout)
        if self.proc.returncode != 0 or not out.strip():
            raise RuntimeError(f"subscriber failed with exit {self.proc.returncode}")
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return result

    def stop(self) -> None:
        """End the process without waiting for its result."""
        end_process(self.proc)


def end_process(proc: subprocess.Popen[Any], grace: float = 15.0) -> None:
    """SIGTERM ``proc``, and SIGKILL it if it is still there after ``grace`` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# --------------------------------------------------------------------------- informer


class InformerProcess:
    """``steward informer`` as its own process, as it is deployed."""

    def __init__(self, cluster: LocalCluster, port: int) -> None:
        self.target = f"127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "steward.cli",
                "informer",
                "--kubeconfig",
                str(cluster.kubeconfig),
                "--listen",
                self.target,
                # Throughput of the cache and fan-out, without TLS and reviews.
                "--insecure-plaintext",
                "--authorization-mode=AlwaysAllow",
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        channel = grpc.insecure_channel(self.target)
        grpc.channel_ready_future(channel).result(timeout=60)
        channel.close()

    def stop(self) -> None:
        end_process(self.proc)


# --------------------------------------------------------------------------- benchmarks


def bench_ingest(cluster: LocalCluster, api: Api, objects: int) -> dict[str, Any]:
    ns = "bench-ingest"
    api.namespace(ns)
    write_seconds = api.create_configmaps(ns, [f"cm-{i}" for i in range(objects)])
    informer = InformerProcess(cluster, free_port())
    try:
        started = time.time()
        burst = objects
        sub = Subscriber(informer.target, ns, "ingest", burst, latency=False)
        snapshot = sub.ready()
        list_seconds = time.time() - started
        burst_write = api.create_configmaps(ns, [f"burst-{i}" for i in range(burst)])
        result = sub.result()
    finally:
        informer.stop()
    watch_seconds = result["last"] - result["first"]
    return {
        "objects": objects,
        "list_ingest_objects_per_s": objects / list_seconds,
        "list_ingest_seconds": list_seconds,
        "snapshot_seconds_at_subscriber": snapshot["snapshot_seconds"],
        "api_create_rate_per_s": objects / write_seconds,
        "watch_events": result["events"],
        "watch_ingest_events_per_s": result["events"] / max(watch_seconds, 1e-9),
        "burst_write_rate_per_s": burst / burst_write,
    }


def _synthetic_events(namespace: str, count: int, rv0: int) -> Iterator[Any]:
    from steward.informer import wire
    from steward.informer.fanout import encode_event
    from steward.informer.store import EventKind, StoredObject, StoreEvent

    template = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "namespace": namespace,
            "uid": "00000000-0000-0000-0000-000000000000",
            "labels": {"bench": "1", "app": "synthetic"},
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "data": {"payload": "x" * 800},
    }
    rtype_field = wire.resource_type_field(CONFIGMAPS)
    for i in range(count):
        meta = template["metadata"]
        assert isinstance(meta, dict)
        meta["name"] = f"obj-{i}"
        meta["resourceVersion"] = str(rv0 + i)
        raw = orjson.dumps(template)
        obj = StoredObject(raw, orjson.loads(raw))
        event = StoreEvent(EventKind.ADDED, obj.key, obj, None, rv0 + i)
        # As a reflector does when the event enters the cache: ingest, not fan-out.
        event.wire = encode_event(event, rtype_field)
        yield event


async def _fanout(cluster: LocalCluster, subscribers: int, events: int) -> dict[str, Any]:
    from steward.informer.fanout import FAST_LANE_LIMIT
    from steward.informer.server import InformerOptions, InformerServer
    from steward.informer.store import ResourceTypeName

    ns = f"bench-fanout-{subscribers}"
    server = InformerServer(
        InformerOptions(
            security=DEVELOPMENT, listen="127.0.0.1:0", kubeconfig=str(cluster.kubeconfig)
        )
    )
    await server.start()
    target = f"127.0.0.1:{server.port}"
    loop = asyncio.get_running_loop()
    subs = [
        Subscriber(target, ns, f"fanout-{i}", events, latency=False) for i in range(subscribers)
    ]
    try:
        for sub in subs:
            await loop.run_in_executor(None, sub.ready)
        # Build the feed first: the benchmark measures fan-out, not JSON encoding.
        feed = list(_synthetic_events(ns, events, 10**12))
        name = ResourceTypeName("", "v1", "configmaps")
        # Keep each subscriber fed but never more than half the fast lane behind: this
        # measures throughput to subscribers that keep up (a feed that outruns them for
        # ever is flow control's business, tested in tests/informer/test_flow.py).
        bound = FAST_LANE_LIMIT
        cpu_started = time.process_time()
        chunk = 256
        for start in range(0, len(feed), chunk):
            # Pace the feed on the subscribers' lag (polled: the fan-out has no lag event).
            while max((lag for _, _, lag in server.fanout.lags()), default=0) > bound // 2:  # noqa: ASYNC110
                await asyncio.sleep(0.001)
            server.fanout.publish(name, feed[start : start + chunk])
            await asyncio.sleep(0)
        results = [await loop.run_in_executor(None, sub.result) for sub in subs]
        cpu = time.process_time() - cpu_started
    finally:
        await server.stop()
    total = sum(r["events"] for r in results)
    span = max(r["last"] for r in results) - min(r["first"] for r in results)
    return {
        "subscribers": subscribers,
        "events_per_subscriber": events,
        "delivered": total,
        "seconds": span,
        "events_per_s_aggregate": total / span,
        "informer_cpu_us_per_event": cpu / total * 1e6,
        "events_per_s_per_subscriber": [
            r["events"] / max(r["last"] - r["first"], 1e-9) for r in results
        ],
    }


def bench_latency(cluster: LocalCluster, api: Api, rate: float, seconds: float) -> dict[str, Any]:
    ns = "bench-latency"
    api.namespace(ns)
    objects = [f"lat-{i}" for i in range(50)]
    api.create_configmaps(ns, objects)
    informer = InformerProcess(cluster, free_port())
    writes = int(rate * seconds)
    try:
        sub = Subscriber(informer.target, ns, "latency", writes, latency=True, batch=1)
        sub.ready()
        # The same writes watched straight from the API server: the baseline the informer
        # adds to (both run at once, so they see the same load).
        direct = Subscriber(
            "", ns, "direct", writes, latency=True, direct=cluster.directory / "state.json"
        )
        direct.ready()
        interval = 1.0 / rate
        lock = threading.Lock()
        sent = 0
        errors = 0
        started = time.perf_counter()

        def writer() -> None:
            nonlocal sent, errors
            while True:
                with lock:
                    i = sent
                    if i >= writes:
                        return
                    sent += 1
                due = started + i * interval
                delay = due - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                patch = {"metadata": {"annotations": {"bench/sent": str(time.time_ns())}}}
                try:
                    api.request(
                        "PATCH",
                        f"/api/v1/namespaces/{ns}/configmaps/{objects[i % len(objects)]}",
                        patch,
                        "application/merge-patch+json",
                    )
                except RuntimeError:
                    with lock:
                        errors += 1

        threads = [threading.Thread(target=writer) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        achieved = writes / (time.perf_counter() - started)
        result = sub.result()
        baseline = direct.result()
    finally:
        informer.stop()

    def pct(values: list[float], p: float) -> float:
        ordered = sorted(values)
        return float(ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]) * 1000

    lat, base = result["latencies"], baseline["latencies"]
    return {
        "target_rate_per_s": rate,
        "achieved_rate_per_s": achieved,
        "writes": writes,
        "write_errors": errors,
        "events": len(lat),
        "p50_ms": pct(lat, 50),
        "p90_ms": pct(lat, 90),
        "p99_ms": pct(lat, 99),
        "max_ms": max(lat) * 1000,
        "apiserver_watch_p50_ms": pct(base, 50),
        "apiserver_watch_p99_ms": pct(base, 99),
    }


# --------------------------------------------------------------------------- main


def _table(results: dict[str, Any]) -> str:
    rows: list[tuple[str, str, str]] = []
    if "ingest" in results:
        rows += _ingest_rows(results)
    if "fanout_1" in results:
        rows += _fanout_rows(results)
    if "latency" in results:
        rows += _latency_rows(results)
    width = max(len(r[0]) for r in rows)
    vwidth = max(len(r[1]) for r in rows)
    lines = [f"{'benchmark':{width}}  {'result':{vwidth}}  notes", "-" * (width + vwidth + 30)]
    lines += [f"{a:{width}}  {b:{vwidth}}  {c}" for a, b, c in rows]
    return "\n".join(lines)


def _ingest_rows(results: dict[str, Any]) -> list[tuple[str, str, str]]:
    r = results["ingest"]
    return [
        (
            "ingest: initial LIST into cache → subscriber",
            f"{r['list_ingest_objects_per_s']:,.0f} objects/s",
            f"{r['objects']:,} ConfigMaps",
        ),
        (
            "ingest: burst of API writes → subscriber",
            f"{r['watch_ingest_events_per_s']:,.0f} events/s",
            f"writers achieved {r['burst_write_rate_per_s']:,.0f} writes/s",
        ),
    ]


def _fanout_rows(results: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (
            "fan-out, 1 KB objects, 1 subscriber",
            f"{results['fanout_1']['events_per_s_aggregate']:,.0f} events/s",
            "target ≥ 100,000",
        ),
        (
            "fan-out, 1 KB objects, 4 subscribers (aggregate)",
            f"{results['fanout_4']['events_per_s_aggregate']:,.0f} events/s",
            "target ≥ 100,000",
        ),
    ]


def _latency_rows(results: dict[str, Any]) -> list[tuple[str, str, str]]:
    r = results["latency"]
    return [
        (
            f"write → event latency at {r['target_rate_per_s']:.0f} writes/s",
            f"p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms",
            f"achieved {r['achieved_rate_per_s']:.0f} writes/s; target p99 ≤ 20 ms",
        ),
        (
            "  same writes, watched on the API server directly",
            f"p50 {r['apiserver_watch_p50_ms']:.1f} ms, p99 {r['apiserver_watch_p99_ms']:.1f} ms",
            "baseline: what the informer adds is the difference",
        ),
    ]


def start_cluster(name: str, out: Progress) -> LocalCluster:
    """A local control plane of no nodes for a benchmark run, in a fresh temporary state
    directory, its processes tied to this one (stop it with ``cluster.down``)."""
    state = Path(tempfile.mkdtemp(prefix=f"{name}-"))
    return LocalCluster.up(
        ClusterConfig(name=name, state_dir=state, nodes=0, die_with_parent=True), progress=out
    )


def run(args: argparse.Namespace) -> int:
    out = Progress()
    cluster = start_cluster("steward-bench", out)
    results: dict[str, Any] = {"machine": {"cores": os.cpu_count()}}
    try:
        api = Api(cluster)
        only = set(args.only or ["ingest", "fanout", "latency"])
        if "ingest" in only:
            out.say(f"ingest: {args.objects} ConfigMaps")
            results["ingest"] = bench_ingest(cluster, api, args.objects)
        if "fanout" in only:
            out.say(f"fan-out: {args.events} synthetic events to 1 subscriber")
            results["fanout_1"] = asyncio.run(_fanout(cluster, 1, args.events))
            out.say(f"fan-out: {args.events // 4} synthetic events to each of 4 subscribers")
            results["fanout_4"] = asyncio.run(_fanout(cluster, 4, args.events // 4))
        if "latency" in only:
            out.say(f"latency: {args.rate:.0f} writes/s for {args.seconds:.0f}s")
            results["latency"] = bench_latency(cluster, api, args.rate, args.seconds)
    finally:
        cluster.down(progress=Progress(quiet=True))
    report(results, _table(results), args.out)
    return 0


def report(results: dict[str, Any], table: str, path: Path) -> None:
    """Write ``results`` as JSON to ``path``, then print ``table`` and where the JSON is."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(table)
    print(f"\nJSON: {path}")


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.informer",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command")
    s = sub.add_parser("subscribe", help="(internal) one subscriber process")
    s.add_argument("--target", required=True)
    s.add_argument("--namespace", required=True)
    s.add_argument("--name", required=True)
    s.add_argument("--expect", type=int, required=True)
    s.add_argument("--batch", type=int, default=0)
    s.add_argument("--resource", choices=sorted(TYPES), default="configmaps")
    s.add_argument("--latency", action="store_true")
    s.add_argument("--direct", help="watch the API server of this state.json instead")
    parser.add_argument("--objects", type=int, default=5000, help="ConfigMaps for ingest")
    parser.add_argument("--events", type=int, default=200_000, help="synthetic events, 1 sub")
    parser.add_argument("--rate", type=float, default=500.0, help="writes/s for latency")
    parser.add_argument("--seconds", type=float, default=10.0, help="latency run length")
    parser.add_argument(
        "--only",
        action="append",
        choices=["ingest", "fanout", "latency"],
        help="run only this benchmark (repeatable; default: all)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "informer.json")
    args = parser.parse_args()
    if args.command == "subscribe":
        return subscribe_direct(args) if args.direct else subscribe(args)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
