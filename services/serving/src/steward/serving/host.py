"""The process around a Steward service: one gRPC server with health, reflection and
tracing, bound with or without TLS, its HTTP probes and metrics, its shared flags and
its exit codes.

The informer and the manager are each a servicer and what it needs; this module is
everything around it, once:

- :class:`HostOptions`: the fields every service has (address, kubeconfig, probes,
  metrics, shutdown grace, security), each service's options extend it;
- :class:`ServiceHost`: build, bind and start the gRPC server with the standard health
  service (one status per service name) and server reflection, then stop it;
- :class:`HostedService`: the base of a service's server, whose :meth:`~HostedService.run`
  serves until SIGTERM or SIGINT;
- :func:`add_listen_argument`, :func:`add_kubeconfig_argument`,
  :func:`add_endpoint_arguments`, :func:`check_addresses`: the flags both services have;
  :func:`add_count_argument` and :func:`check_counts` for their limits (whole numbers of
  at least 1);
- :func:`run_service` and :func:`main_cli`: the process, its logging, tracing, garbage
  collector settings and exit codes.

# Shutdown
:meth:`ServiceHost.begin_shutdown` turns every health status NOT_SERVING and ``/readyz``
unready; the service then ends its streams; :meth:`ServiceHost.stop` stops the server with
a grace period for unary calls in flight, then the metrics endpoint and the probes.

# Exit codes
:func:`run_service` returns 0 on a clean stop (SIGTERM, SIGINT), 2 for bad flags or a bad
``STEWARD_GC_THRESHOLD``, 1 when the service cannot start (no API server configuration,
an address in use); every error goes to stderr as ``steward <name>: error: …``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc  # type: ignore[import-untyped]
from prometheus_client import CollectorRegistry

from steward import gctuning
from steward.kube import ApiError
from steward.logs import add_logging_flags
from steward.logs import configure as configure_logging
from steward.runtime.health import (
    LoopHealth,
    split_address,
    start_loop_health,
    start_metrics_server,
    stop_metrics_server,
)
from steward.serving import serve_until_signalled
from steward.serving.reflection import enable_reflection
from steward.serving.security import ServingSecurity
from steward.serving.tracing import ServerTracing
from steward.telemetry import configure_tracing
from steward.version import add_version_flag

__all__ = [
    "HEALTH_SERVICE_NAME",
    "HostOptions",
    "HostedService",
    "ServiceHost",
    "add_count_argument",
    "add_endpoint_arguments",
    "add_kubeconfig_argument",
    "add_listen_argument",
    "check_addresses",
    "check_counts",
    "main_cli",
    "run_service",
]

HEALTH_SERVICE_NAME: str = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
"""``grpc.health.v1.Health``."""


@dataclass
class HostOptions:
    """What every Steward service host needs. Every field has a working default; each
    service's options extend these (and give ``listen`` its own default)."""

    listen: str = "127.0.0.1:0"
    """gRPC address (host:port; port 0 picks a free one)."""
    kubeconfig: str | None = None
    """Kubeconfig file; None for in-cluster config, else $KUBECONFIG or ~/.kube/config."""
    metrics_listen: str | None = None
    """host:port to serve Prometheus metrics on over HTTP; None (the default) for none."""
    health_listen: str | None = None
    """host:port to answer /healthz and /readyz on over HTTP (kubelet probes cannot
    present a client certificate to the mTLS port); None (the default) for none."""
    shutdown_grace: float = 5.0
    """Seconds unary calls in flight may take to finish on shutdown. Defaults to 5."""
    security: ServingSecurity = field(default_factory=ServingSecurity)
    """mTLS and authorization; the default needs TLS files (see steward.security)."""


