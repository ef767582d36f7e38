"""Trace spans of the gRPC calls between Steward's services, with W3C context propagation.

A call made on a channel from :func:`insecure_channel` is a CLIENT span whose context
travels in the call's metadata (``traceparent``, ``tracestate``, ``baggage``: the
propagators configured for OpenTelemetry); a server built with :class:`ServerTracing`
among its interceptors starts a SERVER span continuing it. Both follow OpenTelemetry's
semantic conventions for RPC: the span is named ``steward.v1.InformerService/Get``, with
``rpc.system`` = ``grpc``, ``rpc.service``, ``rpc.method``, ``rpc.grpc.status_code``, the
server's address and port, and, on the server, the peer's address and port.

# Status
A client span ends with status ERROR (and the call's status message) for every code but
OK. A server span does so for the codes that mean the server failed (UNKNOWN,
DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS); a caller's mistake
(NOT_FOUND, INVALID_ARGUMENT, CANCELLED, …) leaves it unset, as the conventions say, so
that a client stopping its Watch does not paint the informer red. An exception escaping a
handler is recorded on the server span as an UNKNOWN status.

# Streams
A streaming call has one span, from the call to its end however it ends (the client
cancelling, the server finishing or aborting, the connection failing). Nothing is
recorded per message; on the client the span is ended by the call's done callback, so
the messages are not touched at all, and on the server a response stream passes through
one generator that hands each message on as it is.

Neither span is made current for code running because of the call: a Watch or Session
lasts as long as the process, and whatever a handler starts (a reflector, a lease
renewal) or a client derives from a stream's messages (events, reconciles) belongs to the
trace of its own cause, not to the stream's.

# Without tracing
When no OpenTelemetry SDK is installed as the tracer provider, :func:`insecure_channel`
adds no interceptor and :class:`ServerTracing` hands each handler back unchanged, so
calls cost what they cost untraced. Configure tracing
(:func:`steward.telemetry.configure_tracing`) before creating channels. The health and
reflection services are never traced.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

import grpc
import grpc.aio
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from steward.serving import split_address

_TRequest = TypeVar("_TRequest")
_TResponse = TypeVar("_TResponse")

_tracer = trace.get_tracer("steward.grpc")

UNTRACED_SERVICES: tuple[str, ...] = (
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)
"""Method prefixes of the calls that get no span: health checks and server reflection."""

_SERVER_FAULTS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)


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
def _method_attributes(full_method: str) -> tuple[str, dict[str, Any]]:
    """The span name and RPC attributes of ``/package.Service/Method``."""
    name = full_method.lstrip("/")
    service, _, method = name.rpartition("/")
    return name, {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method}


def _end(span: Span, code: grpc.StatusCode, details: str | None, error: bool) -> None:
    span.set_attribute("rpc.grpc.status_code", code.value[0])
    if error:
        span.set_status(Status(StatusCode.ERROR, details or code.name))
    span.end()


def _host_port(address: str) -> tuple[str, int | None]:
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
        host, port = _host_port(address)
        self.attributes: dict[str, Any] = {"server.address": host}
        if port is not None:
            self.attributes["server.port"] = port
        self.finishing: set[asyncio.Task[None]] = set()

    def start(self, details: grpc.aio.ClientCallDetails) -> tuple[Span, grpc.aio.ClientCallDetails]:
        """Start the call's span and return it with the details carrying its context."""
        method = details.method
        if isinstance(method, bytes):  # grpc.aio passes bytes here, whatever its type says
            method = method.decode()
        name, attributes = _method_attributes(method)
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
        _end(span, code, details, code != grpc.StatusCode.OK)

    @staticmethod
    def failed(span: Span, err: BaseException) -> None:
        """End ``span`` for a call that could not even be started."""
        if isinstance(err, grpc.aio.AioRpcError):
            _end(span, err.code(), err.details(), True)
            return
        if isinstance(err, asyncio.CancelledError):
            _end(span, grpc.StatusCode.CANCELLED, "cancelled before it started", True)
            return
        span.record_exception(err)
        _end(span, grpc.StatusCode.UNKNOWN, f"{type(err).__name__}: {err}", True)


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


# Server -----------------------------------------------------------------------------------
_Context = grpc.aio.ServicerContext[Any, Any]


