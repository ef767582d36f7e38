"""What every Steward service process shares: serving until SIGTERM/SIGINT, then stopping.

The health and metrics endpoints live in :mod:`steward.runtime.health` (controllers serve
them too) and are re-exported here."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from collections.abc import Awaitable, Callable

from steward.runtime.health import (
    HEALTH_LISTEN_ENV,
    LoopHealth,
    split_address,
    start_loop_health,
    start_metrics_server,
    stop_metrics_server,
)

__all__ = [
    "HEALTH_LISTEN_ENV",
    "LoopHealth",
    "free_port",
    "serve_until_signalled",
    "split_address",
    "start_loop_health",
    "start_metrics_server",
    "stop_metrics_server",
]

log = logging.getLogger(__name__)


async def serve_until_signalled(
    start: Callable[[], Awaitable[object]], stop: Callable[[], Awaitable[None]]
) -> None:
    """Run ``start``, wait for SIGTERM or SIGINT (or cancellation), then run ``stop``.

    ``stop`` runs whatever ends the wait, so a service always shuts down gracefully
    (health NOT_SERVING, streams ended, server stopped) the same way.
    """
    await start()
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    try:
        await stopping.wait()
        log.info("shutting down")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await stop()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for tests and benchmarks)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
