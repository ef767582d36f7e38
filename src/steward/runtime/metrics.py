"""Prometheus metrics of the controller runtime, under client-go's and controller-runtime's names.

Work queue metrics carry the label ``name`` (the queue's name); controller metrics carry
``controller``. :func:`metrics_for` gives the one :class:`RuntimeMetrics` of a registry
(the global registry by default), so every queue and worker pool of a process shares them.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable, Iterator
from typing import Protocol

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from steward.runtime.clock import Clock
from steward.version import register_build_info

# controller-runtime's buckets: 10 ns up to 1000 s, by factors of ten.
_QUEUE_BUCKETS = tuple(10e-9 * 10**i for i in range(12))
# controller-runtime's reconcile_time_seconds buckets.
_RECONCILE_BUCKETS = (
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7),
    *(0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10),
    *(15, 20, 25, 30, 40, 50, 60),
)

RESULT_SUCCESS = "success"
RESULT_ERROR = "error"
RESULT_REQUEUE = "requeue"
RESULT_REQUEUE_AFTER = "requeue_after"
RECONCILE_RESULTS = (RESULT_SUCCESS, RESULT_ERROR, RESULT_REQUEUE, RESULT_REQUEUE_AFTER)
"""The values of ``controller_runtime_reconcile_total``'s ``result`` label."""


class RuntimeMetrics:
    """Every metric family of the runtime, registered once in one registry.

    Build it with :func:`metrics_for`; constructing a second one on the same registry raises
    :class:`ValueError` (prometheus_client refuses duplicate names).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.depth = Gauge(
            "workqueue_depth", "Current depth of the work queue.", ["name"], registry=registry
        )
        self.adds = Counter(
            "workqueue_adds_total",
            "Total number of adds handled by the work queue.",
            ["name"],
            registry=registry,
        )
        self.queue_duration = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in the work queue before being requested.",
            ["name"],
            buckets=_QUEUE_BUCKETS,
            registry=registry,
        )
        self.work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from the work queue takes.",
            ["name"],
            buckets=_QUEUE_BUCKETS,
            registry=registry,
        )
        self.retries = Counter(
            "workqueue_retries_total",
            "Total number of retries (delayed and rate-limited adds) handled by the work queue.",
            ["name"],
            registry=registry,
        )
        self.reconcile_total = Counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller, by result.",
            ["controller", "result"],
            registry=registry,
        )
        self.reconcile_errors = Counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller.",
            ["controller"],
            registry=registry,
        )
        self.terminal_reconcile_errors = Counter(
            "controller_runtime_terminal_reconcile_errors_total",
            "Total number of terminal reconciliation errors (not retried) per controller.",
            ["controller"],
            registry=registry,
        )
        self.reconcile_time = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller.",
            ["controller"],
            buckets=_RECONCILE_BUCKETS,
            registry=registry,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller.",
            ["controller"],
            registry=registry,
        )
        self.max_concurrent_reconciles = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller.",
            ["controller"],
            registry=registry,
        )
        self._queues: weakref.WeakSet[QueueMetrics] = weakref.WeakSet()
        registry.register(_InFlightGauges(self._queues))
        self._instances: weakref.WeakSet[Instance] = weakref.WeakSet()
        registry.register(_InstanceGauges(self._instances))
        register_build_info(registry)

    def queue(self, name: str, clock: Clock) -> QueueMetrics:
        """Metrics for the queue called ``name``, timed with ``clock``."""
        metrics = QueueMetrics(self, name, clock)
        self._queues.add(metrics)
        return metrics

    def controller(self, name: str) -> ControllerMetrics:
        """Metrics for the controller called ``name``; every result label starts at 0."""
        return ControllerMetrics(self, name)

    def instance(self, instance: Instance) -> None:
        """Report ``instance``'s state (the ``steward_*`` families of :class:`Instance`)
        for as long as it exists."""
        self._instances.add(instance)


class QueueMetrics:
    """What one work queue reports: adds, depth, time queued, time processed, retries.

    The queue calls :meth:`add`, :meth:`get`, :meth:`done` and :meth:`retry` as in
    client-go; unfinished and longest-running work are computed when the registry is
    collected, from the start times of the items being processed.
    """

    def __init__(self, families: RuntimeMetrics, name: str, clock: Clock) -> None:
        self.name = name
        self._clock = clock
        self._depth = families.depth.labels(name)
        self._adds = families.adds.labels(name)
        self._queue_duration = families.queue_duration.labels(name)
        self._work_duration = families.work_duration.labels(name)
        self._retries = families.retries.labels(name)
        self._added_at: dict[Hashable, float] = {}
        self._started_at: dict[Hashable, float] = {}

    def add(self, item: Hashable) -> None:
        """An item became dirty (queued, or marked to be queued again after processing)."""
        self._adds.inc()
        self._depth.inc()
        self._added_at.setdefault(item, self._clock.now())

    def get(self, item: Hashable) -> None:
        """An item was handed to a worker."""
        now = self._clock.now()
        self._depth.dec()
        self._started_at[item] = now
        added = self._added_at.pop(item, None)
        if added is not None:
            self._queue_duration.observe(now - added)

    def done(self, item: Hashable) -> None:
        """A worker finished with an item."""
        started = self._started_at.pop(item, None)
        if started is not None:
            self._work_duration.observe(self._clock.now() - started)

    def retry(self) -> None:
        """A delayed or rate-limited add was asked for."""
        self._retries.inc()

    def in_flight(self) -> tuple[float, float]:
        """Seconds of work in progress: (sum over items being processed, the longest one)."""
        now = self._clock.now()
        ages = [now - started for started in self._started_at.values()]
        return sum(ages), max(ages, default=0.0)


class ControllerMetrics:
    """What one controller's workers report: reconciles by result, errors, time, busy workers."""

    def __init__(self, families: RuntimeMetrics, name: str) -> None:
        self.name = name
        self._total = {r: families.reconcile_total.labels(name, r) for r in RECONCILE_RESULTS}
        self._errors = families.reconcile_errors.labels(name)
        self._terminal = families.terminal_reconcile_errors.labels(name)
        self._time = families.reconcile_time.labels(name)
        self.active_workers = families.active_workers.labels(name)
        self.max_concurrent_reconciles = families.max_concurrent_reconciles.labels(name)

    def reconciled(self, result: str, seconds: float) -> None:
        """Count one reconcile ending with ``result`` (one of RECONCILE_RESULTS)."""
        self._total[result].inc()
        self._time.observe(seconds)
        if result == RESULT_ERROR:
            self._errors.inc()

    def terminal_error(self) -> None:
        """Count a terminal error (also counted by :meth:`reconciled` as an error)."""
        self._terminal.inc()


