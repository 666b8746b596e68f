package e2e

import (
	"encoding/xml"
	"fmt"
	"html"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/telemetry/telemetrytest"
	"github.com/riftflow/riftflow/services/riftflow/stack"
	"github.com/riftflow/riftflow/services/riftflow/stack/stacktest"
	"github.com/riftflow/riftflow/streams"
)

// TestOneTracePerRequest runs the five services with the real OTLP/HTTP
// exporter pointed at an in-process receiver, ingests one request, and
// checks that the request is one trace from the publish to the persister's
// Postgres writes: every span's parent was received, the stages hang off
// each other through the NATS headers, every fetch result stored shows up
// as a persister span in the trace, and the spans carry the attributes
// operators search by.
//
// With RIFTFLOW_TRACE_SVG=<path> it also writes the trace as an SVG
// waterfall there (docs/trace.svg is made that way).
func TestOneTracePerRequest(t *testing.T) {
	recv := telemetrytest.NewReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL())
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	h := stacktest.Start(t, stacktest.Options{})
	p := h.Demo()
	const count = 3
	reqID := "trace-" + stack.RandHex(6)
	ev, err := h.Ingest(bus.IngestRequest{RequestID: reqID, RiotID: p.GameName + "#" + p.TagLine, Platform: p.Platform,
		Mode: bus.ModeFull, LookbackDays: 730, Count: count}, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Status != "completed" || ev.Total == 0 {
		t.Fatalf("final event %+v, want completed with matches", ev)
	}
	h.WaitIdle(10 * time.Second)
	if err := h.St.Infra.Tel.ForceFlush(h.Ctx); err != nil {
		t.Fatal(err)
	}

	subj := h.St.Infra.Subjects
	// The root: the test's publish on lol.ingest.request (a producer span
	// made by natsx.PublishMsg, as `riftflow ingest` and POST /v1/ingest do).
	var root telemetrytest.Span
	for _, s := range recv.Spans() {
		if s.Name == "send "+streams.StreamIngest && s.Attributes["messaging.destination.name"] == subj.IngestRequest() &&
			s.Attributes["messaging.message.id"] == "ingest:"+reqID {
			root = s
		}
	}
	if root.SpanID == "" {
		t.Fatalf("no producer span for the ingest publish among %d spans", len(recv.Spans()))
	}
	if root.ParentSpanID != "" || root.Kind != "SPAN_KIND_PRODUCER" {
		t.Errorf("root span: parent %q kind %s, want a parentless producer span", root.ParentSpanID, root.Kind)
	}
	spans := recv.Trace(root.TraceID)
	t.Logf("trace %s: %d spans\n%s", root.TraceID, len(spans), recv.Tree(root.TraceID))

	byID := map[string]telemetrytest.Span{}
	services := map[string]int{}
	for _, s := range spans {
		byID[s.SpanID] = s
		services[s.Service]++
	}
	// Parent links intact: every span but the root has its parent in the
	// same trace.
	for _, s := range spans {
		if s.SpanID != root.SpanID {
			if _, ok := byID[s.ParentSpanID]; !ok {
				t.Errorf("span %s: %s has parent %q, not in the trace", s.Service, s.Name, s.ParentSpanID)
			}
		}
	}
	for _, svc := range []string{"resolver", "matchid-lister", "match-fetcher", "persister"} {
		if services[svc] == 0 {
			t.Errorf("no %s span in the request's trace (services: %v)", svc, services)
		}
	}
	// The retry-sweeper takes no part in a healthy request; it still
	// exports its own spans (the start-up sweep) through the same exporter.
	swept := false
	for _, s := range recv.Spans() {
		swept = swept || s.Service == "retry-sweeper"
	}
	if !swept {
		t.Error("no retry-sweeper span exported")
	}

	// path lists "service: name" from s up to the root.
	path := func(s telemetrytest.Span) []string {
		var out []string
		for {
			out = append(out, s.Service+": "+s.Name)
			p, ok := byID[s.ParentSpanID]
			if !ok {
				return out
			}
			s = p
		}
	}
	// The chain of one match: publish → resolver → SyncCommand → lister →
	// FetchCommand → fetcher (Riot call) → FetchResult → persister batch →
	// the Postgres writes (otelpgx), all parent to child.
	var region string
	for _, s := range spans {
		if s.Service == "match-fetcher" && s.Name == "process "+streams.StreamFetch && s.Attributes["riot.region"] != "" {
			region = s.Attributes["riot.region"]
		}
	}
	if region == "" {
		t.Fatal("no match-fetcher consumer span with riot.region")
	}
	// Span names are "<operation> <stream>" (low-cardinality; the subject
	// is messaging.destination.name). An ingest request is interactive:
	// every stage takes its interactive queue (its results are batched by
	// the persister's interactive consumer).
	want := strings.Join([]string{
		"persister: process batch " + streams.ConsumerPersisterInteractive,
		"persister: process " + streams.StreamFetched,
		"match-fetcher: send " + streams.StreamFetched,
		"match-fetcher: process " + streams.StreamFetch,
		"matchid-lister: send " + streams.StreamFetch,
		"matchid-lister: process " + streams.StreamSync,
		"resolver: send " + streams.StreamSync,
		"resolver: process " + streams.StreamIngest,
		root.Service + ": send " + streams.StreamIngest,
	}, "\n")
	var writes, riotCalls int
	found := false
	for _, s := range spans {
		switch {
		case strings.Contains(s.Scope, "otelpgx"):
			pp := path(s)
			if s.Service == "persister" && strings.Join(pp[1:], "\n") == want {
				found = true
				writes++
			}
		case strings.HasPrefix(s.Scope, "riftflow/riot"):
			riotCalls++
			if s.Kind != "SPAN_KIND_CLIENT" || s.Attributes["riot.route"] == "" || s.Attributes["http.response.status_code"] == "" {
				t.Errorf("Riot client span %s: kind %s attrs %v", s.Name, s.Kind, s.Attributes)
			}
		}
	}
	if !found {
		t.Errorf("no persister Postgres span whose ancestors are\n%s", want)
	}
	if riotCalls == 0 {
		t.Error("no Riot client span in the trace")
	}

	// Every stored fetch result is in the trace: each FetchResult publish
	// has a persister consumer span under it, which either holds the batch
	// (and its writes) or links to the batch that does.
	results := 0
	for _, s := range spans {
		if s.Service != "match-fetcher" || s.Name != "send "+streams.StreamFetched {
			continue
		}
		results++
		var consumer *telemetrytest.Span
		for _, c := range spans {
			if c.ParentSpanID == s.SpanID && c.Service == "persister" {
				consumer = &c
			}
		}
		if consumer == nil {
			t.Errorf("fetch result %s (%s) has no persister span", s.SpanID, s.Attributes["messaging.message.id"])
			continue
		}
		if consumer.Attributes["nats.result"] != "ack" || consumer.Attributes["nats.delivery_count"] == "" ||
			consumer.Attributes["messaging.destination.name"] != s.Attributes["messaging.destination.name"] {
			t.Errorf("persister span %s: attributes %v", consumer.Name, consumer.Attributes)
		}
		holdsBatch := false
		for _, c := range spans {
			holdsBatch = holdsBatch || (c.ParentSpanID == consumer.SpanID && c.Name == "process batch "+streams.ConsumerPersisterInteractive)
		}
		if !holdsBatch && len(consumer.Links) == 0 {
			t.Errorf("persister span %s neither holds nor links to a batch", consumer.SpanID)
		}
	}
	if results < ev.Total {
		t.Errorf("%d fetch results in the trace, want at least %d (one per match)", results, ev.Total)
	}

	// Attributes operators search by; span names stay low-cardinality
	// (identifiers are attributes, never part of a name).
	for _, s := range spans {
		if strings.Contains(s.Name, p.PUUID) || strings.Contains(s.Name, "_") && strings.Contains(s.Name, s.Attributes["riot.match_id"]) && s.Attributes["riot.match_id"] != "" {
			t.Errorf("span name %q carries an identifier", s.Name)
		}
		if s.Kind == "SPAN_KIND_CONSUMER" && !strings.HasPrefix(s.Name, "process batch") {
			if s.Attributes["messaging.destination.name"] == "" || s.Attributes["nats.delivery_count"] == "" {
				t.Errorf("consumer span %s: %s lacks destination or delivery count: %v", s.Service, s.Name, s.Attributes)
			}
		}
		if s.Kind == "SPAN_KIND_PRODUCER" && s.Attributes["messaging.destination.name"] == "" {
			t.Errorf("producer span %s: %s lacks messaging.destination.name", s.Service, s.Name)
		}
		switch {
		case s.Service == "matchid-lister" && strings.HasPrefix(s.Name, "process "):
			if s.Attributes["riot.puuid"] != p.PUUID || s.Attributes["riot.region"] == "" {
				t.Errorf("lister span: riot.puuid %q riot.region %q", s.Attributes["riot.puuid"], s.Attributes["riot.region"])
			}
		case s.Service == "match-fetcher" && strings.HasPrefix(s.Name, "process "):
			if s.Attributes["riot.match_id"] == "" || s.Attributes["riot.region"] != region || s.Attributes["riot.puuid"] != p.PUUID {
				t.Errorf("fetcher span: riot.match_id %q riot.region %q riot.puuid %q", s.Attributes["riot.match_id"],
					s.Attributes["riot.region"], s.Attributes["riot.puuid"])
			}
		case s.Service == "resolver" && strings.HasPrefix(s.Name, "process "):
			if s.Attributes["riot.puuid"] != p.PUUID {
				t.Errorf("resolver span: riot.puuid %q, want %q", s.Attributes["riot.puuid"], p.PUUID)
			}
		}
	}

	svg := renderTraceSVG(spans, root)
	if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
		t.Fatalf("trace SVG is not well-formed XML: %v", err)
	}
	for _, svc := range []string{"resolver", "matchid-lister", "match-fetcher", "persister"} {
		if !strings.Contains(svg, ">"+svc+"<") {
			t.Errorf("trace SVG has no legend entry for %s", svc)
		}
	}
	if out := os.Getenv("RIFTFLOW_TRACE_SVG"); out != "" {
		if err := os.WriteFile(out, []byte(svg), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", out)
	}
}

