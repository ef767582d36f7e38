"""Trace spans of the gRPC calls a Steward client makes, with W3C context propagation.

A call made on a channel from :func:`insecure_channel` or :func:`channel` is a CLIENT
span whose context travels in the call's metadata (``traceparent``, ``tracestate``,
``baggage``: the propagators configured for OpenTelemetry); a server built with
:class:`steward.serving.tracing.ServerTracing` among its interceptors starts a SERVER span
continuing it. Both follow OpenTelemetry's semantic conventions for RPC: the span is named
``steward.v1.InformerService/Get``, with ``rpc.system`` = ``grpc``, ``rpc.service``,
``rpc.method``, ``rpc.grpc.status_code`` and the server's address and port.

# Status
A client span ends with status ERROR (and the call's status message) for every code but
OK.

# Streams
A streaming call has one span, from the call to its end however it ends (the client
cancelling, the server finishing or aborting, the connection failing). Nothing is
recorded per message: the span is ended by the call's done callback, so the messages are
not touched at all.

The span is not made current for code running because of the call: a Watch or Session
lasts as long as the process, and whatever a client derives from a stream's messages
(events, reconciles) belongs to the trace of its own cause, not to the stream's.

# Without tracing
When no OpenTelemetry SDK is installed as the tracer provider, :func:`insecure_channel`
adds no interceptor, so calls cost what they cost untraced. Configure tracing
(:func:`steward.telemetry.configure_tracing`) before creating channels.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

import grpc
import grpc.aio
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from steward.runtime.health import split_address

_TRequest = TypeVar("_TRequest")
_TResponse = TypeVar("_TResponse")

_tracer = trace.get_tracer("steward.grpc")


def tracing_enabled() -> bool:
    """Whether an OpenTelemetry SDK (anything but the API's no-op) provides the tracers."""
    provider = trace.get_tracer_provider()
    return not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


def insecure_channel(
    target: str, options: Sequence[tuple[str, Any]] | None = None
) -> grpc.aio.Channel:
    """A ``grpc.aio`` channel to ``target`` whose calls are traced (see the module docs).

    Use it for every channel to a Steward service. Without a configured SDK it is exactly
    ``grpc.aio.insecure_channel(target, options)``.
    """
    if not tracing_enabled():
        return grpc.aio.insecure_channel(target, options)
    return grpc.aio.insecure_channel(target, options, interceptors=client_interceptors(target))


def channel(
    target: str,
    credentials: grpc.ChannelCredentials | None,
    options: Sequence[tuple[str, Any]] | None = None,
) -> grpc.aio.Channel:
    """Like :func:`insecure_channel`, over TLS when ``credentials`` is not None (see
    :class:`steward.security.ClientSecurity`, which makes them)."""
    if credentials is None:
        return insecure_channel(target, options)
    interceptors = client_interceptors(target) if tracing_enabled() else None
    return grpc.aio.secure_channel(target, credentials, options, interceptors=interceptors)


def client_interceptors(target: str) -> list[grpc.aio.ClientInterceptor]:
    """The four client interceptors (one per call shape) for a channel to ``target``,
    for channels made otherwise than by :func:`insecure_channel`."""
    peer = _ClientPeer(target)
    return [
        _UnaryUnaryTracing(peer),
        _UnaryStreamTracing(peer),
        _StreamUnaryTracing(peer),
        _StreamStreamTracing(peer),
    ]


# Common -----------------------------------------------------------------------------------
def method_attributes(full_method: str) -> tuple[str, dict[str, Any]]:
    """The span name and RPC attributes of ``/package.Service/Method`` (both sides)."""
    name = full_method.lstrip("/")
    service, _, method = name.rpartition("/")
    return name, {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method}


def end_span(span: Span, code: grpc.StatusCode, details: str | None, error: bool) -> None:
    """Record the call's status code on ``span``, ERROR when ``error``, and end it."""
    span.set_attribute("rpc.grpc.status_code", code.value[0])
    if error:
        span.set_status(Status(StatusCode.ERROR, details or code.name))
    span.end()


def host_port(address: str) -> tuple[str, int | None]:
    """``host:port`` split; the whole address and None when it has no port."""
    try:
        host, port = split_address(address)
    except ValueError:
        return address, None
    return host, port


# Client -----------------------------------------------------------------------------------
class _ClientPeer:
    """The server a channel calls: its span attributes, and the tasks ending calls' spans."""

    def __init__(self, target: str) -> None:
        scheme, sep, rest = target.partition(":///")
        address = rest if sep and scheme in ("dns", "ipv4", "ipv6") else target
        host, port = host_port(address)
        self.attributes: dict[str, Any] = {"server.address": host}
        if port is not None:
            self.attributes["server.port"] = port
        self.finishing: set[asyncio.Task[None]] = set()

    def start(self, details: grpc.aio.ClientCallDetails) -> tuple[Span, grpc.aio.ClientCallDetails]:
        """Start the call's span and return it with the details carrying its context."""
        method = details.method
        if isinstance(method, bytes):  # grpc.aio passes bytes here, whatever its type says
            method = method.decode()
        name, attributes = method_attributes(method)
        span = _tracer.start_span(name, kind=SpanKind.CLIENT)
        if span.is_recording():
            span.set_attributes(attributes)
            span.set_attributes(self.attributes)
        metadata = grpc.aio.Metadata(*tuple(details.metadata or ()))
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        for key, value in carrier.items():
            metadata[key] = value
        traced = grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )
        return span, traced

    def end_when_done(self, span: Span, call: grpc.aio.Call) -> None:
        """End ``span`` with the call's status once it is done (no per-message work)."""

        def done(_: object) -> None:
            task = asyncio.get_running_loop().create_task(self._finish(span, call))
            self.finishing.add(task)
            task.add_done_callback(self.finishing.discard)

        call.add_done_callback(done)

    @staticmethod
    async def _finish(span: Span, call: grpc.aio.Call) -> None:
        code = await call.code()
        details = await call.details()
        end_span(span, code, details, code != grpc.StatusCode.OK)

    @staticmethod
    def failed(span: Span, err: BaseException) -> None:
        """End ``span`` for a call that could not even be started."""
        if isinstance(err, grpc.aio.AioRpcError):
            end_span(span, err.code(), err.details(), True)
            return
        if isinstance(err, asyncio.CancelledError):
            end_span(span, grpc.StatusCode.CANCELLED, "cancelled before it started", True)
            return
        span.record_exception(err)
        end_span(span, grpc.StatusCode.UNKNOWN, f"{type(err).__name__}: {err}", True)


