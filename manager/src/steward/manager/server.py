"""The ``steward manager`` process: gRPC server, leader election, health, reflection, metrics.

# Leadership
Replicas elect a leader through the Lease ``steward-manager`` in Steward's namespace. The
leader loads the controller Leases (:meth:`Registry.recover`) and serves; a replica that
is not the leader answers every RPC with UNAVAILABLE naming the leader and its address
(no proxying: instances retry with backoff and reach the leader through the Service or
their configured address). The health status of ``steward.v1.ManagerService`` is SERVING
only on the leader; the overall status ("") is SERVING while the process runs.

# Shutdown
On SIGTERM or SIGINT: health NOT_SERVING, every Session ends with UNAVAILABLE (instances
keep reconciling on their current lease and reconnect to the next manager within their
renew deadline), the leader Lease is released so another replica takes over at once, and
the server stops with a grace period for unary calls in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import socket
import uuid
from dataclasses import dataclass, field

import grpc

from steward.kube import ApiError, ClusterAccess, KubeClient, load_access
from steward.manager.election import LeaderElector
from steward.manager.enablement import UPSTREAM_DISABLED_BY_DEFAULT, Enablement
from steward.manager.leases import LeaseStore
from steward.manager.metrics import ManagerMetrics
from steward.manager.registry import DEFAULT_MAX_STANDBYS, Registry, Timing
from steward.manager.service import DEFAULT_MAX_SESSIONS_PER_PEER, ManagerService, add_to_server
from steward.serving import host
from steward.serving.security import Guard, add_serving_arguments, serving_from_args
from steward.v1 import manager_pb2

log = logging.getLogger(__name__)

SERVICE_NAME: str = manager_pb2.DESCRIPTOR.services_by_name["ManagerService"].full_name
DEFAULT_LISTEN = "127.0.0.1:50062"
DEFAULT_NAMESPACE = "steward-system"
LEADER_LEASE = "steward-manager"


@dataclass
class ManagerOptions(host.HostOptions):
    """How to run the manager: the host's options (kubeconfig, probes, metrics, shutdown
    grace, security) and the manager's own. Every field has a working default."""

    listen: str = DEFAULT_LISTEN
    """gRPC address (host:port; port 0 picks a free one). Defaults to 127.0.0.1:50062."""
    advertise: str = ""
    """Address other replicas name as the leader's; empty for the bound address."""
    namespace: str = DEFAULT_NAMESPACE
    """Where the Leases live (created if missing). Defaults to steward-system."""
    controllers: list[str] = field(default_factory=lambda: ["*"])
    """kube-controller-manager's --controllers entries. Defaults to ['*']."""
    disabled_by_default: list[str] = field(default_factory=list)
    """Names '*' does not enable. Defaults to none."""
    timing: Timing = field(default_factory=Timing)
    """Lease numbers (15 s / 10 s / 2 s by default) for controllers and the manager's own
    election."""
    identity: str = ""
    """This replica's identity in leader election; empty for hostname_pid_random."""
    max_sessions_per_peer: int = DEFAULT_MAX_SESSIONS_PER_PEER
    """Sessions one caller (its identity, else its connection) may hold at once. Defaults
    to 100."""
    max_standbys: int = DEFAULT_MAX_STANDBYS
    """Standby instances one controller may have. Defaults to 16."""


