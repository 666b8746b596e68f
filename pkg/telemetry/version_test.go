package telemetry_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/riftflow/riftflow/pkg/telemetry"
	"github.com/riftflow/riftflow/pkg/telemetry/telemetrytest"
)

// TestBuildInfoAndSecondsBuckets checks what every service's /metrics
// carries: riftflow_build_info with the stamped version, and latency
// histograms in seconds with boundaries below one second.
func TestBuildInfoAndSecondsBuckets(t *testing.T) {
	old := telemetry.Version
	telemetry.Version = "v9.9.9-test"
	defer func() { telemetry.Version = old }()
	ctx := context.Background()
	tel := setup(t, "", telemetry.Config{ServiceName: "persister"})
	h, err := otel.Meter("riftflow/test").Float64Histogram("riftflow.message.process.duration", metric.WithUnit("s"))
	if err != nil {
		t.Fatal(err)
	}
	h.Record(ctx, (30 * time.Millisecond).Seconds())

	_, body := get(t, tel.NewOps().Handler(), "/metrics")
	var info bool
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "riftflow_build_info{") && strings.Contains(line, `version="v9.9.9-test"`) &&
			strings.Contains(line, `service="persister"`) && strings.HasSuffix(line, " 1") {
			info = true
		}
	}
	if !info {
		t.Errorf("riftflow_build_info{version=\"v9.9.9-test\",service=\"persister\"} 1 missing from /metrics:\n%s", body)
	}
	// 30 ms lands in le=0.05 but not le=0.025: seconds, with fitting buckets.
	if !strings.Contains(body, `riftflow_message_process_duration_seconds_bucket{otel_scope_name="riftflow/test",otel_scope_schema_url="",otel_scope_version="",le="0.025"} 0`) ||
		!strings.Contains(body, `riftflow_message_process_duration_seconds_bucket{otel_scope_name="riftflow/test",otel_scope_schema_url="",otel_scope_version="",le="0.05"} 1`) {
		t.Errorf("process duration buckets do not fit seconds:\n%s", telemetrytest.GrepLines(body, "riftflow_message_process_duration"))
	}
}

// TestAPIRoutesTracedByPattern checks that a mounted route gets a server
// span named by its pattern, never by the identifiers in the path.
func TestAPIRoutesTracedByPattern(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	defer otel.SetTracerProvider(prev)

	ops := telemetry.NewOps(nil)
	ops.Handle("GET /v1/accounts/{puuid}", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	if code, _ := get(t, ops.Handler(), "/v1/accounts/abc-PUUID-123"); code != http.StatusOK {
		t.Fatalf("GET = %d", code)
	}
	get(t, ops.Handler(), "/healthz")
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1 (the API call; /healthz is not traced)", len(spans))
	}
	if n := spans[0].Name(); n != "GET /v1/accounts/{puuid}" {
		t.Errorf("span name %q, want the route pattern", n)
	}
}