class _UnaryUnaryTracing(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, peer: _ClientPeer) -> None:
        self._peer = peer

    async def intercept_unary_unary(
        self,
        continuation: Callable[
            [grpc.aio.ClientCallDetails, _TRequest],
            Awaitable[grpc.aio.UnaryUnaryCall[_TRequest, _TResponse]],
        ],
        client_call_details: grpc.aio.ClientCallDetails,
        request: _TRequest,
    ) -> _TResponse | grpc.aio.UnaryUnaryCall[_TRequest, _TResponse]:
        span, details = self._peer.start(client_call_details)
        try:
            call = await continuation(details, request)
        except BaseException as err:
            self._peer.failed(span, err)
            raise
        self._peer.end_when_done(span, call)
        return call


class _UnaryStreamTracing(grpc.aio.UnaryStreamClientInterceptor):
    def __init__(self, peer: _ClientPeer) -> None:
        self._peer = peer

    async def intercept_unary_stream(
        self,
        continuation: Callable[
            [grpc.aio.ClientCallDetails, _TRequest],
            Awaitable[grpc.aio.UnaryStreamCall[_TRequest, _TResponse]],
        ],
        client_call_details: grpc.aio.ClientCallDetails,
        request: _TRequest,
    ) -> AsyncIterator[_TResponse] | grpc.aio.UnaryStreamCall[_TRequest, _TResponse]:
        span, details = self._peer.start(client_call_details)
        try:
            call = await continuation(details, request)
        except BaseException as err:
            self._peer.failed(span, err)
            raise
        self._peer.end_when_done(span, call)
        return call


class _StreamUnaryTracing(grpc.aio.StreamUnaryClientInterceptor):
    def __init__(self, peer: _ClientPeer) -> None:
        self._peer = peer

    async def intercept_stream_unary(
        self,
        continuation: Callable[
            [grpc.aio.ClientCallDetails, AsyncIterable[_TRequest] | Iterable[_TRequest]],
            Awaitable[grpc.aio.StreamUnaryCall[_TRequest, _TResponse]],
        ],
        client_call_details: grpc.aio.ClientCallDetails,
        request_iterator: AsyncIterable[_TRequest] | Iterable[_TRequest],
    ) -> _TResponse | grpc.aio.StreamUnaryCall[_TRequest, _TResponse]:
        span, details = self._peer.start(client_call_details)
        try:
            call = await continuation(details, request_iterator)
        except BaseException as err:
            self._peer.failed(span, err)
            raise
        self._peer.end_when_done(span, call)
        return call


class _StreamStreamTracing(grpc.aio.StreamStreamClientInterceptor):
    def __init__(self, peer: _ClientPeer) -> None:
        self._peer = peer

    async def intercept_stream_stream(
        self,
        continuation: Callable[
            [grpc.aio.ClientCallDetails, AsyncIterable[_TRequest] | Iterable[_TRequest]],
            Awaitable[grpc.aio.StreamStreamCall[_TRequest, _TResponse]],
        ],
        client_call_details: grpc.aio.ClientCallDetails,
        request_iterator: AsyncIterable[_TRequest] | Iterable[_TRequest],
    ) -> AsyncIterator[_TResponse] | grpc.aio.StreamStreamCall[_TRequest, _TResponse]:
        span, details = self._peer.start(client_call_details)
        try:
            call = await continuation(details, request_iterator)
        except BaseException as err:
            self._peer.failed(span, err)
            raise
        self._peer.end_when_done(span, call)
        return call
