"""The Job controller's process: ``python -m steward.controllers.job.main``.

Connects to the informer (and, if given, the manager, so that only the active instance
reconciles) and writes to the API server with the credentials of ``--kubeconfig``.
Exits 0 on SIGINT/SIGTERM; a refused watch (see the mirror) ends it with an error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Sequence

from steward.controllers.job.controller import (
    MANAGED_BY,
    NAME,
    JobControllerOptions,
    build,
)
from steward.kube import KubeClient, load_access
from steward.runtime.controller import ControllerOptions
from steward.runtime.health import start_loop_health
from steward.runtime.session import SessionOptions
from steward.security import SecurityConfigError, add_client_arguments, client_from_args
from steward.telemetry import configure_tracing


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (see ``--help``)."""
    parser = argparse.ArgumentParser(
        prog="python -m steward.controllers.job.main",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster or $KUBECONFIG)")
    parser.add_argument("--informer", default="127.0.0.1:50061", help="informer host:port")
    parser.add_argument("--manager", default=None, help="manager host:port (default: none)")
    parser.add_argument("--workers", type=int, default=5, help="concurrent syncs (default 5)")
    parser.add_argument(
        "--managed-by",
        default=MANAGED_BY,
        help=f"manage Jobs whose spec.managedBy is this (default {MANAGED_BY})",
    )
    parser.add_argument(
        "--take-unmanaged",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also manage Jobs without spec.managedBy (default: yes; say --no-take-unmanaged "
        "when upstream's job controller runs too)",
    )
    parser.add_argument("--namespace", default="", help="watch only this namespace")
    parser.add_argument("--standby", action="store_true", help="stand by if another is active")
    add_client_arguments(parser)
    args = parser.parse_args(argv)
    try:
        args.security = client_from_args(args)
    except SecurityConfigError as err:
        parser.error(str(err))
    return args


async def run(args: argparse.Namespace) -> None:
    """Run the controller until cancelled."""
    start_loop_health()  # /healthz and /readyz on $STEWARD_HEALTH_LISTEN, when set
    api = KubeClient(load_access(args.kubeconfig), user_agent="steward-job-controller", workers=16)
    try:
        async with args.security.channel(args.informer) as channel:
            controller = build(
                channel,
                api,
                ControllerOptions(max_concurrent_reconciles=args.workers, namespace=args.namespace),
                JobControllerOptions(
                    managed_by=args.managed_by, take_unmanaged=args.take_unmanaged
                ),
            )
            controller.fence(api)  # no write unless holding the lease
            session = SessionOptions(controller=NAME, standby=args.standby, security=args.security)
            await controller.run(manager=args.manager, session=session if args.manager else None)
    finally:
        api.close()


async def _until_signalled(args: argparse.Namespace) -> None:
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    assert task is not None
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await run(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse, run until SIGINT/SIGTERM, return the exit status."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    configure_tracing("steward-controller-job")
    asyncio.run(_until_signalled(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
