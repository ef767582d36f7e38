"""The API client's spans carry OpenTelemetry's HTTP client attributes (``url.full``,
``server.address``, ``server.port``, ``http.request.method``, and the status of an error
answer), as the Go runtime's do, so that tracing backends group them as HTTP calls."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from steward.cluster import LocalCluster
from steward.kube import KubeClient, NotFoundError, load_access
from tests.spans import recorded_spans

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    yield from recorded_spans()


async def test_a_request_is_an_http_client_span(
    cluster: LocalCluster, spans: InMemorySpanExporter
) -> None:
    access = load_access(str(cluster.kubeconfig))
    api = KubeClient(access)
    try:
        await api.arequest("GET", "/api/v1/namespaces/default?resourceVersion=0")
        with pytest.raises(NotFoundError):
            await api.arequest("GET", "/api/v1/namespaces/no-such-namespace")
    finally:
        api.close()
    server = urllib.parse.urlsplit(access.host)
    found, missing = [s for s in spans.get_finished_spans() if s.kind == SpanKind.CLIENT]
    assert found.name == "GET /api/v1/namespaces/{name}"
    assert dict(found.attributes or {}) == {
        "http.request.method": "GET",
        "url.full": f"{access.host}/api/v1/namespaces/default",
        "server.address": server.hostname,
        "server.port": server.port,
    }
    assert (missing.attributes or {}).get("http.response.status_code") == 404
