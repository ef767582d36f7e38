"""The endpoints workload of ``make bench`` (:mod:`bench.controllers`): S Services of P
pods each, then every pod's readiness flipped once; how fast the Endpoints objects and
the EndpointSlices follow.

# The pods
The pods run on a node of the benchmark's own (:data:`NODE`) that no kubelet and no kwok
manages: the benchmark writes each pod's status itself (Running, an IP of its own,
Ready), so readiness changes exactly when the benchmark says, on both sides alike. It
keeps the node alive by renewing the node's Lease every few seconds, as a kubelet does,
so that neither the node lifecycle controller (which would mark the pods not ready) nor
PodGC (which deletes the pods of a missing node) steps in.

# The same load on both sides
Pods are created, and later flipped, at a fixed rate (``rate`` pods a second, from
``threads`` threads), the same on both sides. Unpaced, the writers would go as fast as the
machine lets them, and on two cores that is slower on the side whose controllers use more
CPU: the two sides would not be offered the same load, and the times below would measure
the writers. At a rate both sides keep up with, the times are the rate's plus how long
the controllers trail it.

# What is measured
* **Created → correct**: from the first Service created to the moment every Service's
  Endpoints object lists its P pods as ready addresses and its EndpointSlices (those of
  the side's controller: ``endpointslice.kubernetes.io/managed-by``) hold P ready
  endpoints.
* **Flip → correct**: every pod's Ready condition set False (strategic merge patches of
  the status); the time until every object shows every pod not ready.
* **Trailing**: how long after the last write each of those two was reached.
* **Latency per pod**: from the moment the API server answered a pod's status patch to
  the first watch event of an object that shows that pod not ready; p50 and p99, for
  Endpoints and for EndpointSlices separately. The watches run in threads of this
  process; event times are taken as the bytes arrive.
"""

from __future__ import annotations

import concurrent.futures
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson

from bench.informer import Api
from steward.cluster.progress import Progress

NODE = "bench-endpoints-node"
ZONE = "bench-zone-a"
LEASE_SECONDS = 40
RENEW_EVERY = 5.0
UPSTREAM_MANAGER = "endpointslice-controller.k8s.io"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _micro_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())


