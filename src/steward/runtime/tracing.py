"""Trace spans of the runtime: one span per reconcile, linked to the events that caused it.

The reconcile span's parent is the context of the first event coalesced into the key
(started by the informer when it received the event); every other coalesced event's
context becomes a link, so one reconcile caused by several events shows all of them.
While the span is current, :func:`outgoing_headers` gives the ``traceparent`` to send
with API writes (``steward.kube.KubeClient`` adds it to each request on its own).

Without a configured OpenTelemetry SDK every call here is a cheap no-op; malformed
incoming contexts are ignored (the span then starts a trace of its own).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from steward.runtime.workqueue import TraceContext

_tracer = trace.get_tracer("steward.runtime")
_coalesced: ContextVar[tuple[TraceContext, ...]] = ContextVar("steward_coalesced", default=())


def coalesced_contexts() -> tuple[TraceContext, ...]:
    """The W3C trace contexts of the events coalesced into the reconcile that is running
    (the first is its span's parent, the others its links; empty outside a reconcile, or
    when no event carried one). A reconciler rarely needs them: its span and every
    request it sends already continue these traces."""
    return _coalesced.get()


_propagator = TraceContextTextMapPropagator()


def _extract(ctx: TraceContext) -> otel_context.Context | None:
    extracted = _propagator.extract(ctx.to_carrier())
    if not trace.get_current_span(extracted).get_span_context().is_valid:
        return None
    return extracted


@contextmanager
def reconcile_span(
    controller: str,
    key: str,
    contexts: Sequence[TraceContext],
    attempt: int,
    *,
    queued_at_ns: int = 0,
    dequeued_at_ns: int = 0,
) -> Iterator[trace.Span]:
    """Run the body inside the reconcile span of ``key`` (see the module docs).

    With the queue's times, the span gets the events ``enqueued`` (when the key became
    ready in the work queue) and ``dequeued`` (when a worker took it), and the attribute
    ``steward.queue_wait_seconds``, so the time a key waited for a worker shows in the trace.
    Exceptions are recorded on the span and set its status to error, then re-raised.
    """
    parents = [c for c in (_extract(ctx) for ctx in contexts) if c is not None]
    parent = parents[0] if parents else None
    links = [trace.Link(trace.get_current_span(c).get_span_context()) for c in parents[1:]]
    with _tracer.start_as_current_span(
        f"reconcile {controller}",
        context=parent,
        kind=trace.SpanKind.INTERNAL,
        links=links,
        attributes={
            "steward.controller": controller,
            "steward.key": key,
            "steward.attempt": attempt,
            "steward.coalesced_events": len(contexts),
        },
    ) as span:
        token = _coalesced.set(tuple(contexts))
        try:
            _annotate_queue_wait(span, key, queued_at_ns, dequeued_at_ns)
            yield span
        finally:
            _coalesced.reset(token)


def _annotate_queue_wait(
    span: trace.Span, key: str, queued_at_ns: int, dequeued_at_ns: int
) -> None:
    if queued_at_ns and dequeued_at_ns:
        wait = max(0, dequeued_at_ns - queued_at_ns) / 1e9
        span.set_attribute("steward.queue_wait_seconds", wait)
        span.add_event("enqueued", {"steward.key": key}, timestamp=queued_at_ns)
        span.add_event("dequeued", {"steward.queue_wait_seconds": wait}, timestamp=dequeued_at_ns)


def outgoing_headers() -> dict[str, str]:
    """The ``traceparent``/``tracestate`` of the current span, for an outgoing request
    (empty when nothing is being traced)."""
    carrier: dict[str, str] = {}
    if trace.get_current_span().get_span_context().is_valid:
        _propagator.inject(carrier)
    return carrier


def stamp_trace_context(body: dict[str, Any]) -> dict[str, Any]:
    """Put the current span's ``traceparent``/``tracestate`` into ``body``'s annotations
    (KEP-5915's annotation), so the events of an object this reconcile writes — a child it
    creates, scheduling and running it — continue the same trace. Returns ``body``; nothing
    changes when nothing is being traced."""
    context = outgoing_headers()
    if context:
        meta = body.setdefault("metadata", {})
        meta["annotations"] = {**(meta.get("annotations") or {}), **context}
    return body
