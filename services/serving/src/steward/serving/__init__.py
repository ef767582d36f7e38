"""What Steward's services (the informer and the manager) share and controllers do not.

- :mod:`steward.serving.host`: the process around a service: one gRPC server with the
  health service and reflection, bound with or without TLS, probes and metrics, the flags
  both services have, exit codes;
- :func:`serve_until_signalled`: serve until SIGTERM/SIGINT, then stop gracefully;
- :mod:`steward.serving.security`: serving TLS, caller identity, authorization (Guard);
- :mod:`steward.serving.tracing`: SERVER spans continuing the callers' traces;
- :mod:`steward.serving.reflection`: server reflection as grpc.reflection.v1 and v1alpha.

The health and metrics endpoints live in :mod:`steward.runtime.health`: controllers serve
them too."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable

__all__ = ["serve_until_signalled"]

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
