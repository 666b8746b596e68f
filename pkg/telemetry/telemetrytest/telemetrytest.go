// Package telemetrytest helps tests observe spans: an in-memory recorder
// that can stand in for the global TracerProvider, and an in-process
// OTLP/HTTP receiver that collects what the real exporter sends. GrepLines
// picks the lines of a /metrics page about one metric.
package telemetrytest

import (
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Recorder is a TracerProvider that keeps every span in memory. Spans are
// recorded synchronously, so they are visible as soon as they end.
type Recorder struct {
	// Provider creates the recorded spans.
	Provider *sdktrace.TracerProvider
	// SpanRecorder holds started and ended spans.
	*tracetest.SpanRecorder
}

// NewRecorder returns a Recorder that samples every span.
func NewRecorder() *Recorder {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	return &Recorder{Provider: tp, SpanRecorder: sr}
}

// InstallGlobal makes a new Recorder the global TracerProvider, with the W3C
// TraceContext and Baggage propagator, for the duration of t. The previous
// provider and propagator are restored when t ends. Tests that use it must
// not run in parallel with other tests that touch the OpenTelemetry globals.
func InstallGlobal(t testing.TB) *Recorder {
	t.Helper()
	r := NewRecorder()
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(r.Provider)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	t.Cleanup(func() {
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
		_ = r.Provider.Shutdown(t.Context())
	})
	return r
}

// Names returns the names of the ended spans, in the order they ended.
func (r *Recorder) Names() []string {
	var names []string
	for _, s := range r.Ended() {
		names = append(names, s.Name())
	}
	return names
}

// GrepLines returns the lines of text that contain sub, joined by
// newlines: the part of a /metrics page (Prometheus text format) worth
// printing when a check of one metric fails.
func GrepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
