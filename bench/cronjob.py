"""The CronJob workload of ``make bench`` (:mod:`bench.controllers`): N CronJobs that fire
every minute, for M minutes; how late each Job is, and how many never come.

# The cluster
The workload runs in a cluster of its own per side (2 kwok nodes; the Jobs make no
pods, below), so that nothing else loads the API server while minutes are being timed.
Upstream's side runs every one of kube-controller-manager's controllers; Steward's runs
Steward's informer, manager, CronJob and Job controllers (:data:`CONTROLLERS`) and no
other of Steward's, kube-controller-manager all the others: the Job controller of each
side is that side's, and the idle work of Steward's other controllers (each a process of
its own, with its leases) stays out of a figure per Job. Both CronJob controllers run
:data:`WORKERS` workers (kube-controller-manager's ``--concurrent-cron-job-syncs``
default and Steward's).

# What is created
N CronJobs scheduled ``* * * * *`` (the default ``concurrencyPolicy`` ``Allow``), in a
fresh namespace, all created before the first minute that counts: the first measured
minute is the first boundary at least :data:`MARGIN` seconds after the last create. Their
``jobTemplate`` is ``suspend: true``: the Jobs make no pods, so what is timed is the
CronJob controller and the writes it makes, not the Job controller, kube-scheduler and
kwok working through N pods a minute (on two cores those would set the pace of both
sides alike and hide the CronJob controller). A suspended Job stays active, which
``Allow`` does not mind: each CronJob's ``status.active`` grows by one a minute.

# What is measured
A watch on the namespace's Jobs (started before the first minute) records when it first
sees each Job. A Job's *scheduled time* is the minute its name carries
(``<cronjob>-<minutes since the epoch>``, both controllers' naming), checked against its
``batch.kubernetes.io/cronjob-scheduled-timestamp`` annotation where the controller sets
one. Its *lag* is measured twice:

* **seen**: when the watch first sees the Job, minus its scheduled time (milliseconds;
  it holds the watch's delivery, a few ms and alike on both sides). The headline;
* **created**: the Job's ``creationTimestamp`` minus its scheduled time. The API server
  writes whole seconds, truncated, so this figure is a floor in steps of one second: a
  check on the first, not a replacement.

The observation ends when every expected Job (N for each of the M minutes) has been seen,
or :data:`TRAIL` seconds (a minute) after the last measured minute. A Job not seen by then
is *missing* for its minute: a controller that syncs a CronJob after the next minute has
begun makes that minute's Job, not the one it missed (upstream's makes only the most
recent missed run), so a Job comes within about a minute of its schedule or never, and a
lagging side loses runs rather than queuing them. (A sync that read the clock before the
next minute may make its Job just after, having waited in its client's token bucket: the
Jobs are counted until the watch stops, a few seconds after the meter's end, so such a
Job is late, not missing.) The lags and the missing count only the expected Jobs, not
those of the minute after the last. The meter (CPU, bytes, API requests) spans from just
before the first minute to the end of the observation, idle work included; its figures
are per Job seen in that span (``jobs_in_span``, whatever its minute: the work done).
"""

from __future__ import annotations

import concurrent.futures
import datetime
import math
import statistics
import threading
import time
from typing import Any

import orjson

from bench.informer import Api
from bench.job import Span
from steward.cluster.progress import Progress

WORKERS = 5
"""CronJob workers on both sides: kube-controller-manager's ``--concurrent-cron-job-syncs``
default (5) and Steward's CronJob controller's."""

CONTROLLERS = ("cronjob", "job")
"""The registry names of Steward's controllers on Steward's side (module docs)."""

NODES = 2
"""kwok nodes of the workload's cluster (no pod is made; two for a sane cluster)."""

SCHEDULE = "* * * * *"
SCHEDULED_TIMESTAMP = "batch.kubernetes.io/cronjob-scheduled-timestamp"
"""The annotation upstream's CronJob controller sets on each Job: its scheduled time."""

MARGIN = 15.0
"""Seconds between the last CronJob created and the first minute that counts."""

TRAIL = 60.0
"""Seconds after the last measured minute's boundary that its Jobs are waited for: until
the next minute, after which none of them is made (module docs)."""

