"""The manager's Prometheus metrics: registrations, lease hand-overs, heartbeats, sessions."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from steward.version import register_build_info


class ManagerMetrics:
    """Counters the registry updates, plus gauges read at scrape time.

    Every instance has its own registry, so several managers can run in one process.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        register_build_info(self.registry)
        self.registrations = Counter(
            "steward_manager_registrations",
            "Registrations by controller and result (active, standby, already_exists, disabled).",
            ["controller", "result"],
            registry=self.registry,
        )
        self.transitions = Counter(
            "steward_manager_lease_acquisitions",
            "Times an instance became the holder of a controller's lease, by reason.",
            ["controller", "reason"],
            registry=self.registry,
        )
        self.lapses = Counter(
            "steward_manager_lease_lapses",
            "Leases that lapsed without a clean deregistration.",
            ["controller"],
            registry=self.registry,
        )
        self.heartbeats = Counter(
            "steward_manager_heartbeats",
            "Heartbeats received.",
            ["controller"],
            registry=self.registry,
        )

    def register_gauges(
        self,
        sessions: Callable[[], Iterable[tuple[str, str, int]]],
        leader: Callable[[], bool],
    ) -> None:
        """Expose connected sessions per controller and role, and leadership."""
        self.registry.register(_Gauges(sessions, leader))


class _Gauges(Collector):
    def __init__(
        self, sessions: Callable[[], Iterable[tuple[str, str, int]]], leader: Callable[[], bool]
    ) -> None:
        self._sessions = sessions
        self._leader = leader

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily(
            "steward_manager_sessions",
            "Connected controller instances by controller and role.",
            labels=["controller", "role"],
        )
        for name, role, count in self._sessions():
            gauge.add_metric([name, role], count)
        yield gauge
        yield GaugeMetricFamily(
            "steward_manager_is_leader",
            "1 while this manager leads (serves the registry).",
            value=1 if self._leader() else 0,
        )
