"""The asyncio HTTP/1.1 client (:mod:`steward.transport`): framing, keep-alive, a
connection the server closed, the send hook, timeouts; and the same client in
:class:`steward.kube.KubeClient` against the real API server.

The framing cases need answers the API server rarely gives on demand (a chunked body
with trailers, ``Connection: close``, an idle connection closed under the client), so a
small asyncio server on loopback gives them; everything it answers is plain HTTP/1.1.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import pytest

from steward.cluster import LocalCluster
from steward.kube import ApiUnavailableError, FencedError, KubeClient, NotFoundError, load_access
from steward.transport import Transport, TransportError

Handler = Callable[[bytes, asyncio.StreamWriter], Awaitable[bool]]
"""Answers one request (its head and body); returns whether to keep the connection."""


class Server:
    """A loopback HTTP/1.1 server whose answers a test scripts."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length) if length else b""
                self.requests.append(head + body)
                keep = await self.handler(head + body, writer)
                await writer.drain()
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _ok(request: bytes, writer: asyncio.StreamWriter) -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    return True


pytestmark = [pytest.mark.unit, pytest.mark.asyncio]


async def test_keep_alive_reuses_one_connection() -> None:
    async with Server(_ok) as server:
        t = Transport(server.url, None)
        answers = [await t.request("GET", f"/x/{i}", {}, None) for i in range(5)]
        assert [(a.status, a.body) for a in answers] == [(200, b"ok")] * 5
        assert server.connections == 1
        t.close()


async def test_a_chunked_answer_with_trailers_is_joined() -> None:
    async def chunked(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n1;ext=1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: 1\r\n\r\n"
        )
        return True

    async with Server(chunked) as server:
        t = Transport(server.url, None)
        for _ in range(2):  # the framing leaves the connection at the next answer
            answer = await t.request("GET", "/", {}, None)
            assert answer.body == b"hello world"
        assert server.connections == 1
        t.close()


async def test_connection_close_is_honoured() -> None:
    async def closing(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n!")
        return False

    async with Server(closing) as server:
        t = Transport(server.url, None)
        for _ in range(3):
            assert (await t.request("POST", "/", {}, b"{}")).body == b"!"
        assert server.connections == 3
        t.close()


async def test_a_request_on_a_connection_the_server_closed_is_sent_once_more() -> None:
    """The server drops the idle connection after each answer without saying so: the
    next request meets an ended stream before any answer and goes out on a new one."""
    async with Server(lambda r, w: _ok_then_drop(r, w)) as server:
        t = Transport(server.url, None)
        for i in range(3):
            assert (await t.request("POST", f"/{i}", {}, b"{}")).status == 200
            await asyncio.sleep(0.05)  # the server's close reaches the client
        # Each request was received exactly once: nothing was sent twice.
        assert [r.split(b" ", 2)[1] for r in server.requests] == [b"/0", b"/1", b"/2"]
        assert server.connections == 3
        t.close()


async def _ok_then_drop(request: bytes, writer: asyncio.StreamWriter) -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    return False  # closed without Connection: close


async def test_an_answer_cut_short_is_an_error_not_a_retry() -> None:
    async def cut(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        return False

    async with Server(cut) as server:
        t = Transport(server.url, None)
        with pytest.raises(TransportError, match="malformed answer"):
            await t.request("POST", "/", {}, b"{}")
        assert len(server.requests) == 1


async def test_before_send_runs_with_the_connection_ready_and_can_stop_the_write() -> None:
    async with Server(_ok) as server:
        t = Transport(server.url, None)
        await t.request("GET", "/warm", {}, None)
        asked: list[int] = []

        def refuse() -> None:
            asked.append(server.connections)
            raise PermissionError("no lease")

        with pytest.raises(PermissionError):
            await t.request("POST", "/write", {}, b"{}", before_send=refuse)
        assert asked == [1]  # asked on the ready connection
        assert all(b"/write" not in r for r in server.requests)  # nothing sent
        await t.request("GET", "/again", {}, None)
        assert server.connections == 1  # the refused write did not spoil the connection
        t.close()


async def test_no_answer_in_time_is_a_timeout() -> None:
    async def silent(request: bytes, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(5)
        return False

    async with Server(silent) as server:
        t = Transport(server.url, None, timeout=0.3)
        with pytest.raises(TransportError, match=r"no answer from .* within 0\.3s"):
            await t.request("GET", "/", {}, None)


async def test_a_refused_connection_is_a_transport_error() -> None:
    async with Server(_ok) as server:
        url = server.url
    t = Transport(url, None)
    with pytest.raises(TransportError, match="cannot connect"):
        await t.request("GET", "/", {}, None)


@pytest.mark.integration
@pytest.mark.asyncio
async def test_the_kube_client_on_the_event_loop_against_the_api_server(
    cluster: LocalCluster, namespace: str
) -> None:
    api = KubeClient(load_access(str(cluster.kubeconfig)))
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    name = f"t-{uuid.uuid4().hex[:6]}"
    try:
        made = await api.arequest("POST", path, {"metadata": {"name": name}, "data": {"a": "1"}})
        assert made["metadata"]["name"] == name
        got = await asyncio.gather(*[api.arequest("GET", f"{path}/{name}") for _ in range(20)])
        assert {g["metadata"]["uid"] for g in got} == {made["metadata"]["uid"]}
        listing = await api.arequest("GET", path)  # larger answers may come chunked
        assert name in {i["metadata"]["name"] for i in listing["items"]}
        with pytest.raises(NotFoundError):
            await api.arequest("GET", f"{path}/missing-{name}")
        api.write_fence = lambda: False
        with pytest.raises(FencedError):
            await api.arequest("DELETE", f"{path}/{name}")
        api.write_fence = None
        await api.arequest("DELETE", f"{path}/{name}")
    finally:
        api.close()
    closed = KubeClient(load_access(str(cluster.kubeconfig)))
    closed.access = type(closed.access)(host="https://127.0.0.1:1", ca_file=closed.access.ca_file)
    with pytest.raises(ApiUnavailableError, match="cannot reach the API server"):
        await closed.arequest("GET", "/api")