METER_LEAD = 4.0
"""Seconds before the first minute that the meter starts (its own start waits 2.5 s for
the audit log)."""


def cronjob_body(name: str) -> dict[str, Any]:
    """A CronJob firing every minute whose Jobs are suspended (no pods; module docs)."""
    pod = {
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox"}],
        }
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {
            "schedule": SCHEDULE,
            "jobTemplate": {"spec": {"suspend": True, "template": pod}},
        },
    }


def parse_time(stamp: str) -> float:
    """An RFC 3339 timestamp of the API (``2026-01-01T00:00:05Z``) as epoch seconds."""
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def scheduled_time(job: dict[str, Any]) -> tuple[str, float] | None:
    """The CronJob a Job was made for and its scheduled time (epoch seconds), from its
    name ``<cronjob>-<minutes since the epoch>``; None for a Job not so named.

    Raises:
        RuntimeError: the Job's scheduled-timestamp annotation names another time.
    """
    meta = job["metadata"]
    cronjob, _, minutes = meta["name"].rpartition("-")
    if not cronjob or not minutes.isdigit():
        return None
    at = int(minutes) * 60.0
    stamp = (meta.get("annotations") or {}).get(SCHEDULED_TIMESTAMP)
    if stamp is not None and parse_time(stamp) != at:
        raise RuntimeError(
            f"Job {meta['name']}: its name says {at:.0f}, {SCHEDULED_TIMESTAMP} {stamp}"
        )
    return cronjob, at


def first_minute(now: float, margin: float = MARGIN) -> float:
    """The first minute boundary (epoch seconds) at least ``margin`` seconds after ``now``."""
    return math.ceil((now + margin) / 60.0) * 60.0


