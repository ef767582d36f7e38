"""A pod the StatefulSet controller creates continues the trace of the sync that created
it: its ``traceparent`` annotation names a trace of one of the controller's reconcile
spans (the scheduler's and kubelet's work on the pod then continues that trace, see
docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.controllers.harness import eventually
from tests.controllers.statefulset.conftest import Side
from tests.spans import recorded_spans

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    yield from recorded_spans()


async def test_a_created_pod_continues_the_sync_trace(
    spans: InMemorySpanExporter, steward: Side
) -> None:
    """Catches: a pod created without the sync's trace context (``stamp_trace``)."""
    steward.create("traced", 1)
    [pod] = await eventually(steward.pods, "the pod created", 60.0)
    traceparent = pod["metadata"]["annotations"]["traceparent"]
    reconciles = {
        format(s.context.trace_id, "032x")
        for s in spans.get_finished_spans()
        if s.name.startswith("reconcile")
    }
    assert traceparent.split("-")[1] in reconciles
