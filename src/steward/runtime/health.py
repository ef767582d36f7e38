"""Health and metrics endpoints of a controller process: ``/healthz`` and ``/readyz`` over
HTTP for a process whose work runs on one event loop, and Prometheus metrics over HTTP."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

log = logging.getLogger(__name__)


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


HEALTH_LISTEN_ENV = "STEWARD_HEALTH_LISTEN"
"""The variable :func:`start_loop_health` reads its address from (e.g. ``0.0.0.0:8081``)."""


class LoopHealth:
    """``GET /healthz`` and ``/readyz`` over HTTP for a process whose work runs on one
    asyncio event loop (a controller: it serves no gRPC health service of its own).

    The loop stamps a heartbeat every ``interval`` seconds; both paths answer 200 ``ok``
    while the last stamp is younger than ``stale_after`` seconds, else 503 naming how long
    the loop has been stalled (blocked by a synchronous call, deadlocked, or stopped), so
    a kubelet probe restarts a process that is alive but no longer working. The HTTP
    server runs on its own daemon thread, so it answers however busy the loop is. Any
    other path is 404.
    """

    def __init__(
        self,
        address: str,
        *,
        stale_after: float = 10.0,
        interval: float = 1.0,
        unready: Callable[[], str | None] | None = None,
    ) -> None:
        self.stale_after = stale_after
        self.unready = unready
        """Why the process is not ready (``/readyz`` answers 503 with it), or None; called
        on the HTTP thread, so it must only read state."""
        self.interval = interval
        self._beat = time.monotonic()
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        health = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path not in ("/healthz", "/readyz", "/livez"):
                    code, body = 404, "not found\n"
                else:
                    code, body = health.check(ready=path == "/readyz")
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                return  # probes every few seconds; not worth a log line each

        host, port = split_address(address)
        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="health", daemon=True
        )
        self._thread.start()
        self._stamp()
        log.info("health on http://%s:%d/healthz", host, self.port)

    def _stamp(self) -> None:
        self._beat = time.monotonic()
        self._timer = self._loop.call_later(self.interval, self._stamp)

    def check(self, ready: bool = False) -> tuple[int, str]:
        """(HTTP status, body) of a probe right now; with ``ready``, also :attr:`unready`."""
        stalled = time.monotonic() - self._beat
        if stalled >= self.stale_after:
            return 503, f"event loop stalled for {stalled:.1f}s\n"
        if ready and self.unready is not None:
            why = self.unready()
            if why is not None:
                return 503, f"not ready: {why}\n"
        return 200, "ok\n"

    def stop(self) -> None:
        """Stop the heartbeat and the HTTP server (call from the loop's thread)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._server.shutdown()
        self._server.server_close()


def start_loop_health(
    address: str | None = None,
    *,
    stale_after: float = 10.0,
    unready: Callable[[], str | None] | None = None,
) -> LoopHealth | None:
    """Serve :class:`LoopHealth` on ``address`` (default ``$STEWARD_HEALTH_LISTEN``); None,
    and nothing served, when neither is set. Call it from the running event loop whose
    liveness it reports; it serves until the process ends or :meth:`LoopHealth.stop`.

    Raises:
        ValueError: the address is not host:port.
        OSError: it cannot be bound.
    """
    if address is None:
        address = os.environ.get(HEALTH_LISTEN_ENV, "")
    if not address:
        return None
    return LoopHealth(address, stale_after=stale_after, unready=unready)
