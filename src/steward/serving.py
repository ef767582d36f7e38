"""What every Steward service process shares: serve until SIGTERM/SIGINT, then stop."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable

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
