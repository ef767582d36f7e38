package steward

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestReconcileSpanParentLinksAndOutgoingTraceparent(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	otel.SetTracerProvider(provider)
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })

	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("traceparent")
	}))
	defer srv.Close()

	contexts := []TraceContext{tc(1), {Traceparent: "garbage"}, tc(2), tc(3)}
	ctx, span := StartReconcileSpan(context.Background(), "demo", "ns/a", contexts, 2)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPatch, srv.URL, nil)
	resp, err := (&http.Client{Transport: TracingTransport(nil)}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	span.End()

	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans ended, want the HTTP client span and the reconcile span", len(spans))
	}
	client, reconcile := spans[0], spans[1]
	parent, _ := remoteSpanContext(tc(1))
	if reconcile.Parent().SpanID() != parent.SpanID() || reconcile.SpanContext().TraceID() != parent.TraceID() {
		t.Fatal("the reconcile span's parent is the first event's context")
	}
	second, _ := remoteSpanContext(tc(2))
	if links := reconcile.Links(); len(links) != 2 || links[0].SpanContext.SpanID() != second.SpanID() {
		t.Fatalf("links = %v (malformed contexts are skipped)", links)
	}
	attrs := map[string]string{}
	for _, a := range reconcile.Attributes() {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	if attrs["steward.controller"] != "demo" || attrs["steward.key"] != "ns/a" || attrs["steward.attempt"] != "2" {
		t.Fatalf("attributes = %v", attrs)
	}
	if client.Parent().SpanID() != reconcile.SpanContext().SpanID() {
		t.Fatal("the HTTP span is the reconcile's child")
	}
	want := "00-" + client.SpanContext().TraceID().String() + "-" + client.SpanContext().SpanID().String() + "-01"
	if !strings.EqualFold(got, want) {
		t.Fatalf("traceparent sent = %q, want %q", got, want)
	}
}