class ServerTracing(grpc.aio.ServerInterceptor):
    """Server interceptor: one SERVER span per call, continuing the caller's trace.

    Set :attr:`address` to the ``(host, port)`` the server listens on once it is bound, for
    the ``server.*`` attributes. Calls of :data:`UNTRACED_SERVICES`, and every call while
    no SDK is configured, pass through untouched.
    """

    def __init__(self) -> None:
        self.address: tuple[str, int] | None = None

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails],
            Awaitable[grpc.RpcMethodHandler[_TRequest, _TResponse] | None],
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[_TRequest, _TResponse] | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(UNTRACED_SERVICES) or not tracing_enabled():
            return handler
        return self._traced(handler, method, handler_call_details.invocation_metadata)

    def _traced(
        self, handler: grpc.RpcMethodHandler[Any, Any], method: str, metadata: Any
    ) -> grpc.RpcMethodHandler[Any, Any]:
        name, attributes = _method_attributes(method)
        if self.address is not None:
            attributes["server.address"], attributes["server.port"] = self.address

        def start(context: _Context) -> Span:
            carrier = {k: v for k, v in (metadata or ()) if isinstance(v, str)}
            span = _tracer.start_span(
                name,
                context=propagate.extract(carrier),
                kind=SpanKind.SERVER,
                attributes=attributes,
            )
            if span.is_recording():
                span.set_attributes(_peer_attributes(context.peer()))
            return span

        if handler.response_streaming:
            behavior = handler.unary_stream or handler.stream_stream
            if not inspect.isasyncgenfunction(behavior):
                return handler  # the reader/writer form: no Steward service uses it
            wrapped_stream = _stream_behavior(behavior, start)
            if handler.request_streaming:
                return grpc.stream_stream_rpc_method_handler(
                    wrapped_stream, handler.request_deserializer, handler.response_serializer
                )
            return grpc.unary_stream_rpc_method_handler(
                wrapped_stream, handler.request_deserializer, handler.response_serializer
            )
        behavior = handler.unary_unary or handler.stream_unary
        if not inspect.iscoroutinefunction(behavior):
            return handler
        wrapped = _unary_behavior(behavior, start)
        if handler.request_streaming:
            return grpc.stream_unary_rpc_method_handler(
                wrapped, handler.request_deserializer, handler.response_serializer
            )
        return grpc.unary_unary_rpc_method_handler(
            wrapped, handler.request_deserializer, handler.response_serializer
        )


def _peer_attributes(peer: str) -> dict[str, Any]:
    """``network.peer.*`` from gRPC's peer string (``ipv4:127.0.0.1:5000``, ``ipv6:[::1]:5000``)."""
    kind, _, address = peer.partition(":")
    if kind not in ("ipv4", "ipv6") or not address:
        return {}
    host, port = _host_port(address)
    attributes: dict[str, Any] = {"network.peer.address": host.strip("[]")}
    if port is not None:
        attributes["network.peer.port"] = port
    return attributes


def _end_server(span: Span, context: _Context, err: BaseException | None) -> None:
    code = context.code()
    details = context.details()
    if code is None or code == grpc.StatusCode.OK:
        cancelled = getattr(context, "cancelled", None)
        if err is None and callable(cancelled) and cancelled():
            # The client went away; a handler that then returns normally did not succeed.
            code, details = grpc.StatusCode.CANCELLED, "cancelled by the client"
        elif err is None:
            code = grpc.StatusCode.OK
        elif isinstance(err, (asyncio.CancelledError, GeneratorExit)):
            code, details = grpc.StatusCode.CANCELLED, "the call ended before the handler"
        else:
            span.record_exception(err)
            code, details = grpc.StatusCode.UNKNOWN, f"{type(err).__name__}: {err}"
    _end(span, code, details if isinstance(details, str) else None, code in _SERVER_FAULTS)


def _unary_behavior(
    behavior: Any, start: Callable[[_Context], Span]
) -> Callable[[Any, _Context], Awaitable[Any]]:
    async def traced(request: Any, context: _Context) -> Any:
        span = start(context)
        try:
            response = await behavior(request, context)
        except BaseException as err:
            _end_server(span, context, err)
            raise
        _end_server(span, context, None)
        return response

    return traced


def _stream_behavior(
    behavior: Any, start: Callable[[_Context], Span]
) -> Callable[[Any, _Context], AsyncIterator[Any]]:
    async def traced(request: Any, context: _Context) -> AsyncIterator[Any]:
        span = start(context)
        try:
            async for response in behavior(request, context):
                yield response
        except BaseException as err:
            _end_server(span, context, err)
            raise
        _end_server(span, context, None)

    return traced
