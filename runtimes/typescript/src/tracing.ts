/**
 * Tracing: OpenTelemetry set-up from the standard `OTEL_*` variables, and the reconcile span.
 *
 * The reconcile span's parent is the context of the first event coalesced into the key
 * (started by the informer when it received the event); every other coalesced event's
 * context becomes a link, so one reconcile caused by several events shows all of them.
 * While the span is active, {@link outgoingHeaders} gives the `traceparent` to send with
 * API writes ({@link KubeClient} adds it to each request on its own).
 *
 * Without {@link configureTracing} (or with no `OTEL_EXPORTER_OTLP_ENDPOINT`) every call
 * here is a cheap no-op; malformed incoming contexts are ignored (the span then starts a
 * trace of its own).
 */

import {
  type Context,
  type Link,
  type Span,
  SpanKind,
  SpanStatusCode,
  context as otelContext,
  propagation,
  ROOT_CONTEXT,
  trace,
} from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-grpc";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BatchSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import type { TraceContext } from "./workqueue";

const propagator = new W3CTraceContextPropagator();
const TRACER = "steward.runtime";

/**
 * Export spans over OTLP gRPC when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (and
 * `OTEL_SDK_DISABLED` is not `true`), as every Steward service does. `OTEL_SERVICE_NAME`
 * overrides `serviceName` (a controller uses `steward-controller-<name>`);
 * `OTEL_TRACES_SAMPLER` and `OTEL_EXPORTER_OTLP_*` are honoured by the SDK. Registers the
 * W3C propagator and an async-hooks context manager either way, so contexts flow.
 *
 * Returns a function that flushes and shuts the exporter down (call it before exiting).
 */
export function configureTracing(serviceName: string): () => Promise<void> {
  const env = process.env;
  const enabled =
    (env["OTEL_EXPORTER_OTLP_ENDPOINT"] ?? "") !== "" &&
    (env["OTEL_SDK_DISABLED"] ?? "").toLowerCase() !== "true";
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ "service.name": env["OTEL_SERVICE_NAME"] || serviceName }),
    spanProcessors: enabled ? [new BatchSpanProcessor(new OTLPTraceExporter())] : [],
  });
  provider.register({ propagator });
  return () => provider.shutdown();
}

function extract(ctx: TraceContext): Context | undefined {
  const carrier: Record<string, string> = { traceparent: ctx.traceparent };
  if (ctx.tracestate) carrier["tracestate"] = ctx.tracestate;
  const extracted = propagator.extract(ROOT_CONTEXT, carrier, {
    get: (c: Record<string, string>, key: string) => c[key],
    keys: (c: Record<string, string>) => Object.keys(c),
  });
  const spanContext = trace.getSpanContext(extracted);
  if (spanContext === undefined || !trace.isSpanContextValid(spanContext)) return undefined;
  return extracted;
}

/** Attributes of the reconcile span. */
export interface ReconcileSpanAttributes {
  readonly controller: string;
  readonly key: string;
  readonly attempt: number;
}

/**
 * Run `fn` inside the reconcile span of `key` (see the module docs). `fn` sets
 * `steward.result`; a thrown error is recorded on the span, sets its status, and is
 * re-thrown. The span ends when `fn` settles.
 */
export async function withReconcileSpan<T>(
  attrs: ReconcileSpanAttributes,
  contexts: readonly TraceContext[],
  fn: (span: Span) => Promise<T>,
): Promise<T> {
  const parents = contexts.map(extract).filter((c): c is Context => c !== undefined);
  const parent = parents[0] ?? ROOT_CONTEXT;
  const links: Link[] = parents.slice(1).map((c) => ({ context: trace.getSpanContext(c)! }));
  const tracer = trace.getTracer(TRACER);
  return tracer.startActiveSpan(
    `reconcile ${attrs.controller}`,
    {
      kind: SpanKind.INTERNAL,
      links,
      attributes: {
        "steward.controller": attrs.controller,
        "steward.key": attrs.key,
        "steward.attempt": attrs.attempt,
        "steward.coalesced_events": contexts.length,
      },
    },
    parent,
    async (span) => {
      try {
        return await fn(span);
      } catch (err) {
        span.recordException(err instanceof Error ? err : String(err));
        span.setStatus({ code: SpanStatusCode.ERROR, message: String(err) });
        throw err;
      } finally {
        span.end();
      }
    },
  );
}

/**
 * The `traceparent`/`tracestate` of the active span, for an outgoing request (empty when
 * nothing is being traced).
 */
export function outgoingHeaders(): Record<string, string> {
  const carrier: Record<string, string> = {};
  const active = otelContext.active();
  const spanContext = trace.getSpanContext(active);
  if (spanContext !== undefined && trace.isSpanContextValid(spanContext)) {
    propagation.inject(active, carrier);
    if (!carrier["traceparent"]) propagator.inject(active, carrier, { set: (c, k, v) => (c[k] = v) });
  }
  return carrier;
}
