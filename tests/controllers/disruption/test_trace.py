"""A budget's sync continues the trace of the pod change that queued it: a pod that comes
under a budget, changed with a ``traceparent`` annotation, is seen by the informer in that
trace, the budget's reconcile continues it, and so does the write of the budget's status
(docs/architecture.md)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.controllers.disruption.scenarios import NOBODY, Side, wait
from tests.spans import recorded_spans

pytestmark = pytest.mark.integration


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    yield from recorded_spans()


def test_a_status_write_continues_the_pod_change_trace(
    spans: InMemorySpanExporter, steward: Side
) -> None:
    """Breaks when a pod's change queues its budget without the change's trace context, or
    the status write leaves the reconcile's trace."""
    steward.pod("traced", {"app": "elsewhere"}, scheduler=NOBODY)
    steward.budget("traced", {"matchLabels": {"app": "traced"}}, minAvailable=0)
    wait(lambda: steward.synced("traced", expectedPods=0), "budget traced synced")
    trace_id = secrets.token_hex(16)
    steward.kube.request(
        "PATCH",
        f"{steward.core}/pods/traced",
        {
            "metadata": {
                "labels": {"app": "traced"},
                "annotations": {"traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"},
            }
        },
        content_type="application/merge-patch+json",
    )
    wait(lambda: steward.synced("traced", expectedPods=1), "budget traced counting the pod")

    def in_trace() -> list[str]:
        return [
            s.name
            for s in spans.get_finished_spans()
            if format(s.context.trace_id, "032x") == trace_id
        ]

    names = wait(
        lambda: (lambda found: found if any(n.startswith("PUT") for n in found) else None)(
            in_trace()
        ),
        "the status write in the pod change's trace",
        within=10.0,
    )
    assert any(n.startswith("reconcile") for n in names), names
    assert any("poddisruptionbudgets" in n and n.startswith("PUT") for n in names), names
