"""The reconcile span: parent = first coalesced event, links = the others, attributes and
errors recorded; API requests made inside it are its client spans and carry its context."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from steward.runtime import Request, Result, TraceContext, WorkerOptions, WorkerPool
from steward.runtime.tracing import outgoing_headers
from tests.spans import recorded_spans

pytestmark = [pytest.mark.unit, pytest.mark.asyncio]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    yield from recorded_spans()


def ctx(trace_id: int, span_id: int) -> TraceContext:
    return TraceContext(f"00-{trace_id:032x}-{span_id:016x}-01")


class Recorder:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.headers: list[dict[str, str]] = []
        self.called = asyncio.Event()

    async def reconcile(self, request: Request) -> Result:
        self.headers.append(outgoing_headers())
        self.called.set()
        if self.fail:
            raise RuntimeError("boom")
        return Result(requeue_after=5.0)


async def run_once(recorder: Recorder, contexts: list[TraceContext]) -> None:
    pool = WorkerPool("traced", recorder, options=WorkerOptions(registry=CollectorRegistry()))
    pool.queue.add(Request("ns", "a"), contexts)
    task = asyncio.create_task(pool.run())
    await asyncio.wait_for(recorder.called.wait(), 30)
    await asyncio.sleep(0.05)  # let the worker finish the reconcile and end its span
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def reconciles(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == "reconcile traced"]


async def test_parent_is_the_first_event_and_links_are_the_others(
    spans: InMemorySpanExporter,
) -> None:
    recorder = Recorder()
    await run_once(recorder, [ctx(1, 1), ctx(2, 2), ctx(3, 3)])
    (span,) = reconciles(spans)
    assert span.parent is not None
    assert (span.context.trace_id, span.parent.span_id) == (1, 1)
    assert [(link.context.trace_id, link.context.span_id) for link in span.links] == [
        (2, 2),
        (3, 3),
    ]
    attributes = dict(span.attributes or {})
    assert attributes["steward.controller"] == "traced"
    assert attributes["steward.key"] == "ns/a"
    assert attributes["steward.result"] == "requeue_after"
    assert attributes["steward.requeue_after_seconds"] == 5.0
    assert attributes["steward.coalesced_events"] == 3
    # Writes made while reconciling carry the reconcile span's own context.
    sent = recorder.headers[0]["traceparent"]
    assert sent == f"00-{1:032x}-{span.context.span_id:016x}-01"


async def test_an_exception_is_recorded_and_no_context_starts_a_trace(
    spans: InMemorySpanExporter,
) -> None:
    await run_once(Recorder(fail=True), [TraceContext("not-a-traceparent")])
    span = reconciles(spans)[0]
    assert span.parent is None  # the malformed context is ignored
    assert span.status.status_code == trace.StatusCode.ERROR
    assert [e.name for e in span.events] == ["enqueued", "dequeued", "exception"]
    assert dict(span.attributes or {})["steward.result"] == "error"


async def test_the_wait_in_the_queue_shows_as_events(spans: InMemorySpanExporter) -> None:
    recorder = Recorder()
    pool = WorkerPool("traced", recorder, options=WorkerOptions(registry=CollectorRegistry()))
    pool.queue.add(Request("ns", "a"), [ctx(1, 1)])
    await asyncio.sleep(0.2)  # the key waits for a worker: no worker runs yet
    task = asyncio.create_task(pool.run())
    await asyncio.wait_for(recorder.called.wait(), 30)
    await asyncio.sleep(0.05)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    (span,) = reconciles(spans)
    enqueued, dequeued = span.events
    assert (enqueued.name, dequeued.name) == ("enqueued", "dequeued")
    assert enqueued.timestamp is not None and dequeued.timestamp is not None
    assert span.start_time is not None
    # Queued before any worker ran, taken just before the span began.
    assert enqueued.timestamp < dequeued.timestamp <= span.start_time
    waited = dict(span.attributes or {})["steward.queue_wait_seconds"]
    assert isinstance(waited, float)
    assert waited == pytest.approx((dequeued.timestamp - enqueued.timestamp) / 1e9)
    assert waited >= 0.2
