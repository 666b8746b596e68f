package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/riftflow/riftflow/pkg/telemetry"
	"github.com/riftflow/riftflow/pkg/telemetry/telemetrytest"
)

const testKey = "RGAPI-01234567-89ab-cdef-0123-456789abcdef"

func TestLoggerAddsTraceIDs(t *testing.T) {
	rec := telemetrytest.NewRecorder()
	ctx, span := rec.Provider.Tracer("test").Start(context.Background(), "op")
	defer span.End()
	sc := span.SpanContext()

	var buf bytes.Buffer
	log := telemetry.NewLogger(&buf, slog.LevelInfo, "json")
	log.InfoContext(ctx, "inside span", "match_id", "NA1_1")
	log.Info("no context")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d log lines, want 2:\n%s", len(lines), buf.String())
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
		t.Fatal(err)
	}
	if got["trace_id"] != sc.TraceID().String() || got["span_id"] != sc.SpanID().String() {
		t.Errorf("trace_id, span_id = %v, %v; want %s, %s", got["trace_id"], got["span_id"], sc.TraceID(), sc.SpanID())
	}
	if strings.Contains(lines[1], "trace_id") {
		t.Errorf("record without span context got a trace_id: %s", lines[1])
	}
}

func TestLoggerMasksRiotKey(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			log := telemetry.NewLogger(&buf, slog.LevelDebug, format).With("preset", "key="+testKey)
			log.Error("calling with "+testKey,
				"header", testKey,
				"err", errors.New("GET failed: X-Riot-Token: "+testKey),
				slog.Group("req", "token", testKey))
			out := buf.String()
			if strings.Contains(out, "0123-456789abcdef") {
				t.Errorf("key leaked into log output:\n%s", out)
			}
			if n := strings.Count(out, telemetry.MaskedRiotKey); n != 5 {
				t.Errorf("got %d masked keys, want 5:\n%s", n, out)
			}
		})
	}
}

func TestMaskSecretsLeavesOtherText(t *testing.T) {
	for _, in := range []string{"RGAPI-not-a-key", "puuid abc-123", ""} {
		if got := telemetry.MaskSecrets(in); got != in {
			t.Errorf("MaskSecrets(%q) = %q, want it unchanged", in, got)
		}
	}
}

func TestLevelFromString(t *testing.T) {
	tests := []struct {
		in      string
		want    slog.Level
		wantErr bool
	}{
		{"", slog.LevelInfo, false},
		{"debug", slog.LevelDebug, false},
		{"INFO", slog.LevelInfo, false},
		{"warning", slog.LevelWarn, false},
		{"warn", slog.LevelWarn, false},
		{"error", slog.LevelError, false},
		{"info+2", slog.LevelInfo + 2, false},
		{"loud", slog.LevelInfo, true},
	}
	for _, tt := range tests {
		got, err := telemetry.LevelFromString(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("LevelFromString(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}
