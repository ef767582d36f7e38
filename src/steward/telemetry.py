"""Tracing set-up shared by every Steward process, from the standard ``OTEL_*`` variables."""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)


def configure_tracing(service_name: str) -> bool:
    """Export spans over OTLP gRPC when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set.

    ``OTEL_SERVICE_NAME`` overrides ``service_name``; ``OTEL_TRACES_SAMPLER`` (and its
    argument), ``OTEL_EXPORTER_OTLP_*`` and ``OTEL_SDK_DISABLED`` are honoured by the SDK
    as documented by OpenTelemetry. Without an endpoint (or with the SDK disabled) nothing
    is exported and tracing stays a no-op. Returns whether spans are exported.
    """
    if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return False
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    name = os.environ.get("OTEL_SERVICE_NAME") or service_name
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    log.info(
        "tracing: exporting spans as %s to %s",
        name,
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"],
    )
    return True