class ManagerServer(host.HostedService):
    """The manager's server, registry and election; :meth:`run` blocks until signalled.

    :meth:`start` and :meth:`stop` are also usable alone (tests run it in-process).

    Raises (constructor):
        ApiError: no API server configuration could be loaded.
        InvalidNameError: a --controllers or disabled-by-default entry is malformed.
        ValueError: the lease numbers are inconsistent.
    """

    def __init__(self, options: ManagerOptions, access: ClusterAccess | None = None) -> None:
        options.timing.check()
        self.options = options
        self.metrics = ManagerMetrics()
        self.host = host.ServiceHost(
            SERVICE_NAME, options, self.metrics.registry, unready=self._not_leader
        )
        self.access = access if access is not None else load_access(options.kubeconfig)
        self.client = KubeClient(self.access)
        self.enablement = Enablement.parse(options.controllers, options.disabled_by_default)
        self.store = LeaseStore(self.client, options.namespace)
        self.identity = (
            options.identity or f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        )
        self.elector: LeaderElector | None = None
        self.registry = Registry(
            self.store,
            self.enablement,
            options.timing,
            self.metrics,
            self._leading,
            max_standbys=options.max_standbys,
        )
        self.guard = Guard(
            options.security, self.client if options.security.authorization == "RBAC" else None
        )
        self.service = ManagerService(
            self.registry,
            self._not_leader,
            max_sessions_per_peer=options.max_sessions_per_peer,
            guard=self.guard,
        )
        self.metrics.register_gauges(self.registry.session_counts, self._leading, LEADER_LEASE)
        self._tasks: list[asyncio.Task[None]] = []

    def _leading(self) -> bool:
        return self.elector is not None and self.elector.is_leader()

    def _not_leader(self) -> str | None:
        """Why this replica does not serve (nor is ready): only the leader, with the
        registry loaded, does; None when it does."""
        if self.elector is None:
            return "the manager is starting"
        if self.elector.is_leader():
            if not self.registry.ready:
                return "the manager is loading the registry; retry"
            return None
        return f"this manager ({self.identity}) is not the leader; {self.elector.describe_leader()}"

    async def _started_leading(self) -> None:
        await self.registry.recover()
        await self.host.set_serving(True)

    def _stopped_leading(self) -> None:
        self.registry.reset(grpc.StatusCode.UNAVAILABLE, "the manager stopped leading")
        self.service.close_all(grpc.StatusCode.UNAVAILABLE, "the manager stopped leading")
        asyncio.get_running_loop().create_task(self.host.set_serving(False))

    async def start(self) -> int:
        """Bind, start serving and campaign for leadership; returns the gRPC port.

        Raises:
            RuntimeError: the address cannot be bound.
        """
        # From here on ready, and the service SERVING, when leading.
        await self.host.start(lambda server: add_to_server(self.service, server), serving=False)
        self.elector = LeaderElector(
            self.client,
            self.options.namespace,
            LEADER_LEASE,
            self.identity,
            self.options.advertise or f"{self.host.listen_host}:{self.port}",
            self.options.timing,
            self._started_leading,
            self._stopped_leading,
        )
        try:
            await self.store.ensure_namespace()
        except ApiError as err:
            log.warning("cannot ensure namespace %s yet: %s", self.options.namespace, err)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self.elector.run()), loop.create_task(self._ticker())]
        log.info(
            "manager %s serving on %s:%d (API server %s, namespace %s)",
            self.identity,
            self.host.listen_host,
            self.port,
            self.access.host,
            self.options.namespace,
        )
        return self.port

    async def _ticker(self) -> None:
        interval = min(0.25, self.options.timing.retry_period / 4)
        while True:
            try:
                await self.registry.tick()
            except Exception:
                log.exception("registry tick failed")
            await asyncio.sleep(interval)

    async def wait_leading(self) -> None:
        """Wait until this replica leads and has loaded the registry (use a timeout)."""
        while self._not_leader() is not None:  # noqa: ASYNC110 - state of several parts
            await asyncio.sleep(0.05)

    async def stop(self, grace: float | None = None) -> None:
        """Health NOT_SERVING, end the Sessions (UNAVAILABLE), release leadership, stop."""
        await self.host.begin_shutdown()
        self.service.close_all(grpc.StatusCode.UNAVAILABLE, "the manager is shutting down")
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        self.registry.reset(grpc.StatusCode.UNAVAILABLE, "the manager is shutting down")
        await self.host.stop(grace)
        self.client.close()


# Command line ------------------------------------------------------------------------------
DESCRIPTION = """\
Run the manager: the registry of Steward's controllers. Every controller instance holds a
bidirectional Session with it (register, heartbeat, commands). A name held by a live
instance is refused with ALREADY_EXISTS unless the newcomer stands by; a standby is
promoted when the active instance deregisters, or once its lease lapses. The
--controllers rules are kube-controller-manager's; EnableController/DisableController
change them at run time (a disabled controller is told to DRAIN, then STOP).

State lives in the API server: one coordination.k8s.io/v1 Lease per controller in
--namespace, and the Lease steward-manager elects the leader among replicas (the others
answer UNAVAILABLE naming the leader). Health and reflection are on
(try: grpcurl -cacert ca.crt -cert client.crt -key client.key 127.0.0.1:50062
list). Callers are authenticated (client certificate or bearer token); with RBAC, a
Session needs `register` of controllers.steward.io named as the controller, the
reads `get`/`list`, and EnableController/DisableController `enable`/`disable`.
"""

