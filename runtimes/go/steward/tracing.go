package steward

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/steward-dev/steward/runtimes/go/internal/httptrace"
)

var w3c = propagation.TraceContext{}

func tracer() trace.Tracer { return httptrace.Tracer() }

// SetupTracing configures the global OpenTelemetry tracer provider from the standard
// OTEL_* environment variables: spans are exported over OTLP gRPC when
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set and
// OTEL_SDK_DISABLED is not "true"; OTEL_SERVICE_NAME overrides serviceName
// (conventionally "steward-controller-<name>"); OTEL_TRACES_SAMPLER and the other
// OTEL_EXPORTER_OTLP_* variables are honoured by the SDK. The W3C trace-context
// propagator is installed in every case.
//
// The returned function flushes and stops the exporter; call it before exiting. Without
// an endpoint, tracing stays a cheap no-op and the function does nothing.
func SetupTracing(ctx context.Context, serviceName string) (func(context.Context) error, error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	noop := func(context.Context) error { return nil }
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return noop, nil
	}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return noop, nil
	}
	exporter, err := otlptracegrpc.New(ctx)
	if err != nil {
		return noop, err
	}
	name := os.Getenv("OTEL_SERVICE_NAME")
	if name == "" {
		name = serviceName
	}
	res, err := resource.New(ctx,
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", name)),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return noop, err
	}
	provider := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	otel.SetTracerProvider(provider)
	return provider.Shutdown, nil
}

func remoteSpanContext(tc TraceContext) (trace.SpanContext, bool) {
	carrier := propagation.MapCarrier{"traceparent": tc.Traceparent}
	if tc.Tracestate != "" {
		carrier["tracestate"] = tc.Tracestate
	}
	sc := trace.SpanContextFromContext(w3c.Extract(context.Background(), carrier))
	return sc, sc.IsValid()
}

// StartReconcileSpan starts the span of one reconcile of key: its parent is the first
// valid context of the events coalesced into the key, every other one becomes a link
// (so one reconcile caused by several events shows all of them). Malformed contexts are
// ignored; with none left the span starts a trace of its own. Attributes:
// steward.controller, steward.key, steward.attempt, steward.coalesced_events; the worker
// pool adds steward.result when the reconcile ends.
func StartReconcileSpan(ctx context.Context, controller, key string, contexts []TraceContext, attempt int) (context.Context, trace.Span) {
	var parents []trace.SpanContext
	for _, tc := range contexts {
		if sc, ok := remoteSpanContext(tc); ok {
			parents = append(parents, sc)
		}
	}
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			attribute.String("steward.controller", controller),
			attribute.String("steward.key", key),
			attribute.Int("steward.attempt", attempt),
			attribute.Int("steward.coalesced_events", len(contexts)),
		),
	}
	if len(parents) > 0 {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parents[0])
		links := make([]trace.Link, 0, len(parents)-1)
		for _, sc := range parents[1:] {
			links = append(links, trace.Link{SpanContext: sc})
		}
		opts = append(opts, trace.WithLinks(links...))
	} else {
		opts = append(opts, trace.WithNewRoot())
	}
	return tracer().Start(ctx, "reconcile "+controller, opts...)
}

// OutgoingHeaders returns the traceparent (and tracestate) of the span in ctx, for an
// outgoing request; empty when nothing is being traced.
func OutgoingHeaders(ctx context.Context) map[string]string {
	carrier := propagation.MapCarrier{}
	w3c.Inject(ctx, carrier)
	return carrier
}

// TracingTransport wraps an http.RoundTripper (nil for http.DefaultTransport) so that
// each request is a client span, child of the span in the request's context (the
// reconcile's), and carries that span's traceparent header: kube-apiserver continues it
// for callers it trusts, so its own spans join the reconcile's trace.
func TracingTransport(base http.RoundTripper) http.RoundTripper {
	return httptrace.Transport(base)
}
