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
