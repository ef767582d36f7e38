"""An asyncio HTTP/1.1 client of one API server: pooled keep-alive connections, no threads.

:meth:`steward.kube.KubeClient.arequest` sends through it. A request costs the event loop
about a fifth of the CPU of the same request through urllib3 on a thread (no thread hop,
no ``http.client`` header parsing): the controllers' hot path is mostly API writes.

# Behaviour
Connections are opened on demand (TLS with the client's CA, certificate and server name)
and kept alive for the next request, at most ``max_idle`` of them; a connection the
server closed, or that answered ``Connection: close``, is dropped. A request sent on a
reused connection that the server had closed meanwhile (end of stream before the first
byte of an answer: the request was never read) is sent once more on a new connection.
Answers may be sized by ``Content-Length`` or chunked.

``before_send`` is called just before the request's bytes are written, with the
connection ready (connected, TLS done) and nothing awaited in between: the write fence
(:attr:`steward.kube.KubeClient.write_fence`) is asked there, so a process paused while
connecting never sends a write it may no longer make.

# Errors
:class:`TransportError` (an :class:`OSError`) for a connection that cannot be opened, a
connection lost mid-answer, a malformed answer, or a timeout (``connect_timeout`` to
connect, ``timeout`` for the whole exchange); the connection is closed then. Whatever
``before_send`` raises is raised, with nothing sent.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit


class TransportError(OSError):
    """The request could not be sent or its answer could not be read (see module docs)."""


@dataclass(frozen=True, slots=True)
class Answer:
    """An API server's answer: status and body."""

    status: int
    body: bytes


class _Connection:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def usable(self) -> bool:
        return not self.writer.is_closing() and not self.reader.at_eof()

    def close(self) -> None:
        self.writer.close()

    def abort(self) -> None:
        """Close at once, without TLS's goodbye (the loop is about to end)."""
        self.writer.transport.abort()


class _Stale(Exception):
    """A reused connection ended before its answer began."""


