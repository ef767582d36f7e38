"""The local control plane: real etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok and Jaeger on loopback, started and stopped as one unit.

A cluster lives in a state directory that holds its PKI, configuration, one log per
component and ``state.json`` (ports, pids, kubeconfig). Any ``steward`` process can find
a running cluster from that directory and stop exactly the processes it started.

# Start-up
Components start in dependency order, each waited on until healthy: Jaeger (so no span
of the API server's start is lost) → etcd → kube-apiserver (``/readyz``) →
kube-controller-manager → kube-scheduler → kwok; then the simulated nodes are created
and waited on until ``Ready``. With ``ClusterConfig.steward`` (``make up``), Steward's
informer, manager and controllers
(:data:`~steward.cluster.identities.STEWARD_CONTROLLERS`) follow, and
kube-controller-manager runs without its own controllers of those names unless
``controllers`` says otherwise. A component that exits or
stays unhealthy stops the whole start-up: everything already started is stopped again
and the error shows the component's last log lines.

# Supervision
Steward's services are not started by ``up`` itself but by the cluster's supervisor
(:mod:`steward.cluster.supervisor`, the component ``supervisor``), which outlives ``up``
and starts each service again whenever it exits, with kubelet's backoff
(:attr:`ClusterConfig.restart_backoff`). ``status`` shows each one's restarts and last
exit; their records in :attr:`ClusterState.processes` are those of the processes running
now. ``down`` stops the supervisor first (it stops its services), then the rest.

# Identities
Each of Steward's components gets its own client certificate and kubeconfig
(:data:`STEWARD_IDENTITIES`, :meth:`ClusterState.component_kubeconfig`), in the group
``system:monitoring`` so that kube-apiserver continues its traces, and no more access
than the ClusterRoles of ``deploy/rbac/`` give it: they are applied with the admin
identity as soon as kube-apiserver is ready and bound to those users. The services
``ClusterConfig.steward`` starts use them; the admin kubeconfig stays in ``system:masters``.

# Ports
Every port is picked free on 127.0.0.1 at start-up, so clusters run side by side
(tests next to ``make up``). Nothing listens on any other address.
"""

from __future__ import annotations

import dataclasses
import datetime
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from steward.cluster import (
    admin,
    apiserver,
    binaries,
    certificates,
    controller_manager,
    etcd,
    jaeger,
    kwok,
    metrics,
    nodes,
    packages,
    pods,
    rbac,
    real_nodes,
    scheduler,
    services,
)
from steward.cluster.config import ClusterConfig
from steward.cluster.errors import AlreadyUpError, ClusterError
from steward.cluster.identities import STEWARD_IDENTITIES
from steward.cluster.process import ProcessRecord, free_port, stop
from steward.cluster.progress import Progress
from steward.cluster.services import SUPERVISOR, SUPERVISOR_STOP_GRACE
from steward.cluster.startup import launch, run
from steward.cluster.state import LOOPBACK, ClusterState, pick_ports
from steward.cluster.supervisor import ServiceStatus
from steward.security import ClientSecurity

COMPONENTS = (
    "jaeger",
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
)
"""Every component, in start order (stopped in reverse); Steward's own services follow."""