EPILOG = """\
environment (flags win):
  STEWARD_MANAGER_LISTEN                 --listen
  STEWARD_MANAGER_NAMESPACE              --namespace
  STEWARD_MANAGER_CONTROLLERS            --controllers
  STEWARD_MANAGER_DISABLED_BY_DEFAULT    --disabled-by-default
  STEWARD_MANAGER_METRICS_LISTEN         --metrics-listen
  STEWARD_MANAGER_MAX_SESSIONS_PER_PEER  --max-sessions-per-peer
  STEWARD_MANAGER_MAX_STANDBYS           --max-standbys
  KUBECONFIG                             --kubeconfig (in-cluster config is used in a pod)
  STEWARD_MANAGER_<FLAG>                 each security flag, e.g. STEWARD_MANAGER_TLS_CERT_FILE
  STEWARD_GC_THRESHOLD                   the garbage collector's young threshold (default
                                         50000; 0: CPython's own settings)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``steward manager`` flags, with defaults from the environment."""
    env = os.environ.get
    host.add_listen_argument(parser, "STEWARD_MANAGER_LISTEN", DEFAULT_LISTEN)
    parser.add_argument(
        "--advertise",
        default="",
        help="address other replicas give as the leader's (default: the bound address)",
    )
    host.add_kubeconfig_argument(parser)
    parser.add_argument(
        "--namespace",
        default=env("STEWARD_MANAGER_NAMESPACE", DEFAULT_NAMESPACE),
        help="namespace of the Leases, created if missing (default: %(default)s)",
    )
    parser.add_argument(
        "--controllers",
        default=env("STEWARD_MANAGER_CONTROLLERS", "*"),
        help="comma-separated: '*' enables every controller not disabled by default, "
        "'foo' enables foo, '-foo' disables foo (default: %(default)s)",
    )
    parser.add_argument(
        "--disabled-by-default",
        default=env("STEWARD_MANAGER_DISABLED_BY_DEFAULT", ",".join(UPSTREAM_DISABLED_BY_DEFAULT)),
        help="comma-separated controllers '*' does not enable (default: those "
        "kube-controller-manager's '*' does not enable, %(default)s; '' for none)",
    )
    parser.add_argument(
        "--leader-elect-lease-duration",
        type=float,
        default=15.0,
        help="seconds a lease lives after its last renewal (default: %(default)s)",
    )
    parser.add_argument(
        "--leader-elect-renew-deadline",
        type=float,
        default=10.0,
        help="seconds an instance may act without a renewal (default: %(default)s)",
    )
    parser.add_argument(
        "--leader-elect-retry-period",
        type=float,
        default=2.0,
        help="seconds between heartbeats and renewal attempts (default: %(default)s)",
    )
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=30.0,
        help="seconds a disabled controller may drain before STOP (default: %(default)s)",
    )
    host.add_endpoint_arguments(parser, "STEWARD_MANAGER", ready="serving and leading")
    host.add_count_argument(
        parser,
        "--max-sessions-per-peer",
        "STEWARD_MANAGER_MAX_SESSIONS_PER_PEER",
        DEFAULT_MAX_SESSIONS_PER_PEER,
        "Sessions one caller (its identity; with AlwaysAllow, its connection) may hold at "
        "once; one more is refused with RESOURCE_EXHAUSTED (default: %(default)s)",
    )
    host.add_count_argument(
        parser,
        "--max-standbys",
        "STEWARD_MANAGER_MAX_STANDBYS",
        DEFAULT_MAX_STANDBYS,
        "standby instances one controller may have; one more is refused with "
        "RESOURCE_EXHAUSTED (default: %(default)s)",
    )
    add_serving_arguments(parser, "STEWARD_MANAGER")


def options_from_args(args: argparse.Namespace) -> ManagerOptions:
    """Check the flags and build the options.

    Raises:
        ValueError: a flag is out of range or malformed; the message names it.
    """
    timing = Timing(
        lease_duration=args.leader_elect_lease_duration,
        renew_deadline=args.leader_elect_renew_deadline,
        retry_period=args.leader_elect_retry_period,
        drain_timeout=args.drain_timeout,
    )
    timing.check()
    host.check_counts(args, "--max-sessions-per-peer", "--max-standbys")
    host.check_addresses(args)
    Enablement.parse([args.controllers], [args.disabled_by_default])
    return ManagerOptions(
        listen=args.listen,
        advertise=args.advertise,
        kubeconfig=args.kubeconfig,
        namespace=args.namespace,
        controllers=[args.controllers],
        disabled_by_default=[args.disabled_by_default],
        timing=timing,
        metrics_listen=args.metrics_listen,
        health_listen=args.health_listen,
        max_sessions_per_peer=args.max_sessions_per_peer,
        max_standbys=args.max_standbys,
        security=serving_from_args(args),
    )


def main(args: argparse.Namespace) -> int:
    """Run the manager until signalled: 0 on a clean stop, 2 for bad flags, 1 when it
    cannot start (no API server configuration, address in use); errors go to stderr."""
    return host.run_service("manager", args, options_from_args, ManagerServer)


def main_cli() -> None:
    """The ``steward-manager`` console script (also ``python -m steward.manager``)."""
    host.main_cli("manager", DESCRIPTION, EPILOG, add_arguments, main)
