"""The Job workload of ``make bench`` (:mod:`bench.controllers`): N one-pod Jobs to Complete.

A phase creates N Jobs in a fresh namespace with a few threads over loopback, and measures
the time from the first create request to the last Job seen ``Complete`` by a watch on that
namespace. One warm-up Job runs to completion first, so that the controller under test is
synced and idle when the clock starts. kwok completes each Job's pod as soon as it runs.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any, Protocol

import orjson

from bench.informer import Api


def job_body(name: str) -> dict[str, Any]:
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


class Span(Protocol):
    """What measures a phase's span besides its time (``bench.controllers.Meter``)."""

    def begin(self) -> None: ...

    def end(self) -> dict[str, Any]: ...


def run_phase(
    api: Api,
    namespace: str,
    count: int,
    threads: int,
    timeout: float,
    meter: Span | None = None,
) -> dict[str, Any]:
    """Create ``count`` Jobs after a warm-up one and time them to Complete (module docs);
    ``meter`` spans the measured part (from after the warm-up to the last Complete) and
    its figures join the result."""
    api.namespace(namespace)
    warm = CompletionWatch(api, namespace, {"warm-up"})
    api.request("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", job_body("warm-up"))
    if not warm.wait(timeout):
        raise RuntimeError(f"{namespace}: the warm-up Job did not complete in {timeout:.0f}s")
    names = [f"job-{i:04d}" for i in range(count)]
    watch = CompletionWatch(api, namespace, set(names))
    if meter is not None:
        meter.begin()
    started = time.perf_counter()

    def create(name: str) -> None:
        api.request("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", job_body(name))

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(create, names))
    created = time.perf_counter() - started
    if not watch.wait(timeout):
        raise RuntimeError(
            f"{namespace}: only {len(watch.done)} of {count} Jobs completed in {timeout:.0f}s"
        )
    measured = meter.end() if meter is not None else {}
    last = max(watch.done.values())
    return measured | {
        "jobs": count,
        "seconds": round(last - started, 3),
        "create_seconds": round(created, 3),
        "first_complete_seconds": round(min(watch.done.values()) - started, 3),
        "jobs_per_s": round(count / (last - started), 1),
    }
