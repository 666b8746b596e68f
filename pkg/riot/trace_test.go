package riot

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestSpans installs a recording provider for this test only and checks the
// client span's attributes, and that no attribute carries the key or a URL.
func TestSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	f := newFakeRiot(t, failOnceThen(429, "1", `["EUW1_1"]`))
	c, _, _ := newTestClient(t, f, nil)
	if _, err := c.MatchIDsByPUUID(context.Background(), Europe, puuid, MatchIDsQuery{Count: 5}); err != nil {
		t.Fatal(err)
	}
	f.setHandler(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(404) })
	c.Match(context.Background(), Europe, "EUW1_6834713231")

	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	attrs := func(s sdktrace.ReadOnlySpan) map[attribute.Key]string {
		m := map[attribute.Key]string{}
		for _, kv := range s.Attributes() {
			m[kv.Key] = kv.Value.String()
		}
		return m
	}
	a := attrs(spans[0])
	want := map[attribute.Key]string{
		"riot.route": "europe", "riot.method": MethodMatchIDsByPUUID, "http.response.status_code": "200",
		"riot.retries": "1", "riot.ratelimit.wait_ms": "1500",
	}
	for k, v := range want {
		if a[k] != v {
			t.Errorf("span 1 %s = %q, want %q", k, a[k], v)
		}
	}
	if spans[0].SpanKind() != trace.SpanKindClient {
		t.Errorf("span kind %v", spans[0].SpanKind())
	}
	b := attrs(spans[1])
	if b["http.response.status_code"] != "404" || b["riot.error.kind"] != "not_found" || spans[1].Status().Code.String() != "Error" {
		t.Errorf("span 2 = %v status %v", b, spans[1].Status())
	}
	for _, s := range spans {
		dump := fmt.Sprint(s.Attributes(), s.Events(), s.Status(), s.Name())
		if strings.Contains(dump, testKey) || strings.Contains(dump, f.URL) {
			t.Errorf("span %s carries the key or a URL: %s", s.Name(), dump)
		}
	}
}
