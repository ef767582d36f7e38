/**
 * The API client's spans carry OpenTelemetry's HTTP client attributes (`url.full` without
 * the query, `server.address`, `server.port`, the method and the status), as the Go and
 * Python runtimes' do.
 */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { SpanKind, trace } from "@opentelemetry/api";
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { Arrivals } from "./arrivals";

describe("KubeClient spans", () => {
  const arrivals = new Arrivals();
  const exporter = new InMemorySpanExporter();
  const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  before(async () => {
    await arrivals.start();
    trace.setGlobalTracerProvider(provider);
  });
  after(async () => {
    trace.disable();
    await provider.shutdown();
    await arrivals.stop();
  });

  it("a request is an HTTP client span of the server's URL", async () => {
    const api = arrivals.client();
    await api.request("GET", "/api/v1/namespaces/default/configmaps/c?resourceVersion=0");
    const spans = exporter.getFinishedSpans().filter((s) => s.kind === SpanKind.CLIENT);
    assert.equal(spans.length, 1);
    const server = new URL(api.access.server);
    assert.deepEqual(spans[0]?.attributes, {
      "http.request.method": "GET",
      "url.full": `${api.access.server}/api/v1/namespaces/default/configmaps/c`,
      "server.address": server.hostname,
      "server.port": Number(server.port),
      "http.response.status_code": 200,
    });
  });
});