class LocalCluster:
    """A running local control plane (see the module docs for what it contains)."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    # Convenience accessors -------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (``system:masters``)."""
        return self.state.kubeconfig

    def component_kubeconfig(self, component: str) -> Path:
        """See :meth:`ClusterState.component_kubeconfig`."""
        return self.state.component_kubeconfig(component)

    def client_security(self, component: str = "admin") -> ClientSecurity:
        """See :meth:`ClusterState.client_security`."""
        return self.state.client_security(component)

    @property
    def directory(self) -> Path:
        return self.state.directory

    @property
    def jaeger_query_url(self) -> str:
        return self.state.jaeger_query_url

    @property
    def otlp_endpoint(self) -> str:
        return self.state.otlp_endpoint

    # Lifecycle -------------------------------------------------------------------------
    @classmethod
    def find(cls, config: ClusterConfig) -> LocalCluster:
        """The running cluster of ``config``, or :class:`NotUpError`."""
        directory = config.directory()
        state = ClusterState.load(directory)
        return cls(state)

    @classmethod
    def up(cls, config: ClusterConfig, *, progress: Progress | None = None) -> LocalCluster:
        """Start a cluster and wait until it is fully usable (see module docs)."""
        out = progress or Progress()
        directory = config.directory()
        _clear(directory, out)
        started = time.monotonic()
        fixed = {"apiserver": config.apiserver_port} if config.apiserver_port else {}
        pick_ports(fixed)  # fail on a taken fixed port before any build or start
        host = LOOPBACK
        if config.real_nodes:
            # Every prerequisite is checked before anything is built or started.
            packages.check_real_node_host()
            packages.ensure(packages.NODE_PACKAGES, out=out, install=False)
            host = packages.host_ip()
        if config.steward_pods and not config.real_nodes:
            raise ClusterError("Steward's pods need a real node: give real_nodes (--real-nodes)")
        if config.node_bootstrap and config.steward_pods:
            raise ClusterError(
                "real nodes cannot join by TLS bootstrap when Steward runs as pods: the "
                "controllers that would sign their certificates run on those nodes"
            )
        if config.node_bootstrap and not config.real_nodes:
            raise ClusterError("node_bootstrap is for real nodes: give real_nodes (--real-nodes)")
        wanted = (
            COMPONENTS
            + (binaries.NODE_TOOLS if config.real_nodes else ())
            + (metrics.METRICS_COMPONENTS if config.metrics else ())
        )
        paths = binaries.resolve(wanted, out=out)
        if config.steward_pods:
            from steward import images

            built = images.build_images(out=out, pause_binary=paths["pause"])
            config = dataclasses.replace(config, node_images=(*config.node_images, built.archive))
        state = ClusterState(
            name=config.name,
            directory=directory,
            ports=pick_ports(fixed),
            started_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            nodes=config.nodes,
            controllers=config.kcm_controllers(),
            host=host,
        )
        if config.real_nodes:
            spare = (free_port() for _ in iter(int, 1))
            state.real_nodes = nodes.plan(directory, config.real_nodes, spare)
        cluster = cls(state)
        try:
            cluster._start(config, paths, out)
        except BaseException as err:
            # Stop what was started; keep the logs for the user, drop the state file.
            cluster.down(progress=Progress(quiet=True), keep_state=True)
            (directory / "state.json").unlink(missing_ok=True)
            if isinstance(err, ClusterError):
                raise type(err)(
                    f"{err}\n(all component logs are kept in {directory / 'logs'})"
                ) from None
            raise
        state.startup_seconds = round(time.monotonic() - started, 1)
        state.save()
        out.say(f"cluster {config.name!r} is up in {state.startup_seconds:.1f}s")
        return cluster

    def down(self, *, progress: Progress | None = None, keep_state: bool = False) -> list[str]:
        """Stop exactly the processes this cluster started, then remove its state.

        The supervisor goes first, so that nothing is started again, and stops Steward's
        services itself; any it left running (it was killed, or it took longer than
        :data:`SUPERVISOR_STOP_GRACE`) are stopped here with the rest, in reverse start
        order. Returns the names of components that had to be killed after the grace
        period.
        """
        out = progress or Progress()
        if self.state.real_nodes:
            real_nodes.cordon_and_drain(self.state, out)
        supervisor = [p for p in self.state.processes if p.name == SUPERVISOR]
        killed = stop(supervisor, grace=SUPERVISOR_STOP_GRACE)
        self.state.refresh_services()
        rest = [p for p in self.state.processes if p.name != SUPERVISOR]
        killed += stop(list(reversed(rest)))
        if killed:
            out.say(f"killed after the grace period: {', '.join(killed)}")
        if self.state.real_nodes:
            real_nodes.restore_host(self.state, out)
        if not keep_state:
            shutil.rmtree(self.state.directory, ignore_errors=True)
        out.say(f"cluster {self.state.name!r} is down")
        return killed

    # Start-up --------------------------------------------------------------------------
    def _start(self, config: ClusterConfig, paths: dict[str, Path], out: Progress) -> None:
        """Each component in turn, waited on until healthy (see the module docs)."""
        st = self.state
        if st.real_nodes:
            real_nodes.claim_machine(st)
        certs = certificates.issue(st, out)
        run(st, jaeger.spec(st, paths["jaeger"]), config, out)
        run(st, etcd.spec(st, paths["etcd"], certs), config, out)
        run(st, apiserver.spec(st, paths["kube-apiserver"], certs, config), config, out)
        rbac.apply_steward_rbac(st, out)
        kcm = controller_manager.spec(st, paths["kube-controller-manager"], certs, config)
        run(st, kcm, config, out)
        run(st, scheduler.spec(st, paths["kube-scheduler"], certs), config, out)
        run(st, kwok.spec(st, paths["kwok"], certs, config), config, out)
        st.save()
        kwok.create_nodes(st, config.nodes, out, config.start_timeout)
        # Nodes that join by TLS bootstrap need the certificate controllers first:
        # Steward's, when it runs them.
        steward_first = config.steward and config.node_bootstrap
        if steward_first:
            services.start(st, config, out)
        if st.real_nodes:
            real_nodes.start(st, config, paths, certs.ca, out)
        if config.metrics:
            metrics.start(st, config, paths, certs.ca, out)
        if config.steward_pods:
            pods.deploy_pods(self, out=out, timeout=max(config.start_timeout, 300.0))
        if config.steward and not steward_first:
            services.start(st, config, out)

    def set_steward_tracing(
        self, traced: bool, *, timeout: float = 120.0, progress: Progress | None = None
    ) -> list[str]:
        """Export the spans of Steward's services to this cluster's Jaeger, or stop; see
        :func:`steward.cluster.services.set_tracing`. Returns the services replaced."""
        return services.set_tracing(self.state, traced, timeout=timeout, out=progress or Progress())

    # A small admin client for start-up (the kubernetes client is for everything else). ----
    def api(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        ok: tuple[int, ...] = (200,),
    ) -> dict[str, Any]:
        """One request to kube-apiserver as cluster admin; returns the decoded JSON body."""
        return admin.request(self.state, method, path, body, ok)

    # Status --------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Components with pid and liveness, ports, endpoints, and Ready nodes if reachable.

        A supervised component (one of Steward's services) also has ``restarts``,
        ``last_exit`` (``signal SIGKILL``, ``exit code 1``, or empty), ``last_exit_at`` and,
        while it waits to be started again, ``restart_at`` (ISO 8601, UTC)."""
        self.state.refresh_services()
        supervised = self.state.services()
        alive = self.state.alive()
        result: dict[str, Any] = {
            "name": self.state.name,
            "directory": str(self.state.directory),
            "kubeconfig": str(self.kubeconfig),
            "component_kubeconfigs": {
                c: str(self.component_kubeconfig(c)) for c in STEWARD_IDENTITIES
            },
            "server": self.state.server,
            "jaeger_query_url": self.jaeger_query_url,
            "otlp_endpoint": self.otlp_endpoint,
            "informer": self.state.informer_address,
            "manager": self.state.manager_address,
            "started_at": self.state.started_at,
            "startup_seconds": self.state.startup_seconds,
            "components": [
                {
                    "name": p.name,
                    "pid": p.pid,
                    "alive": alive[p.name],
                    "rss_bytes": p.rss_bytes(),
                    "log": p.log,
                    **(_supervised(supervised[p.name]) if p.name in supervised else {}),
                }
                for p in self.state.processes
            ],
        }
        try:
            items = self.api("GET", "/api/v1/nodes").get("items", [])
            result["nodes"] = {n["metadata"]["name"]: nodes.node_ready(n) for n in items}
        except (ClusterError, OSError) as err:
            result["nodes_error"] = str(err)
        return result

    def iter_processes(self) -> Iterator[ProcessRecord]:
        """Every component's process; a restarted service's current one."""
        self.state.refresh_services()
        yield from self.state.processes

    # Real nodes' kubelets: a node that dies and comes back. ------------------------------
    def _kubelet(self, node: str) -> ProcessRecord:
        name = f"kubelet-{node}"
        found = [p for p in self.state.processes if p.name == name]
        if not found:
            known = ", ".join(n.name for n in self.state.real_nodes) or "none"
            raise ClusterError(f"no real node {node!r} in this cluster (real nodes: {known})")
        return found[-1]

    def stop_kubelet(self, node: str) -> None:
        """Stop real node ``node``'s kubelet (SIGTERM, SIGKILL after 10 s), as a kubelet
        that died: its containers keep running in containerd, and the node's status and
        Lease are no longer renewed."""
        stop([self._kubelet(node)])

    def start_kubelet(self, node: str, *, die_with_parent: bool = True) -> None:
        """Start real node ``node``'s stopped kubelet again with its own command line; it
        finds its pods' containers in containerd and reports the node again.

        Raises:
            ClusterError: ``node`` is not a real node, or its kubelet still runs.
        """
        record = self._kubelet(node)
        if record.alive():
            raise ClusterError(f"the kubelet of {node} is running (pid {record.pid})")
        self.state.processes.remove(record)
        config = ClusterConfig(name=self.state.name, die_with_parent=die_with_parent)
        launch(self.state, record.name, record.argv, config)


def _supervised(service: ServiceStatus) -> dict[str, Any]:
    """What :meth:`LocalCluster.status` adds for a service the supervisor runs."""
    return {
        "restarts": service.restarts,
        "last_exit": service.last_exit,
        "last_exit_at": service.last_exit_at,
        "restart_at": service.restart_at,
    }


def _clear(directory: Path, out: Progress) -> None:
    """Make ``directory`` an empty state directory, unless a cluster runs there.

    Raises:
        AlreadyUpError: a process of the cluster recorded there is alive.
    """
    if (directory / "state.json").exists():
        existing = ClusterState.load(directory)
        alive = [name for name, ok in existing.alive().items() if ok]
        if alive:
            raise AlreadyUpError(
                f"cluster {existing.name!r} is already up in {directory} "
                f"(running: {', '.join(alive)}; kubeconfig: {existing.kubeconfig}). "
                "Use it, or run `steward cluster down` first."
            )
        out.say(f"removing the state of a cluster that is no longer running: {directory}")
    if directory.exists():
        # Left by a stopped or failed cluster (its logs are kept until the next start).
        shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)