class Instance(Protocol):
    """A controller instance as its ``steward_*`` metrics see it, the families the Go and
    TypeScript runtimes export too: ``steward_controller_active`` (1 while its workers
    run), ``steward_mirror_synced`` (1 once its mirror holds the informer's initial list),
    ``steward_mirror_reconnects_total`` (its watch streams opened again),
    ``steward_fenced_writes_total`` (writes refused because it did not hold its lease) and
    ``steward_manager_epoch`` (the epoch of the manager's last START; 0 alone), each
    labelled ``controller``."""

    @property
    def name(self) -> str: ...

    def active(self) -> bool: ...

    def instance_state(self) -> tuple[bool, int, int, int]:
        """(mirror synced, mirror reconnects, fenced writes, manager epoch)."""
        ...


class _InstanceGauges(Collector):
    """The ``steward_*`` families of each :class:`Instance`, read at scrape time."""

    def __init__(self, instances: weakref.WeakSet[Instance]) -> None:
        self._instances = instances

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        active, synced, reconnects, fenced, epoch = self._families()
        for instance in sorted(list(self._instances), key=lambda i: i.name):
            state = instance.instance_state()
            active.add_metric([instance.name], float(instance.active()))
            synced.add_metric([instance.name], float(state[0]))
            reconnects.add_metric([instance.name], state[1])
            fenced.add_metric([instance.name], state[2])
            epoch.add_metric([instance.name], state[3])
        yield from (active, synced, reconnects, fenced, epoch)

    @staticmethod
    def _families() -> tuple[
        GaugeMetricFamily,
        GaugeMetricFamily,
        CounterMetricFamily,
        CounterMetricFamily,
        GaugeMetricFamily,
    ]:
        labels = ["controller"]
        return (
            GaugeMetricFamily(
                "steward_controller_active",
                "1 while this instance's workers run (it is the active instance), else 0.",
                labels=labels,
            ),
            GaugeMetricFamily(
                "steward_mirror_synced",
                "1 once the mirror holds the informer's initial list of every watched type.",
                labels=labels,
            ),
            CounterMetricFamily(
                "steward_mirror_reconnects",
                "Times the mirror's watch stream was opened again.",
                labels=labels,
            ),
            CounterMetricFamily(
                "steward_fenced_writes",
                "Writes to kube-apiserver refused because this instance did not hold its lease.",
                labels=labels,
            ),
            GaugeMetricFamily(
                "steward_manager_epoch",
                "The epoch of the last START from the manager.",
                labels=labels,
            ),
        )


class _InFlightGauges(Collector):
    """``workqueue_unfinished_work_seconds`` and ``..._longest_running_processor_seconds``."""

    def __init__(self, queues: weakref.WeakSet[QueueMetrics]) -> None:
        self._queues = queues

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        unfinished, longest = self._families()
        totals: dict[str, tuple[float, float]] = {}
        for queue in list(self._queues):
            total, oldest = queue.in_flight()
            prev_total, prev_oldest = totals.get(queue.name, (0.0, 0.0))
            totals[queue.name] = (prev_total + total, max(prev_oldest, oldest))
        for name, (total, oldest) in sorted(totals.items()):
            unfinished.add_metric([name], total)
            longest.add_metric([name], oldest)
        yield unfinished
        yield longest

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been "
                "observed by work_duration. Large values indicate stuck threads.",
                labels=["name"],
            ),
            GaugeMetricFamily(
                "workqueue_longest_running_processor_seconds",
                "How many seconds the longest running processor for the work queue has been "
                "running.",
                labels=["name"],
            ),
        )


_by_registry: weakref.WeakKeyDictionary[CollectorRegistry, RuntimeMetrics] = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()


def metrics_for(registry: CollectorRegistry | None = None) -> RuntimeMetrics:
    """The runtime's metrics in ``registry`` (default: prometheus_client's global one).

    Registers the families on first use and returns the same object afterwards. Raises
    :class:`ValueError` if something else already registered one of the names there.
    """
    target = registry if registry is not None else REGISTRY
    with _lock:
        found = _by_registry.get(target)
        if found is None:
            found = RuntimeMetrics(target)
            _by_registry[target] = found
        return found
