"""The service host: runs one controller as a process (controller-runtime's Manager).

:func:`run` is a controller's whole ``main``: it parses the standard flags plus the
controller's own, sets up logging and tracing (``OTEL_*``; service
``steward-controller-<name>``), dials the informer (and the manager, with ``--manager``)
with the transport security of ``--tls-*``/``--token-file`` (or ``STEWARD_TLS_*``),
creates the API client from ``--kubeconfig`` (in-cluster, ``$KUBECONFIG`` or
``~/.kube/config`` when not given) — fenced by construction: no write leaves an instance
that does not hold its lease — serves ``/healthz``/``/readyz`` on ``--health-listen`` and
Prometheus metrics on ``--metrics-listen``, and runs the controller until SIGTERM or
SIGINT, then drains: in-flight reconciles finish within the grace period, the manager is
told goodbye (a standby takes over at once), and the process exits 0.

# Errors
Bad flags or unreadable credentials exit 2 with a usage message. A refused registration
(ALREADY_EXISTS: the name is held and ``--standby`` was not given) or a watch the informer
refuses for good (unknown type, no permission) exits 1 with the reason. An informer or a
manager that is down is waited for (with backoff), not an error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from prometheus_client import REGISTRY

from steward import gctuning
from steward.flowcontrol import add_rate_limit_arguments, bucket_from_args
from steward.kube import KubeClient, load_access
from steward.runtime.controller import Controller, ControllerDefinition
from steward.runtime.health import (
    HEALTH_LISTEN_ENV,
    start_loop_health,
    start_metrics_server,
    stop_metrics_server,
)
from steward.runtime.mirror import MirrorError
from steward.runtime.session import RegistrationRefusedError, SessionOptions
from steward.security import SecurityConfigError, add_client_arguments, client_from_args
from steward.telemetry import configure_tracing

log = logging.getLogger(__name__)


_HELP = """\
It watches through Steward's informer (--informer), writes to the API server with the
credentials of --kubeconfig (default: in-cluster, $KUBECONFIG or ~/.kube/config), and with
--manager registers with Steward's manager: only the active instance reconciles, and a
second one is refused unless it says --standby. Every write is refused while this
instance does not hold its lease. The informer and the manager are dialled with mutual
TLS (--tls-*, or STEWARD_TLS_*); plaintext needs --insecure-plaintext. Spans go over OTLP
when OTEL_EXPORTER_OTLP_ENDPOINT is set. STEWARD_GC_THRESHOLD sets the garbage collector's
young threshold (default 50000; 0: CPython's own). SIGTERM or SIGINT drains: running reconciles
finish within --shutdown-grace, the manager is told goodbye, and the process exits 0.
Exit status 2: bad flags; 1: the registration or the watch was refused."""


def _default_prog(definition: ControllerDefinition[Any]) -> str:
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return f"python -m {spec.name}" if spec is not None else definition.name


def add_workers_alias(parser: Any, flag: str, what: str, default: int) -> None:
    """Add kube-controller-manager's ``--concurrent-<x>-syncs`` flag of a controller
    (``flag``) to ``parser`` as another name of the host's ``--workers``: ``what`` (the
    objects, in the help) synced at once, ``default`` the controller's own default."""
    parser.add_argument(
        flag,
        dest="workers",
        type=int,
        default=argparse.SUPPRESS,
        metavar="N",
        help=f"{what} synced at once: the same as --workers (default {default})",
    )