class Node:
    """The benchmark's node: created Ready, its Lease renewed in a thread until
    :meth:`stop`."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self._stop = threading.Event()
        api.request(
            "POST",
            "/api/v1/nodes",
            {"metadata": {"name": NODE, "labels": {"topology.kubernetes.io/zone": ZONE}}},
        )
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "lastHeartbeatTime": _now(),
            "lastTransitionTime": _now(),
        }
        api.request(
            "PATCH",
            f"/api/v1/nodes/{NODE}/status",
            {"status": {"conditions": [ready]}},
            "application/strategic-merge-patch+json",
        )
        self._renew()
        self._thread = threading.Thread(target=self._run, name="node-lease", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        spec = {
            "holderIdentity": NODE,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": _micro_now(),
        }
        created = self.api.request("POST", path, {"metadata": {"name": NODE}, "spec": spec})
        if created.get("kind") == "Status":  # 409: it exists, renew it
            current = self.api.request("GET", f"{path}/{NODE}")
            current["spec"].update(spec)
            self.api.request("PUT", f"{path}/{NODE}", current)

    def _run(self) -> None:
        while not self._stop.wait(RENEW_EVERY):
            try:
                self._renew()
            except Exception as err:  # a missed renewal is retried at the next tick
                print(f"bench: renewing {NODE}'s lease failed: {err}", flush=True)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class Watch:
    """Watches one namespace's objects of one type in a thread and records, per pod
    name, when an object first showed it in the state ``shown`` asks about."""

    def __init__(
        self,
        api: Api,
        path: str,
        pods_of: Callable[[dict[str, Any]], tuple[set[str], set[str]]],
    ) -> None:
        self.api = api
        self.path = path
        self.pods_of = pods_of
        self.ready: dict[str, set[str]] = {}
        """Per object, the pods it shows ready (kept current)."""
        self.not_ready: dict[str, set[str]] = {}
        self.first_not_ready: dict[str, float] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        listing = api.request("GET", path)
        self._rv = listing["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._run, name="watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import urllib3

        while not self._stop.is_set():
            sep = "&" if "?" in self.path else "?"
            resp = self.api.pool.request(
                "GET",
                f"{self.api.base}{self.path}{sep}watch=1&allowWatchBookmarks=true"
                f"&resourceVersion={self._rv}&timeoutSeconds=30",
                preload_content=False,
                timeout=urllib3.Timeout(connect=10, read=None),
            )
            buffer = b""
            try:
                for chunk in resp.stream(65536, decode_content=False):
                    now = time.perf_counter()
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        if line:
                            self._event(orjson.loads(line), now)
                    if self._stop.is_set():
                        break
            except urllib3.exceptions.HTTPError:
                # The server ended the stream (it is shutting down, or dropped it): resume
                # from the last version seen unless the benchmark is over.
                time.sleep(0.1)
            finally:
                resp.release_conn()

    def _event(self, event: dict[str, Any], now: float) -> None:
        obj = event["object"]
        meta = obj.get("metadata") or {}
        self._rv = meta.get("resourceVersion", self._rv)
        if event["type"] == "BOOKMARK":
            return
        name = meta.get("name", "")
        with self._lock:
            if event["type"] == "DELETED":
                self.ready.pop(name, None)
                self.not_ready.pop(name, None)
                return
            ready, not_ready = self.pods_of(obj)
            self.ready[name], self.not_ready[name] = ready, not_ready
            for pod in not_ready:
                self.first_not_ready.setdefault(pod, now)

    def counts(self) -> tuple[int, int]:
        """Pods shown ready, and not ready, over all objects."""
        with self._lock:
            return (
                sum(len(p) for p in self.ready.values()),
                sum(len(p) for p in self.not_ready.values()),
            )

    def forget_not_ready(self) -> None:
        """Start recording first-not-ready times afresh."""
        with self._lock:
            self.first_not_ready.clear()

    def stop(self) -> None:
        self._stop.set()


def endpoints_pods(obj: dict[str, Any]) -> tuple[set[str], set[str]]:
    ready: set[str] = set()
    not_ready: set[str] = set()
    for subset in obj.get("subsets") or ():
        for field, into in (("addresses", ready), ("notReadyAddresses", not_ready)):
            for address in subset.get(field) or ():
                into.add((address.get("targetRef") or {}).get("name", ""))
    return ready, not_ready


def slice_pods(obj: dict[str, Any]) -> tuple[set[str], set[str]]:
    ready: set[str] = set()
    not_ready: set[str] = set()
    for endpoint in obj.get("endpoints") or ():
        name = (endpoint.get("targetRef") or {}).get("name", "")
        is_ready = (endpoint.get("conditions") or {}).get("ready")
        (ready if is_ready else not_ready).add(name)
    return ready, not_ready


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def _wait(
    what: str, done: Callable[[], bool], progress: Callable[[], str], timeout: float, out: Progress
) -> float:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not happen in {timeout:.0f} s: {progress()}")
        out.tick(f"  {what}: {progress()}")
        time.sleep(0.05)
    return time.perf_counter()


def wait_for_service_account(api: Api, ns: str, timeout: float) -> None:
    """Pods are refused until the namespace's default ServiceAccount exists."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            api.request("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _paced(rate: float, items: list[Any], work: Callable[[Any], None]) -> Callable[[int], None]:
    """A task per index that waits for its slot (``rate`` a second from now), then works."""
    start = time.perf_counter()

    def task(i: int) -> None:
        wait = start + i / rate - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        work(items[i])

    return task


