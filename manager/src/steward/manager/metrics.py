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
        lease: str = "steward-manager",
    ) -> None:
        """Expose connected sessions per controller and role, leadership of ``lease``,
        and which controllers run (an active instance: 1, none: 0; reported by the
        leader only, which alone knows)."""
        self.registry.register(_Gauges(sessions, leader, lease))


MANAGER_LABEL = "steward"
"""The ``manager`` label of ``running_managed_controllers`` (upstream's is
``kube-controller-manager``)."""


class _Gauges(Collector):
    def __init__(
        self,
        sessions: Callable[[], Iterable[tuple[str, str, int]]],
        leader: Callable[[], bool],
        lease: str,
    ) -> None:
        self._sessions = sessions
        self._leader = leader
        self._lease = lease

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily(
            "steward_manager_sessions",
            "Connected controller instances by controller and role.",
            labels=["controller", "role"],
        )
        for name, role, count in self._sessions():
            gauge.add_metric([name, role], count)
        yield gauge
        leading = self._leader()
        yield GaugeMetricFamily(
            "steward_manager_is_leader",
            "1 while this manager leads (serves the registry).",
            value=1 if leading else 0,
        )
        # kube-controller-manager's own families, so that its dashboards and alerts work:
        # client-go's leader election gauge for the manager's Lease, and component-base's
        # gauge of the controllers running, under the manager's name.
        master = GaugeMetricFamily(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates "
            "backup, 1 indicates master. 'name' is the string used to identify the lease. "
            "Please make sure to group by name.",
            labels=["name"],
        )
        master.add_metric([self._lease], 1 if leading else 0)
        yield master
        running = GaugeMetricFamily(
            "running_managed_controllers",
            "Indicates where instances of a controller are currently running",
            labels=["name", "manager"],
        )
        if leading:
            for name, role, count in self._sessions():
                if role == "active":
                    running.add_metric([name, MANAGER_LABEL], 1 if count else 0)
        yield running
