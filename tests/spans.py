"""Spans of the test process, recorded in memory: the ``spans`` fixtures of the tracing
tests use :func:`recorded_spans`."""

from __future__ import annotations

from collections.abc import Iterator

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

EXPORTER = InMemorySpanExporter()
"""The process's one in-memory exporter."""


def recorded_spans() -> Iterator[InMemorySpanExporter]:
    """For a fixture: :data:`EXPORTER`, emptied, recording every span the process ends
    until the test is over. The global tracer provider can be set once per process: an
    SDK provider is installed if none is, else the exporter is added to the one there,
    once."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    processors = provider._active_span_processor._span_processors
    if not any(getattr(p, "span_exporter", None) is EXPORTER for p in processors):
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()
