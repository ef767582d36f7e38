"""SERVER spans of the gRPC calls Steward's services answer, continuing the caller's trace.

A server built with :class:`ServerTracing` among its interceptors starts a SERVER span
for each call, continuing the trace whose context the caller sent in the call's metadata
(a channel of :mod:`steward.grpc_tracing` sends it). The span follows OpenTelemetry's
semantic conventions for RPC, like the client's (see :mod:`steward.grpc_tracing`), with
the server's address and port and the peer's address and port.

# Status
A server span ends with status ERROR for the codes that mean the server failed (UNKNOWN,
DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS); a caller's mistake
(NOT_FOUND, INVALID_ARGUMENT, CANCELLED, …) leaves it unset, as the conventions say, so
that a client stopping its Watch does not paint the informer red. An exception escaping a
handler is recorded on the server span as an UNKNOWN status.

# Streams
A streaming call has one span, from the call to its end however it ends; a response
stream passes through one generator that hands each message on as it is. The span is
not made current for the handler: whatever it starts (a reflector, a lease renewal)
belongs to the trace of its own cause, not to the stream's.

A client cancelling a request stream ends it for the handler as if the client had
half-closed: gRPC Python hands the handler the end of the requests, and tells the server
of the cancel separately, sometimes only after the handler has returned. So when a
handler returns normally after its requests ended, the span waits up to
:data:`CANCEL_GRACE` seconds for that word before it ends OK; a cancel ends it CANCELLED.
Only a client that half-closes pays the wait, once, as its call ends.

# Without tracing
While no OpenTelemetry SDK is installed as the tracer provider, :class:`ServerTracing`
hands each handler back unchanged. The health and reflection services are never traced.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
import grpc.aio
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind

from steward.grpc_tracing import end_span, host_port, method_attributes, tracing_enabled

__all__ = ["CANCEL_GRACE", "UNTRACED_SERVICES", "ServerTracing"]

_TRequest = TypeVar("_TRequest")
_TResponse = TypeVar("_TResponse")

_tracer = trace.get_tracer("steward.grpc")

UNTRACED_SERVICES: tuple[str, ...] = (
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)
"""Method prefixes of the calls that get no span: health checks and server reflection."""

CANCEL_GRACE = 0.2
"""Seconds a request stream's span waits, after its handler returned on the end of the
requests, for gRPC's word that the client cancelled (see "Streams" above)."""

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
        name, attributes = method_attributes(method)
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
            wrapped_stream = _stream_behavior(behavior, start, handler.request_streaming)
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
        wrapped = _unary_behavior(behavior, start, handler.request_streaming)
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
    host, port = host_port(address)
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
    end_span(span, code, details if isinstance(details, str) else None, code in _SERVER_FAULTS)


class _Requests:
    """A request stream passed through as it is, noting whether it reached its end."""

    def __init__(self, requests: Any) -> None:
        self._requests = requests
        self.ended = False

    def __aiter__(self) -> _Requests:
        return self

    async def __anext__(self) -> Any:
        try:
            return await anext(self._requests)
        except StopAsyncIteration:
            self.ended = True
            raise


async def _cancel_after_end(requests: Any) -> None:
    """Give gRPC's cancel a moment to arrive when the handler returned on the end of its
    requests; a cancel raises :class:`asyncio.CancelledError` here."""
    if isinstance(requests, _Requests) and requests.ended:
        await asyncio.sleep(CANCEL_GRACE)


def _unary_behavior(
    behavior: Any, start: Callable[[_Context], Span], request_streaming: bool
) -> Callable[[Any, _Context], Awaitable[Any]]:
    async def traced(request: Any, context: _Context) -> Any:
        span = start(context)
        if request_streaming:
            request = _Requests(request)
        try:
            response = await behavior(request, context)
            await _cancel_after_end(request)
        except BaseException as err:
            _end_server(span, context, err)
            raise
        _end_server(span, context, None)
        return response

    return traced


def _stream_behavior(
    behavior: Any, start: Callable[[_Context], Span], request_streaming: bool
) -> Callable[[Any, _Context], AsyncIterator[Any]]:
    async def traced(request: Any, context: _Context) -> AsyncIterator[Any]:
        span = start(context)
        if request_streaming:
            request = _Requests(request)
        try:
            async for response in behavior(request, context):
                yield response
            await _cancel_after_end(request)
        except BaseException as err:
            _end_server(span, context, err)
            raise
        _end_server(span, context, None)

    return traced
