"""The runtime metrics every runtime exports, as the Python runtime defines them
(:mod:`steward.runtime.metrics`), and the check that a controller's ``/metrics`` has them.

The expected families are computed from the Python module — its metrics for one queue and
one controller, written and parsed as Prometheus would — so the Go and TypeScript
runtimes are held to whatever it defines: each ``workqueue_*`` and ``controller_runtime_*``
family with the same name, type, help text, label names and histogram buckets. Other
families (``steward_*``, ``rest_client_*``) are not compared.
"""

from __future__ import annotations

import urllib.request
from collections import defaultdict
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from steward.runtime.clock import MonotonicClock
from steward.runtime.metrics import RECONCILE_RESULTS, RuntimeMetrics

PREFIXES = ("workqueue_", "controller_runtime_")
"""The families of the runtime, as opposed to a host's own."""


@dataclass(frozen=True)
class Family:
    """What must match of one family: its type, help, label names and buckets."""

    type: str
    help: str
    labels: frozenset[str]
    buckets: tuple[float, ...] = ()


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def families(text: str) -> dict[str, Family]:
    """The runtime's families in a Prometheus text exposition, by name (a counter's without
    ``_total``, as the parser names it). The ``*_created`` series prometheus_client adds
    are left out."""
    out: dict[str, Family] = {}
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith(PREFIXES) or fam.name.endswith("_created"):
            continue
        labels: set[str] = set()
        buckets: set[float] = set()
        for s in fam.samples:
            labels.update(k for k in s.labels if k != "le")
            if s.name.endswith("_bucket"):
                buckets.add(float(s.labels["le"]))
        out[fam.name] = Family(
            fam.type, fam.documentation, frozenset(labels), tuple(sorted(buckets))
        )
    return out


def samples(text: str) -> list[Sample]:
    """Every sample of the runtime's families in ``text``."""
    return [
        Sample(s.name, dict(s.labels), s.value)
        for fam in text_string_to_metric_families(text)
        if fam.name.startswith(PREFIXES)
        for s in fam.samples
    ]


def python_runtime_families() -> dict[str, Family]:
    """The families the Python runtime exports for a controller and its queue."""
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry)
    # Held while collected: the in-flight gauges report only the queues still alive.
    queue = metrics.queue("example", MonotonicClock())
    metrics.controller("example")
    text = generate_latest(registry).decode()
    del queue
    return families(text)


def scrape(address: str) -> str:
    """GET ``http://address/metrics``; fails on any status but 200."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as resp:
        assert resp.status == 200, resp.status
        body: bytes = resp.read()
        return body.decode()


def reconciles(address: str, controller: str) -> float:
    """How many reconciles ``controller`` has finished, by its ``/metrics`` on ``address``
    (0 while it cannot be scraped): a reconcile is counted once it has returned, a moment
    after its writes can be seen."""
    try:
        text = scrape(address)
    except OSError:
        return 0.0
    return sum(
        s.value
        for s in samples(text)
        if s.name == "controller_runtime_reconcile_total"
        and s.labels.get("controller") == controller
    )


def assert_runtime_metrics(text: str, controller: str) -> None:
    """``text`` has every family of the Python runtime, alike, and plausible values for
    ``controller`` (its name as its queue's too): it reconciled, its queue saw adds,
    and every reconcile was timed."""
    want = python_runtime_families()
    got = families(text)
    differ = {name: (fam, got.get(name)) for name, fam in want.items() if got.get(name) != fam}
    assert not differ, "families unlike the Python runtime's (want, got):\n" + "\n".join(
        f"{name}: {w}\n{' ' * len(name)}  {g}" for name, (w, g) in differ.items()
    )
    extra = sorted(set(got) - set(want))
    assert not extra, f"runtime families the Python runtime does not have: {extra}"

    by: dict[str, dict[tuple[tuple[str, str], ...], float]] = defaultdict(dict)
    for s in samples(text):
        by[s.name][tuple(sorted(s.labels.items()))] = s.value

    def value(metric: str, **labels: str) -> float:
        found = by[metric].get(tuple(sorted(labels.items())))
        assert found is not None, f"no {metric}{labels} in:\n{text}"
        return found

    results = {
        dict(k)["result"]: v
        for k, v in by["controller_runtime_reconcile_total"].items()
        if dict(k).get("controller") == controller
    }
    assert set(results) == set(RECONCILE_RESULTS), results
    total = sum(results.values())
    assert total > 0, f"{controller} reconciled nothing:\n{text}"
    assert value("controller_runtime_reconcile_time_seconds_count", controller=controller) == total
    assert (
        value("controller_runtime_reconcile_errors_total", controller=controller)
        == results["error"]
    )
    assert value("controller_runtime_max_concurrent_reconciles", controller=controller) >= 1
    assert value("controller_runtime_active_workers", controller=controller) >= 0
    assert value("workqueue_adds_total", name=controller) >= 1
    assert value("workqueue_depth", name=controller) >= 0
    gets = value("workqueue_queue_duration_seconds_count", name=controller)
    assert gets >= 1
    assert value("workqueue_work_duration_seconds_count", name=controller) <= gets
    assert value("workqueue_unfinished_work_seconds", name=controller) >= 0