def run_phase(
    api: Api,
    ns: str,
    services: int,
    pods_per_service: int,
    threads: int,
    timeout: float,
    out: Progress,
    *,
    slice_manager: str,
    rate: float,
) -> dict[str, Any]:
    """Create the Services and pods, wait until both kinds of object are correct, flip
    every pod not ready and wait again (module docs); times and latencies."""
    api.namespace(ns)
    wait_for_service_account(api, ns, timeout)
    node = Node(api)
    total = services * pods_per_service
    managed = f"endpointslice.kubernetes.io/managed-by={slice_manager}"
    endpoints = Watch(api, f"/api/v1/namespaces/{ns}/endpoints", endpoints_pods)
    slices = Watch(
        api,
        f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector={managed}",
        slice_pods,
    )
    names = [f"svc-{i:03d}" for i in range(services)]
    pods = [
        (s, f"{s}-p{j:02d}", i * pods_per_service + j)
        for i, s in enumerate(names)
        for j in range(pods_per_service)
    ]
    try:
        started = time.perf_counter()

        def service(name: str) -> None:
            api.request(
                "POST",
                f"/api/v1/namespaces/{ns}/services",
                {
                    "metadata": {"name": name},
                    "spec": {
                        "selector": {"app": name},
                        "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
                    },
                },
            )

        def pod(item: tuple[str, str, int]) -> None:
            svc, name, n = item
            api.request(
                "POST",
                f"/api/v1/namespaces/{ns}/pods",
                {
                    "metadata": {"name": name, "labels": {"app": svc}},
                    "spec": {
                        "nodeName": NODE,
                        "containers": [
                            {
                                "name": "main",
                                "image": "busybox:1",
                                "ports": [{"name": "http", "containerPort": 8080}],
                            }
                        ],
                    },
                },
            )
            ip = f"10.{100 + n // 65536}.{n // 256 % 256}.{n % 256}"
            api.request(
                "PATCH",
                f"/api/v1/namespaces/{ns}/pods/{name}/status",
                {
                    "status": {
                        "phase": "Running",
                        "podIP": ip,
                        "podIPs": [{"ip": ip}],
                        "conditions": [
                            {"type": "Ready", "status": "True", "lastTransitionTime": _now()}
                        ],
                    }
                },
                "application/strategic-merge-patch+json",
            )

        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            list(pool.map(service, names))
            for k, _ in enumerate(pool.map(_paced(rate, pods, pod), range(len(pods)))):
                if k % 500 == 0:
                    out.tick(f"  created {k:,}/{total:,} pods")
        created = time.perf_counter()

        def all_ready() -> bool:
            return endpoints.counts() == (total, 0) and slices.counts() == (total, 0)

        def shown() -> str:
            return f"Endpoints (ready, not ready) {endpoints.counts()}, slices {slices.counts()}"

        correct = _wait("all ready", all_ready, shown, timeout, out)
        out.say(
            f"  {total:,} pods ready in every object "
            f"{correct - started:.1f} s after the first Service"
        )

        answered: dict[str, float] = {}
        lock = threading.Lock()

        def flip(item: tuple[str, str, int]) -> None:
            api.request(
                "PATCH",
                f"/api/v1/namespaces/{ns}/pods/{item[1]}/status",
                {
                    "status": {
                        "conditions": [
                            {"type": "Ready", "status": "False", "lastTransitionTime": _now()}
                        ]
                    }
                },
                "application/strategic-merge-patch+json",
            )
            at = time.perf_counter()
            with lock:
                answered[item[1]] = at

        for watch in (endpoints, slices):
            watch.forget_not_ready()
        flip_started = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            list(pool.map(_paced(rate, pods, flip), range(len(pods))))
        flipped = time.perf_counter()

        def all_not_ready() -> bool:
            return endpoints.counts() == (0, total) and slices.counts() == (0, total)

        settled = _wait("all not ready", all_not_ready, shown, timeout, out)
        result: dict[str, Any] = {
            "services": services,
            "pods_per_service": pods_per_service,
            "create_seconds": round(created - started, 3),
            "created_to_correct_seconds": round(correct - started, 3),
            "flip_seconds": round(flipped - flip_started, 3),
            "flip_to_correct_seconds": round(settled - flip_started, 3),
            "create_trailing_seconds": round(correct - created, 3),
            "flip_trailing_seconds": round(settled - flipped, 3),
            "rate": rate,
        }
        for kind, watch in (("endpoints", endpoints), ("slices", slices)):
            latencies = [
                max(0.0, watch.first_not_ready[p] - answered[p])
                for p in answered
                if p in watch.first_not_ready
            ]
            result[f"{kind}_latency_p50_ms"] = round(_percentile(latencies, 50) * 1000, 1)
            result[f"{kind}_latency_p99_ms"] = round(_percentile(latencies, 99) * 1000, 1)
        return result
    finally:
        endpoints.stop()
        slices.stop()
        node.stop()