// serviceColours are the bar colours of the waterfall, one per service.
var serviceColours = map[string]string{
	"riftflow": "#7f7f7f", "resolver": "#1f77b4", "matchid-lister": "#ff7f0e",
	"match-fetcher": "#2ca02c", "persister": "#d62728", "retry-sweeper": "#9467bd",
}

// renderTraceSVG draws one trace as a waterfall, the way Jaeger's trace
// view lays it out: one row per span in depth-first order (children by
// start time), indented by depth, a bar from start to end on a shared time
// axis, coloured by service.
func renderTraceSVG(spans []telemetrytest.Span, root telemetrytest.Span) string {
	children := map[string][]telemetrytest.Span{}
	for _, s := range spans {
		children[s.ParentSpanID] = append(children[s.ParentSpanID], s)
	}
	type row struct {
		s     telemetrytest.Span
		depth int
	}
	var rows []row
	var walk func(s telemetrytest.Span, depth int)
	walk = func(s telemetrytest.Span, depth int) {
		rows = append(rows, row{s, depth})
		kids := children[s.SpanID]
		sort.SliceStable(kids, func(i, j int) bool { return kids[i].Start.Before(kids[j].Start) })
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	walk(root, 0)
	t0, t1 := root.Start, root.End
	for _, r := range rows {
		if r.s.End.After(t1) {
			t1 = r.s.End
		}
	}
	total := t1.Sub(t0)
	if total <= 0 {
		total = time.Millisecond
	}
	const (
		labelW = 430
		barW   = 640
		rowH   = 16
		top    = 58
	)
	width := labelW + barW + 20
	height := top + rowH*len(rows) + 20
	x := func(t time.Time) float64 { return labelW + float64(barW)*float64(t.Sub(t0))/float64(total) }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="8" y="16" font-size="13" font-weight="bold">%s</text>`+"\n",
		html.EscapeString(fmt.Sprintf("One ingest request: trace %s, %d spans, %s", root.TraceID, len(rows), total.Round(time.Millisecond))))
	fmt.Fprintf(&b, `<text x="8" y="31" fill="#555">%s</text>`+"\n",
		html.EscapeString("A trace recorded by riftflow's own OTLP receiver (TestOneTracePerRequest), drawn as Jaeger would show it. Not a Jaeger screenshot."))
	// Legend.
	lx := 8
	for _, svc := range []string{"riftflow", "resolver", "matchid-lister", "match-fetcher", "persister"} {
		fmt.Fprintf(&b, `<rect x="%d" y="38" width="10" height="10" fill="%s"/><text x="%d" y="47">%s</text>`+"\n",
			lx, serviceColours[svc], lx+14, svc)
		lx += 14 + 8*len(svc) + 12
	}
	// Time axis.
	for i := 0; i <= 4; i++ {
		tx := labelW + barW*i/4
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#ddd"/>`, tx, top-4, tx, height-14)
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555" text-anchor="middle">%s</text>`+"\n", tx, height-3,
			(total * time.Duration(i) / 4).Round(time.Millisecond))
	}
	for i, r := range rows {
		y := top + i*rowH
		colour := serviceColours[r.s.Service]
		if colour == "" {
			colour = "#17becf"
		}
		label := r.s.Service + ": " + r.s.Name
		if len(label) > 62 {
			label = label[:59] + "..."
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`, 8+r.depth*10, y+11, html.EscapeString(label))
		x0, x1 := x(r.s.Start), x(r.s.End)
		w := max(x1-x0, 1)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>`+"\n",
			x0, y+2, w, rowH-4, colour, html.EscapeString(fmt.Sprintf("%s (%s)", label, r.s.End.Sub(r.s.Start).Round(time.Microsecond))))
	}
	b.WriteString("</svg>\n")
	return b.String()
}