class ServiceHost:
    """One service's gRPC server, health service, reflection, tracing, probes and metrics.

    ``unready`` (optional) says why the service is not ready although serving (the
    manager: not the leader); ``/readyz`` also answers unready while starting and
    shutting down. ``server_options`` are added to the gRPC server's channel options.

    Raises (constructor):
        SecurityConfigError: ``options.security`` cannot make a server that starts.
    """

    def __init__(
        self,
        service_name: str,
        options: HostOptions,
        metrics: CollectorRegistry,
        *,
        unready: Callable[[], str | None] | None = None,
        server_options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        options.security.validate()
        self.service_name = service_name
        self.options = options
        self.metrics = metrics
        self.health = health.aio.HealthServicer()
        self.tracing = ServerTracing()
        self.listen_host = ""
        self.port = 0
        self.metrics_port = 0
        self._unready = unready
        self._server_options = [*server_options, ("grpc.so_reuseport", 0)]
        self._server: grpc.aio.Server | None = None
        self._metrics_server: Any = None
        self._http_health: LoopHealth | None = None
        self._phase: str | None = "starting"

    async def start(
        self, add_servicers: Callable[[grpc.aio.Server], None], *, serving: bool = True
    ) -> int:
        """Build the server with the service (``add_servicers``), health and reflection,
        bind it, start it, then the probes and the metrics endpoint; returns the gRPC port.

        The overall health status ("") turns SERVING, the service's own SERVING or, with
        ``serving=False``, NOT_SERVING until :meth:`set_serving`.

        Raises:
            RuntimeError: the address cannot be bound.
            OSError: the probes' or the metrics' address cannot be bound.
        """
        server = grpc.aio.server(interceptors=[self.tracing], options=self._server_options)
        add_servicers(server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        enable_reflection((self.service_name, HEALTH_SERVICE_NAME), server)
        host, port = split_address(self.options.listen)
        self.listen_host = host
        self.port = self.options.security.bind(server, f"{host}:{port}")
        if self.port == 0:
            raise RuntimeError(f"cannot listen on {self.options.listen}")
        self.tracing.address = (host, self.port)
        await server.start()
        self._server = server
        self._phase = None
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        await self.set_serving(serving)
        self._http_health = start_loop_health(
            self.options.health_listen or "", unready=self.why_unready
        )
        if self.options.metrics_listen:
            self._metrics_server = start_metrics_server(self.options.metrics_listen, self.metrics)
            self.metrics_port = self._metrics_server.server_port
        return self.port

    async def set_serving(self, serving: bool) -> None:
        """The health status of the service's own name: SERVING or NOT_SERVING."""
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        await self.health.set(self.service_name, status)

    def why_unready(self) -> str | None:
        """Why ``/readyz`` answers unready (starting, shutting down, the service's own
        reason); None when ready."""
        if self._phase is not None:
            return self._phase
        return self._unready() if self._unready is not None else None

    async def begin_shutdown(self) -> None:
        """``/readyz`` unready and every health status NOT_SERVING, for good."""
        self._phase = "shutting down"
        await self.health.enter_graceful_shutdown()

    async def stop(self, grace: float | None = None) -> None:
        """Stop the server (``grace`` seconds for unary calls in flight; default
        ``options.shutdown_grace``), then the metrics endpoint and the probes."""
        if self._server is not None:
            await self._server.stop(self.options.shutdown_grace if grace is None else grace)
            self._server = None
        stop_metrics_server(self._metrics_server)
        self._metrics_server = None
        if self._http_health is not None:
            self._http_health.stop()
            self._http_health = None


class HostedService(ABC):
    """A service's server on a :class:`ServiceHost` (``host``): :meth:`start` and
    :meth:`stop` are the service's, :meth:`run` blocks until signalled or cancelled."""

    host: ServiceHost

    @abstractmethod
    async def start(self) -> int:
        """Bind and start serving (:meth:`ServiceHost.start`, then the service's own
        work); returns the gRPC port."""

    @abstractmethod
    async def stop(self, grace: float | None = None) -> None:
        """Stop gracefully: :meth:`ServiceHost.begin_shutdown`, end the streams,
        :meth:`ServiceHost.stop`, then the service's own work."""

    @property
    def port(self) -> int:
        """The bound gRPC port (0 before :meth:`start`)."""
        return self.host.port

    @property
    def metrics_port(self) -> int:
        """The bound metrics port (0 without ``metrics_listen`` or before :meth:`start`)."""
        return self.host.metrics_port

    async def run(self) -> None:
        """Start, serve until SIGTERM/SIGINT or cancellation, then stop gracefully."""
        await serve_until_signalled(self.start, self.stop)


# Command line ------------------------------------------------------------------------------
def add_listen_argument(parser: argparse.ArgumentParser, env_var: str, default: str) -> None:
    """``--listen``: the gRPC address, from ``env_var`` else ``default``."""
    parser.add_argument(
        "--listen",
        default=os.environ.get(env_var, default),
        help="gRPC address, host:port (port 0: a free one) (default: %(default)s)",
    )


def add_kubeconfig_argument(parser: argparse.ArgumentParser) -> None:
    """``--kubeconfig`` (no variable of its own: the client reads $KUBECONFIG)."""
    parser.add_argument(
        "--kubeconfig",
        default=None,
        help="kubeconfig file (default: in-cluster config in a pod, else $KUBECONFIG or "
        "~/.kube/config)",
    )


def add_endpoint_arguments(parser: argparse.ArgumentParser, env_prefix: str, ready: str) -> None:
    """``--health-listen`` and ``--metrics-listen``, from ``<env_prefix>_HEALTH_LISTEN``
    and ``<env_prefix>_METRICS_LISTEN``; ``ready`` says what /readyz reports."""
    parser.add_argument(
        "--health-listen",
        default=os.environ.get(f"{env_prefix}_HEALTH_LISTEN"),
        help=f"answer GET /healthz (the event loop runs) and /readyz ({ready}) over plain "
        "HTTP on host:port, for kubelet probes (default: off)",
    )
    parser.add_argument(
        "--metrics-listen",
        default=os.environ.get(f"{env_prefix}_METRICS_LISTEN"),
        help="serve Prometheus metrics over HTTP on host:port (default: off)",
    )


def add_count_argument(
    parser: argparse.ArgumentParser, flag: str, env_var: str, default: int, help: str
) -> None:
    """An integer flag of at least 1 (a limit, a size), from ``env_var`` else ``default``;
    :func:`check_counts` checks the value."""
    parser.add_argument(
        flag, type=int, default=int(os.environ.get(env_var, str(default))), help=help
    )


def check_counts(args: argparse.Namespace, *flags: str) -> None:
    """Check that each flag of :func:`add_count_argument` in ``flags`` is at least 1.

    Raises:
        ValueError: one is below 1; the message names the flag and its value.
    """
    for flag in flags:
        value = getattr(args, flag.removeprefix("--").replace("-", "_"))
        if value < 1:
            raise ValueError(f"{flag} must be at least 1, got {value}")


def check_addresses(args: argparse.Namespace) -> None:
    """Check ``--listen`` and ``--metrics-listen``.

    Raises:
        ValueError: one is not host:port; the message names the address.
    """
    split_address(args.listen)
    if args.metrics_listen:
        split_address(args.metrics_listen)


OptionsT = TypeVar("OptionsT")


def run_service(
    name: str,
    args: argparse.Namespace,
    options_from_args: Callable[[argparse.Namespace], OptionsT],
    build: Callable[[OptionsT], HostedService],
) -> int:
    """Run the service ``steward <name>`` until signalled: 0 on a clean stop, 2 for bad
    flags (``options_from_args`` raised ValueError) or a bad ``STEWARD_GC_THRESHOLD``, 1
    when it cannot start (``build`` raised ApiError, an address in use); errors go to
    stderr. Spans go to ``$OTEL_EXPORTER_OTLP_ENDPOINT`` as service ``steward-<name>``."""
    try:
        options = options_from_args(args)
        young = gctuning.threshold_from_env()
    except ValueError as err:
        print(f"steward {name}: error: {err}", file=sys.stderr)
        return 2
    configure_logging(args, f"steward-{name}")
    try:
        service = build(options)
    except ApiError as err:
        print(f"steward {name}: error: {err}", file=sys.stderr)
        return 1
    try:
        configure_tracing(f"steward-{name}")
        gctuning.tune(young)
        asyncio.run(service.run())
    except KeyboardInterrupt:
        pass
    except (OSError, RuntimeError) as err:
        print(f"steward {name}: error: {err}", file=sys.stderr)
        return 1
    return 0


def main_cli(
    name: str,
    description: str,
    epilog: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    main: Callable[[argparse.Namespace], int],
) -> NoReturn:
    """The ``steward-<name>`` console script: parse the flags, run ``main``, exit."""
    parser = argparse.ArgumentParser(
        prog=f"steward-{name}",
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_version_flag(parser)
    add_logging_flags(parser)
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
