// Package httptrace makes outgoing HTTP requests client spans that carry their trace
// context (W3C traceparent). It is shared by package steward (TracingTransport) and
// package kube (every API request), which must not import each other both ways.
package httptrace

import (
	"net/http"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation scope of the runtime's spans.
const TracerName = "github.com/steward-dev/steward/runtimes/go/steward"

// Tracer is the runtime's tracer, from the global tracer provider.
func Tracer() trace.Tracer { return otel.Tracer(TracerName) }

var w3c = propagation.TraceContext{}

// Transport wraps base (nil for http.DefaultTransport) so that each request is a client
// span, child of the span in the request's context, and carries that span's traceparent.
func Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{base: base}
}

type transport struct{ base http.RoundTripper }

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, span := Tracer().Start(req.Context(), "HTTP "+req.Method,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("http.request.method", req.Method),
			attribute.String("url.full", req.URL.Redacted()),
			attribute.String("server.address", req.URL.Hostname()),
		))
	defer span.End()
	out := req.Clone(ctx)
	w3c.Inject(ctx, propagation.HeaderCarrier(out.Header))
	resp, err := t.base.RoundTrip(out)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return nil, err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if resp.StatusCode >= 400 {
		span.SetStatus(codes.Error, resp.Status)
	}
	return resp, nil
}