class Transport:
    """Pooled HTTP/1.1 connections to ``base_url`` (``https://host:port`` or ``http://``)
    on the running event loop (connections of an earlier loop are dropped, not reused)."""

    def __init__(
        self,
        base_url: str,
        ssl_context: ssl.SSLContext | None,
        *,
        server_hostname: str | None = None,
        timeout: float = 10.0,
        connect_timeout: float = 5.0,
        max_idle: int = 16,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL of a server: {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = ssl_context if parts.scheme == "https" else None
        self._server_hostname = server_hostname if self._ssl is not None else None
        netloc = parts.netloc.rsplit("@", 1)[-1]
        self._host_header = f"Host: {netloc}\r\n".encode()
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_idle = max_idle
        self._pools: dict[asyncio.AbstractEventLoop, list[_Connection]] = {}
        """Idle connections by the event loop they belong to."""
        self._closers: dict[asyncio.AbstractEventLoop, AsyncGenerator[None, None]] = {}

    def close(self) -> None:
        """Close the idle connections (requests in flight finish on theirs), at once and
        from any thread: each is aborted on its own event loop. Those of a loop that has
        ended were closed with it (see :meth:`_pool`)."""
        pools, self._pools = self._pools, {}
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for loop, idle in pools.items():
            if loop.is_closed():
                continue
            for conn in idle:
                if loop is running:
                    conn.abort()
                else:
                    loop.call_soon_threadsafe(conn.abort)

    async def _connect(self) -> _Connection:
        try:
            async with asyncio.timeout(self.connect_timeout):
                reader, writer = await asyncio.open_connection(
                    self.host,
                    self.port,
                    ssl=self._ssl,
                    server_hostname=self._server_hostname,
                    limit=1 << 20,
                )
        except TimeoutError:
            raise TransportError(
                f"no connection to {self.host}:{self.port} within {self.connect_timeout:g}s"
            ) from None
        except (OSError, ssl.SSLError) as err:
            raise TransportError(f"cannot connect to {self.host}:{self.port}: {err}") from err
        return _Connection(reader, writer)

    async def _pool(self) -> list[_Connection]:
        """The running loop's idle connections. The first call in a loop starts an async
        generator there, which asyncio closes before it closes the loop
        (``shutdown_asyncgens``, as ``asyncio.run`` does): its ``finally`` closes the
        loop's connections while the loop can still run their close."""
        loop = asyncio.get_running_loop()
        idle = self._pools.get(loop)
        if idle is None:
            idle = self._pools[loop] = []
            closer = self._close_with_loop(loop, idle)
            self._closers[loop] = closer
            await closer.asend(None)
        return idle

    async def _close_with_loop(
        self, loop: asyncio.AbstractEventLoop, idle: list[_Connection]
    ) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            self._pools.pop(loop, None)
            self._closers.pop(loop, None)
            for conn in idle:
                conn.abort()
            idle.clear()
            await asyncio.sleep(0)  # the aborts close their sockets on the next turn

    def _idle(self) -> list[_Connection]:
        return self._pools.setdefault(asyncio.get_running_loop(), [])

    async def _take_idle(self) -> _Connection | None:
        idle = await self._pool()
        while idle:
            conn = idle.pop()
            if conn.usable():
                return conn
            conn.close()
        return None

    async def request(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes | None,
        *,
        before_send: Callable[[], None] | None = None,
    ) -> Answer:
        """Send one request and read its answer (see the module docs)."""
        head = bytearray(f"{method} {path} HTTP/1.1\r\n".encode())
        head += self._host_header
        for name, value in headers.items():
            head += f"{name}: {value}\r\n".encode()
        head += f"Content-Length: {len(body) if body else 0}\r\n\r\n".encode()
        if body:
            head += body
        message = bytes(head)
        try:
            async with asyncio.timeout(self.timeout):
                conn = await self._take_idle()
                if conn is not None:
                    try:
                        return await self._exchange(conn, message, before_send, reused=True)
                    except _Stale:
                        pass  # the server had closed it: never read, so send it anew
                conn = await self._connect()
                try:
                    return await self._exchange(conn, message, before_send, reused=False)
                except _Stale:
                    raise TransportError(
                        f"{self.host}:{self.port} closed the connection before answering"
                    ) from None
        except TimeoutError:
            raise TransportError(
                f"no answer from {self.host}:{self.port} within {self.timeout:g}s"
            ) from None

    async def _exchange(
        self,
        conn: _Connection,
        message: bytes,
        before_send: Callable[[], None] | None,
        *,
        reused: bool,
    ) -> Answer:
        if before_send is not None:
            try:
                before_send()  # nothing awaited between this and the write
            except BaseException:
                self._idle().append(conn)  # nothing was sent: the connection is as good
                raise
        ok = False
        try:
            conn.writer.write(message)
            try:
                raw = await conn.reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as err:
                if reused and not err.partial:
                    raise _Stale from None
                raise TransportError("the connection ended in the answer's headers") from None
            answer, keep = await self._read_answer(conn.reader, raw)
            ok = keep
            return answer
        except (ConnectionError, ssl.SSLError) as err:
            if reused and isinstance(err, ConnectionResetError):
                raise _Stale from None
            raise TransportError(f"connection to {self.host}:{self.port} lost: {err}") from err
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as err:
            raise TransportError(f"malformed answer from {self.host}:{self.port}: {err}") from err
        finally:
            idle = self._idle()
            if ok and len(idle) < self.max_idle:
                idle.append(conn)
            else:
                conn.close()

    @staticmethod
    async def _read_answer(reader: asyncio.StreamReader, raw: bytes) -> tuple[Answer, bool]:
        lines = raw.split(b"\r\n")
        version, status_text = lines[0].split(b" ", 2)[:2]
        status = int(status_text)
        length = -1
        chunked = False
        keep = version == b"HTTP/1.1"
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                continue
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                keep = value.strip().lower() != b"close"
        if chunked:
            parts = []
            while True:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.split(b";", 1)[0], 16)
                if size == 0:
                    while await reader.readuntil(b"\r\n") != b"\r\n":
                        pass  # trailers
                    break
                parts.append(await reader.readexactly(size))
                await reader.readexactly(2)
            body = b"".join(parts)
        elif length >= 0:
            body = await reader.readexactly(length) if length else b""
        elif status in (204, 304) or 100 <= status < 200:
            body = b""
        else:
            body = await reader.read()  # delimited by the end of the connection
            keep = False
        return Answer(status, body), keep


def ssl_context(
    ca_file: str | None, cert_file: str | None, key_file: str | None, *, verify: bool = True
) -> ssl.SSLContext:
    """A client TLS context: trust ``ca_file`` (else the system's), present the client
    certificate when given, verify the server unless ``verify`` is False."""
    ctx = ssl.create_default_context(cafile=ca_file)
    if cert_file:
        ctx.load_cert_chain(cert_file, key_file)
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx
