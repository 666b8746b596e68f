// Package telemetry wires OpenTelemetry tracing, Prometheus metrics, structured
// logging and the operational HTTP endpoints shared by every riftflow service.
//
// A service calls [Setup] once at start-up. Setup installs the global
// TracerProvider (exporting OTLP over HTTP when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, and OTEL_TRACES_EXPORTER is not
// "none"), the W3C TraceContext and Baggage propagator, and a global
// MeterProvider backed by a private [prometheus.Registry]. Without an endpoint
// the TracerProvider is still a real SDK provider, so spans get IDs and
// [NewLogger] can put trace_id and span_id on every log line.
//
// When several services share one process (riftflow up), each one takes its
// own provider from [Telemetry.TracerProvider] so that trace back-ends such as
// Jaeger show them as separate services, while all spans go through the one
// exporter.
//
// [Ops] serves /healthz, /readyz and /metrics, and any extra handlers the
// caller mounts, on HTTP_ADDR (default ":8080").
package telemetry
