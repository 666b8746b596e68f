package e2e

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/services/riftflow/stack/stacktest"
	"github.com/riftflow/riftflow/streams"
)

// opsSample is one line of the Prometheus text exposition.
type opsSample struct {
	name   string
	labels map[string]string
	value  float64
}

// scrapeOps GETs /metrics from h and parses the samples.
func scrapeOps(t *testing.T, h http.Handler) []opsSample {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", rec.Code, rec.Body)
	}
	var out []opsSample
	sc := bufio.NewScanner(rec.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s := opsSample{labels: map[string]string{}}
		rest := line
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			s.name = line[:i]
			for _, kv := range opsSplitLabels(line[i+1 : j]) {
				k, v, _ := strings.Cut(kv, "=")
				s.labels[k], _ = strconv.Unquote(v)
			}
			rest = strings.TrimSpace(line[j+1:])
		} else {
			s.name, rest, _ = strings.Cut(line, " ")
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		s.value = v
		out = append(out, s)
	}
	return out
}

// opsSplitLabels splits `a="x",b="y,z"` on the commas between labels.
func opsSplitLabels(s string) []string {
	var out []string
	inQuote, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			inQuote = !inQuote
		case ',':
			if !inQuote {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// opsSum adds the samples called name whose labels include want.
func opsSum(samples []opsSample, name string, want map[string]string) (total float64, n int) {
next:
	for _, s := range samples {
		if s.name != name {
			continue
		}
		for k, v := range want {
			if s.labels[k] != v {
				continue next
			}
		}
		total += s.value
		n++
	}
	return total, n
}

// TestMetricsAfterIngest ingests one request through the five services and
// scrapes the process's /metrics: the design 002 set (throughput, failure
// and retry counters per stage, queue length per consumer), the Riot rate
// limiter's budget and its 429s by type, persist batch latency and size,
// and sync duration. The simulator answers a tenth of the requests with a
// 429 of the "service" kind (no X-Rate-Limit-Type), so the 429 counter
// and the retries have something to count.
func TestMetricsAfterIngest(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{Sim: sim.Options{Faults: sim.Faults{Seed: 7, Service429: 0.1}}})
	p := h.Demo()
	// A consumer nobody reads, bound like the services bind theirs, on the
	// EVENTS stream: after the ingest its queue holds the progress events,
	// so its pending gauge must be non-zero.
	watch := "ops-test-watch"
	if _, err := h.St.Infra.JS.CreateOrUpdateConsumer(h.Ctx, streams.StreamEvents, jetstream.ConsumerConfig{
		Durable: watch, AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: h.St.Infra.Subjects.ProgressAll(),
		InactiveThreshold: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.St.Infra.Consumer(h.Ctx, streams.StreamEvents, watch); err != nil {
		t.Fatal(err)
	}
	ev, err := h.Ingest(bus.IngestRequest{RiotID: p.GameName + "#" + p.TagLine, Platform: p.Platform,
		Mode: bus.ModeFull, LookbackDays: 730, Count: 3}, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Status != "completed" {
		t.Fatalf("final event %+v", ev)
	}
	h.WaitIdle(10 * time.Second)
	samples := scrapeOps(t, h.St.Infra.Ops.Handler())

	names := map[string]bool{}
	for _, s := range samples {
		names[s.name] = true
	}
	must := func(name string, labels map[string]string) float64 {
		t.Helper()
		v, n := opsSum(samples, name, labels)
		if n == 0 {
			var fams []string
			for k := range names {
				if strings.HasPrefix(k, "riftflow_") || strings.HasPrefix(k, "riot_") {
					fams = append(fams, k)
				}
			}
			t.Errorf("no opsSample %s%v; riftflow families: %v", name, labels, fams)
		}
		return v
	}
	positive := func(name string, labels map[string]string) {
		t.Helper()
		if v := must(name, labels); v <= 0 {
			t.Errorf("%s%v = %v, want > 0", name, labels, v)
		}
	}

	// Throughput per stage: acks by consumer (the request is interactive:
	// every stage takes its interactive queue).
	region := ""
	for _, s := range samples {
		if s.name == "riftflow_messages_processed_total" && strings.HasPrefix(s.labels["consumer"], "match-fetcher-") && s.value > 0 {
			region = strings.TrimPrefix(s.labels["consumer"], "match-fetcher-")
		}
	}
	for _, c := range []string{streams.ConsumerResolver, streams.ConsumerMatchIDListerInteractive, "match-fetcher-" + region,
		streams.ConsumerPersisterInteractive} {
		positive("riftflow_messages_processed_total", map[string]string{"consumer": c, "result": "ack"})
		positive("riftflow_message_process_duration_seconds_count", map[string]string{"consumer": c})
		positive("riftflow_message_deliveries_count", map[string]string{"consumer": c})
	}
	// Queue length: both gauges for every consumer this process bound.
	for _, c := range []string{streams.ConsumerResolver, streams.ConsumerMatchIDLister, streams.ConsumerPersister,
		streams.ConsumerResolverBackground, streams.ConsumerMatchIDListerInteractive, streams.ConsumerPersisterInteractive,
		streams.ConsumerRetrySweeper, streams.FetcherConsumer("americas"), streams.FetcherConsumer("asia"),
		streams.FetcherConsumer("europe"), streams.FetcherConsumer("sea"), watch} {
		must("riftflow_consumer_pending", map[string]string{"consumer": c})
		must("riftflow_consumer_ack_pending", map[string]string{"consumer": c})
	}
	positive("riftflow_consumer_pending", map[string]string{"consumer": watch, "stream": streams.StreamEvents})
	if v, _ := opsSum(samples, "riftflow_consumer_pending", map[string]string{"consumer": streams.ConsumerResolver}); v != 0 {
		t.Errorf("resolver pending = %v after the pipeline went idle, want 0", v)
	}
	// Rate limiter: budget used per budget, grants.
	positive("riftflow_ratelimit_budget_used", map[string]string{"method": "app"})
	positive("riftflow_ratelimit_granted_total", nil)
	// 429s by X-Rate-Limit-Type; the simulator's "service" 429s carry no
	// header, which the limiter counts as type "none".
	positive("riftflow_ratelimit_429_total", map[string]string{"type": "none"})
	for _, s := range samples {
		if s.name == "riftflow_ratelimit_429_total" && (s.labels["type"] == "" || s.labels["route"] == "") {
			t.Errorf("429 sample without type or route: %v", s.labels)
		}
	}
	// Persister: batch latency and size; the sync's duration.
	positive("riftflow_persist_batch_duration_seconds_count", map[string]string{"result": "ok"})
	positive("riftflow_persist_batch_size_count", nil)
	positive("riftflow_persist_batch_size_sum", nil)
	positive("riftflow_sync_duration_seconds_count", map[string]string{"status": "completed"})
	// Postgres pool (otelpgx) and Riot client.
	positive("riot_client_requests_total", nil)
}
