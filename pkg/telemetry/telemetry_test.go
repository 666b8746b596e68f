package telemetry_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/riftflow/riftflow/pkg/telemetry"
	"github.com/riftflow/riftflow/pkg/telemetry/telemetrytest"
)

func TestMetricsThroughGlobalMeter(t *testing.T) {
	ctx := context.Background()
	tel := setup(t, "", telemetry.Config{ServiceName: "persister"})

	c, err := otel.Meter("riftflow/test").Int64Counter("riftflow_test_matches_stored")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(ctx, 3)

	code, body := get(t, tel.NewOps().Handler(), "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	var found bool
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "riftflow_test_matches_stored_total{") && strings.HasSuffix(line, " 3") {
			found = true
		}
	}
	if !found {
		t.Errorf("counter riftflow_test_matches_stored_total 3 missing from /metrics:\n%s", body)
	}
	if !strings.Contains(body, "go_goroutines ") || !strings.Contains(body, "process_") {
		t.Errorf("/metrics lacks the Go runtime or process collectors")
	}
}

func TestNoEndpointStillGivesTraceIDs(t *testing.T) {
	ctx := context.Background()
	setup(t, "", telemetry.Config{ServiceName: "resolver"})
	_, span := otel.Tracer("test").Start(ctx, "op")
	defer span.End()
	if !span.SpanContext().IsValid() {
		t.Error("span from the global provider has no valid IDs without an exporter")
	}
}

func TestExportDisabledByEnv(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	if telemetry.ExportEnabled() {
		t.Error("ExportEnabled() = true with OTEL_TRACES_EXPORTER=none")
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	if !telemetry.ExportEnabled() {
		t.Error("ExportEnabled() = false with an endpoint set")
	}
}

// TestOTLPExportPerService runs the real OTLP/HTTP exporter against the
// in-process receiver: a trace crossing two in-process services arrives
// complete, with each span under its own service.name and the propagated
// parent links intact.
func TestOTLPExportPerService(t *testing.T) {
	recv := telemetrytest.NewReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL())
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_SERVICE_NAME", "")
	ctx := context.Background()
	tel, err := telemetry.Setup(ctx, telemetry.Config{ServiceName: "riftflow", ServiceVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}

	ctx, root := otel.Tracer("cli").Start(ctx, "ingest")
	rctx, resolve := tel.TracerProvider("resolver").Tracer("resolver").Start(ctx, "process lol.ingest.request",
		trace.WithSpanKind(trace.SpanKindConsumer))
	// Hand the context across a message boundary as the services do.
	carrier := http.Header{}
	otel.GetTextMapPropagator().Inject(rctx, propagation.HeaderCarrier(carrier))
	lctx := otel.GetTextMapPropagator().Extract(context.Background(), propagation.HeaderCarrier(carrier))
	_, list := tel.TracerProvider("matchid-lister").Tracer("matchid-lister").Start(lctx, "process lol.sync.na1",
		trace.WithSpanKind(trace.SpanKindConsumer))
	list.End()
	resolve.End()
	root.End()

	if tel.TracerProvider("resolver") != tel.TracerProvider("resolver") {
		t.Error("TracerProvider returned different providers for one name")
	}
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}

	want := "riftflow: ingest\n" +
		"  resolver: process lol.ingest.request\n" +
		"    matchid-lister: process lol.sync.na1\n"
	if got := recv.Tree(root.SpanContext().TraceID().String()); got != want {
		t.Errorf("trace tree:\n%s\nwant:\n%s", got, want)
	}
	for _, s := range recv.Spans() {
		if s.Name == "process lol.sync.na1" && s.Kind != "SPAN_KIND_CONSUMER" {
			t.Errorf("span %q kind = %s, want SPAN_KIND_CONSUMER", s.Name, s.Kind)
		}
	}
}

// TestLibrarySpansInheritServiceProvider checks that a span started through
// the global provider (as natsx, the Riot client and otelpgx do) under a
// span of a per-service provider is exported under that service's name,
// that one started without a parent stays with the process's name, and
// that ForceFlush exports ended spans without shutting anything down.
func TestLibrarySpansInheritServiceProvider(t *testing.T) {
	recv := telemetrytest.NewReceiver(t)
	ctx := context.Background()
	tel := setup(t, recv.URL(), telemetry.Config{ServiceName: "riftflow"})

	pctx, persist := tel.TracerProvider("persister").Tracer("riftflow/persister").Start(ctx, "process batch persister")
	_, query := otel.Tracer("otelpgx").Start(pctx, "query INSERT")
	query.End()
	persist.End()
	_, lone := otel.Tracer("otelpgx").Start(ctx, "query SELECT 1")
	lone.End()
	// A remote parent (extracted from NATS headers) carries no provider:
	// the span goes to the process's provider, in the remote trace.
	carrier := http.Header{}
	otel.GetTextMapPropagator().Inject(pctx, propagation.HeaderCarrier(carrier))
	rctx := otel.GetTextMapPropagator().Extract(ctx, propagation.HeaderCarrier(carrier))
	_, remote := otel.Tracer("natsx").Start(rctx, "send lol.progress.x")
	remote.End()

	if err := tel.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	want := "persister: process batch persister\n" +
		"  persister: query INSERT\n" +
		"  riftflow: send lol.progress.x\n"
	if got := recv.Tree(persist.SpanContext().TraceID().String()); got != want {
		t.Errorf("trace tree:\n%s\nwant:\n%s", got, want)
	}
	if got := recv.Tree(lone.SpanContext().TraceID().String()); got != "riftflow: query SELECT 1\n" {
		t.Errorf("parentless span: %q", got)
	}
	for _, s := range recv.Spans() {
		if s.Start.IsZero() || s.End.Before(s.Start) {
			t.Errorf("span %q: start %v end %v", s.Name, s.Start, s.End)
		}
	}
	// Still usable after ForceFlush.
	_, after := otel.Tracer("x").Start(ctx, "after flush")
	after.End()
	if err := tel.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(recv.Spans()); n != 5 {
		t.Errorf("received %d spans, want 5", n)
	}
}

// setup is telemetry.Setup of cfg for one test, exporting over OTLP to
// endpoint ("" for no exporter), shut down when the test ends.
func setup(t *testing.T, endpoint string, cfg telemetry.Config) *telemetry.Telemetry {
	t.Helper()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_SERVICE_NAME", "")
	tel, err := telemetry.Setup(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tel.Shutdown(context.Background()) })
	return tel
}