class JobWatch:
    """Watches a namespace's Jobs in a thread and records, for each Job it sees, when it
    first saw it (``time.time()``), its ``creationTimestamp`` and what it was made for.
    Stops once ``expected`` (names) have all been seen, or when :meth:`stop` is called."""

    def __init__(self, api: Api, namespace: str, expected: set[str]) -> None:
        self.api = api
        self.namespace = namespace
        self.expected = expected
        self.seen: dict[str, float] = {}
        self.created: dict[str, float] = {}
        self.expected_seen = 0
        """How many of ``expected`` have been seen (read from another thread)."""
        self.since = float("inf")
        """Jobs first seen at or after this time (``time.time()``) are counted in
        :attr:`in_span`."""
        self.in_span = 0
        self.error: BaseException | None = None
        self.all_seen = threading.Event()
        self._stopped = threading.Event()
        listing = api.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs")
        self._rv = listing["metadata"]["resourceVersion"]
        for job in listing["items"]:
            self._record(job, time.time())
        self._thread = threading.Thread(target=self._run, name="cronjob-watch", daemon=True)
        self._thread.start()

    def _record(self, job: dict[str, Any], now: float) -> None:
        name = job["metadata"]["name"]
        if name in self.seen:
            return
        scheduled_time(job)  # the annotation's check
        self.seen[name] = now
        if now >= self.since:
            self.in_span += 1
        self.created[name] = parse_time(job["metadata"]["creationTimestamp"])
        if name in self.expected:
            self.expected_seen += 1
            if self.expected_seen == len(self.expected):
                self.all_seen.set()

    def _run(self) -> None:
        import urllib3

        try:
            while not (self._stopped.is_set() or self.all_seen.is_set()):
                path = (
                    f"/apis/batch/v1/namespaces/{self.namespace}/jobs"
                    f"?watch=1&allowWatchBookmarks=true&timeoutSeconds=30"
                    f"&resourceVersion={self._rv}"
                )
                resp = self.api.pool.request(
                    "GET",
                    self.api.base + path,
                    preload_content=False,
                    timeout=urllib3.Timeout(connect=10, read=60),
                )
                if resp.status != 200:
                    raise RuntimeError(f"watch of Jobs: {resp.status} {resp.read()[:300]!r}")
                buffer = b""
                for chunk in resp.stream(65536, decode_content=False):
                    now = time.time()
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        if not line:
                            continue
                        event = orjson.loads(line)
                        if event["type"] == "ERROR":
                            raise RuntimeError(f"watch of Jobs: {event['object']}")
                        obj = event["object"]
                        self._rv = obj["metadata"].get("resourceVersion", self._rv)
                        if event["type"] in ("ADDED", "MODIFIED"):
                            self._record(obj, now)
                    if self._stopped.is_set() or self.all_seen.is_set():
                        break
                resp.release_conn()
        except BaseException as err:  # raised in the caller by stop()
            self.error = err
            self.all_seen.set()

    def wait(self, until: float) -> None:
        """Wait until every expected Job is seen or the time ``until`` (``time.time()``)."""
        self.all_seen.wait(max(0.0, until - time.time()))

    def stop(self) -> None:
        """Stop watching.

        Raises:
            RuntimeError: the watch failed (its error chained).
        """
        self._stopped.set()
        if self.error is not None:
            raise RuntimeError(f"{self.namespace}: the watch of Jobs failed") from self.error


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (inclusive method; the value itself for one value)."""
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def lag_figures(
    cronjobs: list[str],
    minutes: list[float],
    seen: dict[str, float],
    created: dict[str, float],
) -> dict[str, Any]:
    """The figures of an observation (module docs): lag percentiles in seconds, seen and
    created, over the expected Jobs that came, and the Jobs missing per minute."""
    expected = {f"{cj}-{int(m // 60)}": m for cj in cronjobs for m in minutes}
    came = [name for name in expected if name in seen]
    seen_lag = [seen[n] - expected[n] for n in came]
    created_lag = [created[n] - expected[n] for n in came]
    missing = [sum(1 for cj in cronjobs if f"{cj}-{int(m // 60)}" not in seen) for m in minutes]
    figures: dict[str, Any] = {
        "jobs_expected": len(expected),
        "jobs_seen": len(came),
        "missing_per_minute": missing,
        "missing": sum(missing),
    }
    for key, lags in (("seen", seen_lag), ("created", created_lag)):
        figures |= {
            f"{key}_lag_p50_s": round(percentile(lags, 50), 3),
            f"{key}_lag_p99_s": round(percentile(lags, 99), 3),
            f"{key}_lag_max_s": round(max(lags, default=float("nan")), 3),
        }
    return figures


def run_phase(
    api: Api,
    ns: str,
    count: int,
    minutes: int,
    threads: int,
    out: Progress,
    meter: Span | None = None,
) -> dict[str, Any]:
    """Create ``count`` CronJobs in namespace ``ns``, then watch their Jobs for
    ``minutes`` minutes (module docs); the figures. ``meter``
    (``bench.controllers.Meter``) spans the observation, and its figures join the
    result."""
    api.namespace(ns)
    names = [f"cron-{i:04d}" for i in range(count)]
    path = f"/apis/batch/v1/namespaces/{ns}/cronjobs"
    started = time.time()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda n: api.request("POST", path, cronjob_body(n)), names))
    created = time.time()
    first = first_minute(created)
    window = [first + 60.0 * i for i in range(minutes)]
    expected = {f"{cj}-{int(m // 60)}" for cj in names for m in window}
    watch = JobWatch(api, ns, expected)
    out.say(
        f"  {count} CronJobs created in {created - started:.1f} s; first minute in "
        f"{first - time.time():.0f} s"
    )
    time.sleep(max(0.0, first - METER_LEAD - time.time()))
    if meter is not None:
        meter.begin()
    watch.since = time.time()
    until = window[-1] + TRAIL
    while not watch.all_seen.is_set() and time.time() < until:
        watch.wait(min(until, time.time() + out.interval))
        out.tick(f"  {watch.expected_seen}/{len(expected)} Jobs seen")
    ended = time.time()
    measured = meter.end() if meter is not None else {}
    watch.stop()
    figures = lag_figures(names, window, dict(watch.seen), dict(watch.created))
    return (
        measured
        | figures
        | {
            "cronjobs": count,
            "minutes": minutes,
            "workers": WORKERS,
            "nodes": NODES,
            "jobs_in_span": watch.in_span,
            "create_seconds": round(created - started, 3),
            "observed_seconds": round(ended - first, 3),
        }
    )
