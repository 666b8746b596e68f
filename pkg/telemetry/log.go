package telemetry

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/riftflow/riftflow/pkg/redact"
)

// MaskedRiotKey replaces every Riot API key in logged text.
const MaskedRiotKey = redact.MaskedRiotKey

// MaskSecrets is redact.String: Riot API keys, URL passwords and registered
// secret values masked.
func MaskSecrets(s string) string { return redact.String(s) }

// NewLogger returns a logger writing to w at level and above, as JSON when
// format is "json" and as logfmt-style text otherwise.
//
// Records logged with a context (the ...Context methods) that holds a valid
// span get trace_id and span_id attributes. Every string, error and
// fmt.Stringer value, and the message itself, goes through redact.String
// (Riot API keys, URL passwords and registered secrets masked); this is
// defence in depth, not a licence to log secrets.
func NewLogger(w io.Writer, level slog.Level, format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: maskAttr}
	var h slog.Handler
	if strings.EqualFold(format, "json") {
		h = slog.NewJSONHandler(w, opts)
	} else {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(NewTraceHandler(h))
}

func maskAttr(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		if s := a.Value.String(); MaskSecrets(s) != s {
			a.Value = slog.StringValue(MaskSecrets(s))
		}
	case slog.KindAny:
		var s string
		switch v := a.Value.Any().(type) {
		case error:
			s = v.Error()
		case fmt.Stringer:
			s = v.String()
		case []byte:
			s = string(v)
		default:
			return a
		}
		if m := MaskSecrets(s); m != s {
			a.Value = slog.StringValue(m)
		}
	}
	return a
}

// NewTraceHandler wraps h so that records whose context holds a valid span
// get trace_id and span_id attributes (hex, as Jaeger shows them).
func NewTraceHandler(h slog.Handler) slog.Handler { return traceHandler{h} }

type traceHandler struct{ next slog.Handler }

func (h traceHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.next.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{h.next.WithAttrs(attrs)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.next.WithGroup(name)}
}

// LevelFromString parses a LOG_LEVEL value: "debug", "info", "warn" (or
// "warning"), "error", case-insensitively, with an optional offset such as
// "info+2". The empty string means info.
func LevelFromString(s string) (slog.Level, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return slog.LevelInfo, nil
	}
	if strings.EqualFold(s, "warning") {
		s = "warn"
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return slog.LevelInfo, fmt.Errorf("telemetry: log level %q: want debug, info, warn or error", s)
	}
	return l, nil
}
