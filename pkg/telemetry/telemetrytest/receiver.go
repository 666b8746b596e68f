package telemetrytest

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is a span as received over OTLP, flattened for assertions.
type Span struct {
	// Service is the service.name of the span's resource.
	Service string
	// Scope is the instrumentation scope (tracer) name.
	Scope string
	// Name is the span name.
	Name string
	// Kind is the span kind, e.g. "SPAN_KIND_CONSUMER".
	Kind string
	// TraceID, SpanID and ParentSpanID are lower-case hex; ParentSpanID is
	// empty for a root span.
	TraceID, SpanID, ParentSpanID string
	// Attributes holds the span attributes, each value formatted as text.
	Attributes map[string]string
	// StatusCode is the span status, e.g. "STATUS_CODE_ERROR".
	StatusCode string
	// Start and End are the span's start and end times.
	Start, End time.Time
	// Links are the linked spans, as "traceid/spanid" in lower-case hex.
	Links []string
}

// Receiver is an in-process OTLP/HTTP trace receiver. It accepts protobuf
// (optionally gzip-compressed) on POST /v1/traces and keeps every span.
//
// Point the real exporter at it with
// t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.URL()), and flush the provider
// (ForceFlush or Shutdown) before reading [Receiver.Spans]: the OTLP/HTTP
// exporter returns only after the receiver has answered, so no waiting is
// needed.
type Receiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	spans    []Span
	requests int
}

// NewReceiver starts a Receiver that is closed when t ends.
func NewReceiver(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.traces)
	r.srv = httptest.NewServer(mux)
	t.Cleanup(r.srv.Close)
	return r
}

// URL returns the base URL to use as OTEL_EXPORTER_OTLP_ENDPOINT.
func (r *Receiver) URL() string { return r.srv.URL }

// Requests returns how many export requests were accepted.
func (r *Receiver) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

// Spans returns a copy of the spans received so far, in arrival order.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Trace returns the received spans of one trace, in arrival order.
func (r *Receiver) Trace(traceID string) []Span {
	var out []Span
	for _, s := range r.Spans() {
		if s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

// Tree renders the spans of one trace as an indented tree, one span per
// line as "service: name", children sorted by name beneath their parent.
// Spans whose parent was not received are shown as roots. It is meant for
// comparing the complete shape of a trace in one assertion, e.g.
//
//	resolver: process lol.ingest.request
//	  resolver: publish lol.sync.na1
//	    matchid-lister: process lol.sync.na1
func (r *Receiver) Tree(traceID string) string {
	spans := r.Trace(traceID)
	byID := map[string]bool{}
	for _, s := range spans {
		byID[s.SpanID] = true
	}
	children := map[string][]Span{}
	for _, s := range spans {
		p := s.ParentSpanID
		if !byID[p] {
			p = ""
		}
		children[p] = append(children[p], s)
	}
	var b strings.Builder
	var walk func(parent string, depth int)
	walk = func(parent string, depth int) {
		kids := children[parent]
		sort.SliceStable(kids, func(i, j int) bool {
			if kids[i].Name != kids[j].Name {
				return kids[i].Name < kids[j].Name
			}
			return kids[i].Service < kids[j].Service
		})
		for _, s := range kids {
			fmt.Fprintf(&b, "%s%s: %s\n", strings.Repeat("  ", depth), s.Service, s.Name)
			walk(s.SpanID, depth+1)
		}
	}
	walk("", 0)
	return b.String()
}

func (r *Receiver) traces(w http.ResponseWriter, req *http.Request) {
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "only application/x-protobuf is supported, got "+ct, http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer zr.Close()
		body = zr
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	spans := flatten(&msg)
	r.mu.Lock()
	r.spans = append(r.spans, spans...)
	r.requests++
	r.mu.Unlock()

	out, err := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func flatten(msg *coltracepb.ExportTraceServiceRequest) []Span {
	var out []Span
	for _, rs := range msg.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			scope := ss.GetScope().GetName()
			for _, s := range ss.GetSpans() {
				out = append(out, Span{
					Service:      service,
					Scope:        scope,
					Name:         s.GetName(),
					Kind:         s.GetKind().String(),
					TraceID:      hex.EncodeToString(s.GetTraceId()),
					SpanID:       hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: hex.EncodeToString(s.GetParentSpanId()),
					Attributes:   attrs(s.GetAttributes()),
					StatusCode:   statusCode(s),
					Start:        time.Unix(0, int64(s.GetStartTimeUnixNano())),
					End:          time.Unix(0, int64(s.GetEndTimeUnixNano())),
					Links:        links(s),
				})
			}
		}
	}
	return out
}

func links(s *tracepb.Span) []string {
	var out []string
	for _, l := range s.GetLinks() {
		out = append(out, hex.EncodeToString(l.GetTraceId())+"/"+hex.EncodeToString(l.GetSpanId()))
	}
	return out
}

func statusCode(s *tracepb.Span) string { return s.GetStatus().GetCode().String() }

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = anyValue(kv.GetValue())
	}
	return m
}

func anyValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *commonpb.AnyValue_BytesValue:
		return hex.EncodeToString(x.BytesValue)
	case *commonpb.AnyValue_ArrayValue:
		parts := make([]string, 0, len(x.ArrayValue.GetValues()))
		for _, e := range x.ArrayValue.GetValues() {
			parts = append(parts, anyValue(e))
		}
		return "[" + strings.Join(parts, ",") + "]"
	default:
		return ""
	}
}
