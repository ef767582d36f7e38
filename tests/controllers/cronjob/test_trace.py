"""A Job the CronJob controller starts continues the trace of the sync that started it:
its ``traceparent`` annotation names a trace of one of the controller's reconcile spans
(the Job controller's work on the Job then continues that trace, see
docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.controllers.cronjob.conftest import Side
from tests.controllers.harness import eventually
from tests.spans import recorded_spans

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    yield from recorded_spans()


async def test_a_started_job_continues_the_sync_trace(
    spans: InMemorySpanExporter, steward: Side
) -> None:
    at = (datetime.now(UTC) - timedelta(minutes=30)).replace(second=0, microsecond=0)
    steward.create_cronjob("traced", schedule=f"{at.minute} * * * *")
    last = (at - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    steward.set_status("traced", {"lastScheduleTime": last})
    steward.resume("traced")
    [job] = await eventually(steward.jobs, "the Job started", 60.0)
    traceparent = job["metadata"]["annotations"]["traceparent"]
    reconciles = {
        format(s.context.trace_id, "032x")
        for s in spans.get_finished_spans()
        if s.name.startswith("reconcile")
    }
    assert traceparent.split("-")[1] in reconciles
