package telemetrytest_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"

	"github.com/riftflow/riftflow/pkg/telemetry/telemetrytest"
)

func TestInstallGlobalRecordsAndRestores(t *testing.T) {
	before := otel.GetTracerProvider()
	t.Run("installed", func(t *testing.T) {
		rec := telemetrytest.InstallGlobal(t)
		ctx, parent := otel.Tracer("t").Start(context.Background(), "parent")
		_, child := otel.Tracer("t").Start(ctx, "child")
		child.End()
		parent.End()
		if got := rec.Names(); len(got) != 2 || got[0] != "child" || got[1] != "parent" {
			t.Fatalf("ended spans = %v, want [child parent]", got)
		}
		if p := rec.Ended()[0].Parent(); p.SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("child's parent = %s, want %s", p.SpanID(), parent.SpanContext().SpanID())
		}
	})
	if otel.GetTracerProvider() != before {
		t.Error("InstallGlobal did not restore the previous TracerProvider")
	}
}

func TestGrepLines(t *testing.T) {
	page := "# TYPE a_total counter\na_total 3\nb_total 1\na_seconds_bucket{le=\"1\"} 2"
	if got, want := telemetrytest.GrepLines(page, "a_"), "# TYPE a_total counter\na_total 3\na_seconds_bucket{le=\"1\"} 2"; got != want {
		t.Errorf("GrepLines(a_) = %q, want %q", got, want)
	}
	if got := telemetrytest.GrepLines(page, "c_"); got != "" {
		t.Errorf("GrepLines(c_) = %q, want none", got)
	}
}
