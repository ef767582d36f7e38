"""What every Steward service process shares: addresses, the metrics endpoint, and serving
until SIGTERM/SIGINT, then stopping."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from collections.abc import Awaitable, Callable
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

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


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` → (host, port); an empty host means 127.0.0.1.

    Raises:
        ValueError: not of the form host:port, with a numeric port.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"invalid address {address!r}: expected host:port")
    return host.strip("[]") or "127.0.0.1", int(port)


def start_metrics_server(address: str, registry: CollectorRegistry) -> WSGIServer:
    """Serve ``registry`` as Prometheus metrics over HTTP on ``address`` (port 0: a free
    one, see ``server_port``). Stop it with :func:`stop_metrics_server`."""
    host, port = split_address(address)
    server, _ = start_http_server(port, host, registry)
    return server


def stop_metrics_server(server: WSGIServer | None) -> None:
    """Stop a server of :func:`start_metrics_server` (None: nothing to stop)."""
    if server is not None:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for tests and benchmarks)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