def parser_for(
    definition: ControllerDefinition[Any], prog: str | None = None
) -> argparse.ArgumentParser:
    """The command line of a hosted controller: the standard flags and its own."""
    defaults = definition.options
    parser = argparse.ArgumentParser(
        prog=prog or _default_prog(definition),
        description=(definition.description or f"Steward controller {definition.name}.")
        + "\n\n"
        + _HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    std = parser.add_argument_group("controller host")
    std.add_argument(
        "--kubeconfig", help="kubeconfig for the API server (default: in-cluster or $KUBECONFIG)"
    )
    std.add_argument(
        "--informer", default="127.0.0.1:50061", help="informer host:port (default %(default)s)"
    )
    std.add_argument("--manager", default=None, help="manager host:port (default: run alone)")
    std.add_argument(
        "--workers",
        type=int,
        default=defaults.max_concurrent_reconciles,
        help="concurrent reconciles (default %(default)s)",
    )
    std.add_argument(
        "--namespace", default=defaults.namespace, help="watch only this namespace (default: all)"
    )
    std.add_argument(
        "--standby",
        action="store_true",
        help="stand by if another instance is active, instead of exiting 1",
    )
    std.add_argument(
        "--resync-period",
        type=float,
        default=defaults.resync_period,
        help="seconds between re-queuing every primary object while active (default: never)",
    )
    std.add_argument(
        "--shutdown-grace",
        type=float,
        default=defaults.shutdown_grace_seconds,
        help="seconds in-flight reconciles may finish on SIGTERM (default %(default)s)",
    )
    std.add_argument(
        "--metrics-listen",
        "--metrics",
        dest="metrics_listen",
        default=os.environ.get("STEWARD_METRICS_LISTEN") or None,
        help="serve Prometheus metrics on host:port (default: $STEWARD_METRICS_LISTEN, or off)",
    )
    std.add_argument(
        "--health-listen",
        default=os.environ.get(HEALTH_LISTEN_ENV) or None,
        help=f"serve /healthz and /readyz on host:port (default: ${HEALTH_LISTEN_ENV}, or off)",
    )
    add_rate_limit_arguments(std)  # --kube-api-qps, --kube-api-burst
    add_client_arguments(parser)  # --tls-ca-file, --tls-cert-file, --tls-key-file, ...
    if definition.add_flags:
        definition.flag_parser(parser.add_argument_group(f"{definition.name} controller"))
    return parser


async def serve(
    definition: ControllerDefinition[Any],
    args: argparse.Namespace,
    *,
    ready: Callable[[Controller[Any]], None] | None = None,
) -> None:
    """Run ``definition`` as :func:`run` does, with flags already parsed, until
    cancelled (``ready`` is called with the bound controller once it exists)."""
    options = replace(
        definition.options,
        max_concurrent_reconciles=args.workers,
        namespace=args.namespace,
        resync_period=args.resync_period,
        shutdown_grace_seconds=args.shutdown_grace,
    )
    api = KubeClient(
        load_access(args.kubeconfig),
        user_agent=f"steward-{definition.name}-controller",
        workers=max(16, 2 * options.max_concurrent_reconciles),
        rate_limiter=bucket_from_args(args, definition.options.rate_limit_scale),
    )
    metrics = start_metrics_server(args.metrics_listen, REGISTRY) if args.metrics_listen else None
    controller: Controller[Any] | None = None

    def unready() -> str | None:
        if controller is None or not controller.mirror.has_synced():
            return "the mirror has not synced yet"
        return None

    health = start_loop_health(args.health_listen or "", unready=unready)
    try:
        async with args.security.channel(args.informer) as channel:
            controller = definition.new(channel, api, options, args)
            if ready is not None:
                ready(controller)
            session = SessionOptions(
                controller=definition.name, standby=args.standby, security=args.security
            )
            await controller.run(manager=args.manager, session=session if args.manager else None)
    finally:
        if health is not None:
            health.stop()
        stop_metrics_server(metrics)
        api.close()


def run(
    definition: ControllerDefinition[Any],
    argv: Sequence[str] | None = None,
    *,
    prog: str | None = None,
) -> int:
    """Host the controller (see the module docs) and return the process's exit status:
    ``raise SystemExit(steward.run(MY_CONTROLLER))``. The controller's own flags
    (:meth:`~steward.runtime.controller.ControllerBuilder.flags`) are parsed with the
    standard ones and reach its reconciler as ``ctx.flags``."""
    parser = parser_for(definition, prog)
    args = parser.parse_args(argv)
    try:
        args.security = client_from_args(args)
    except SecurityConfigError as err:
        parser.error(str(err))
    if args.workers < 1:
        parser.error(f"--workers must be at least 1, not {args.workers}")
    try:
        bucket_from_args(args)
        young = gctuning.threshold_from_env()
    except ValueError as err:
        parser.error(str(err))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    configure_tracing(f"steward-controller-{definition.name}")
    gctuning.tune(young)
    try:
        asyncio.run(_until_signalled(definition, args))
    except RegistrationRefusedError as err:
        print(f"{definition.name}: the manager refused the registration: {err}", file=sys.stderr)
        return 1
    except MirrorError as err:
        print(f"{definition.name}: {err}", file=sys.stderr)
        return 1
    return 0


async def _until_signalled(definition: ControllerDefinition[Any], args: argparse.Namespace) -> None:
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    assert task is not None
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await serve(definition, args)
