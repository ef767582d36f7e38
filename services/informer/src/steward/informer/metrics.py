"""The informer's Prometheus metrics, named after client-go's reflector metrics where they exist."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from steward.informer.store import ResourceTypeName
from steward.version import register_build_info


class InformerMetrics:
    """Counters the reflectors and streams update, plus gauges read at scrape time.

    Every instance has its own registry, so several informers can run in one process.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        register_build_info(self.registry)
        self.events = Counter(
            "steward_informer_events",
            "Events received from the API server's watches, by resource and event type.",
            ["resource", "type"],
            registry=self.registry,
        )
        self.watch_requests = Counter(
            "steward_informer_watch_requests",
            "WATCH requests opened to the API server (one live watch per resource type).",
            ["resource"],
            registry=self.registry,
        )
        self.list_requests = Counter(
            "steward_informer_list_requests",
            "LIST requests (pages) sent to the API server.",
            ["resource"],
            registry=self.registry,
        )
        self.relists = Counter(
            "steward_informer_relists",
            "Full relists after the first one (410 Gone or a broken list).",
            ["resource"],
            registry=self.registry,
        )
        self.errors = Counter(
            "steward_informer_errors",
            "Failed LIST or WATCH attempts, by resource and reason; each is retried with backoff.",
            ["resource", "reason"],
            registry=self.registry,
        )
        self.replaced = Counter(
            "steward_informer_subscriber_replaced",
            "Times a subscriber fell past its buffer and was sent REPLACED and a snapshot.",
            ["subscriber", "resource"],
            registry=self.registry,
        )
        self.resumes = Counter(
            "steward_informer_watch_resumes",
            "Watch targets that asked to resume from a resource version, by resource and how "
            "they were served: replayed from the history, or REPLACED with a snapshot "
            "because the version had left it.",
            ["resource", "result"],
            registry=self.registry,
        )
        self.denied = Counter(
            "steward_informer_authorization_denied",
            "Calls or streams refused (or ended) because the caller may not list, watch or get "
            "the type there, by verb.",
            ["verb"],
            registry=self.registry,
        )
        self.sent_events = Counter(
            "steward_informer_sent_events",
            "Events sent to subscribers (all streams).",
            registry=self.registry,
        )

    def register_gauges(
        self,
        lags: Callable[[], Iterable[tuple[str, ResourceTypeName, int]]],
        sizes: Callable[[], Iterable[tuple[ResourceTypeName, int]]],
        counts: Callable[[], Mapping[tuple[str, ResourceTypeName], tuple[int, int]]] = dict,
    ) -> None:
        """Expose subscriber lag, cache sizes and events per subscriber, read from
        ``lags``, ``sizes`` and ``counts`` ((sent, withheld) by subscriber and type) at
        scrape."""
        self.registry.register(_LiveGauges(lags, sizes, counts))


class _LiveGauges(Collector):
    def __init__(
        self,
        lags: Callable[[], Iterable[tuple[str, ResourceTypeName, int]]],
        sizes: Callable[[], Iterable[tuple[ResourceTypeName, int]]],
        counts: Callable[[], Mapping[tuple[str, ResourceTypeName], tuple[int, int]]],
    ) -> None:
        self._lags = lags
        self._sizes = sizes
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        lag = GaugeMetricFamily(
            "steward_informer_subscriber_lag",
            "Objects waiting to be sent to a subscriber (queued changes and snapshot rest).",
            labels=["subscriber", "resource"],
        )
        totals: dict[tuple[str, str], int] = {}
        try:
            for subscriber, name, waiting in self._lags():
                key = (subscriber, str(name))
                totals[key] = totals.get(key, 0) + waiting
        except RuntimeError:  # a subscription came or went mid-scrape; report what we have
            pass
        for (subscriber, resource), waiting in totals.items():
            lag.add_metric([subscriber, resource], waiting)
        yield lag
        objects = GaugeMetricFamily(
            "steward_informer_objects",
            "Objects in the cache, by resource.",
            labels=["resource"],
        )
        try:
            for name, size in self._sizes():
                objects.add_metric([str(name)], size)
        except RuntimeError:
            pass
        yield objects
        sent = CounterMetricFamily(
            "steward_informer_subscriber_events",
            "Events sent to a subscriber, by resource (markers included): what it pays for.",
            labels=["subscriber", "resource"],
        )
        withheld = CounterMetricFamily(
            "steward_informer_subscriber_withheld_events",
            "Changes of a resource a subscriber watches that it was not sent: outside its "
            "namespace, selectors or owner filter, or touching nothing its projection keeps.",
            labels=["subscriber", "resource"],
        )
        try:
            counts = dict(self._counts())
        except RuntimeError:  # a subscription came or went mid-scrape: skip this once
            counts = {}
        for (subscriber, name), (sent_count, withheld_count) in sorted(
            counts.items(), key=lambda item: (item[0][0], str(item[0][1]))
        ):
            sent.add_metric([subscriber, str(name)], sent_count)
            withheld.add_metric([subscriber, str(name)], withheld_count)
        yield sent
        yield withheld
