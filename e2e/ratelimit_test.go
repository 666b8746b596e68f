package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/connect"
	"github.com/riftflow/riftflow/pkg/ratelimit"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/riotclient"
	matchfetcher "github.com/riftflow/riftflow/services/match-fetcher"
	"github.com/riftflow/riftflow/services/riftflow"
	"github.com/riftflow/riftflow/services/riftflow/stack/stacktest"
	"github.com/riftflow/riftflow/streams"
)

// Pipeline-level rate-limit tests. Each runs the pipeline
// in-process (harness, services started here without the stack's own
// fetcher) plus N match-fetcher "processes": in-process instances, each
// with its own NATS connection, its own Riot client and its own limiter
// (ratelimit.Shared through riotclient.New, sharing the key via the KV bucket
// as separate pods would).

// fetcherProc is one match-fetcher instance.
type fetcherProc struct {
	lim   riot.Limiter
	stats *riotclient.Stats
}

// limiterMode is how fetcher instances limit: shared (one budget through
// KV), local (each its own Local limiter, believing it owns the key) or
// split (each a Local with a fixed 1/N of every limit).
type limiterMode string

const (
	modeShared limiterMode = "shared"
	modeLocal  limiterMode = "local"
	modeSplit  limiterMode = "split"
)

// pipeline is a harness running every service but the fetcher, plus n
// fetcher instances.
type pipeline struct {
	h     *stacktest.Harness
	procs []*fetcherProc
	logs  *stagetest.Logs
}

type pipelineOptions struct {
	sim         sim.Options
	fetchers    int
	mode        limiterMode
	concurrency int // per region per fetcher (default 16)
	regions     []string
}

func startPipeline(t testing.TB, o pipelineOptions) *pipeline {
	t.Helper()
	h := stacktest.Start(t, stacktest.Options{Sim: o.sim, NoRun: true, Env: map[string]string{"LOG_LEVEL": "info"}})
	p := &pipeline{h: h, logs: &stagetest.Logs{}}
	ctx, cancel := context.WithCancel(h.Ctx)
	var wg sync.WaitGroup
	run := func(name string, f func(context.Context) error) {
		wg.Go(func() {
			if err := f(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
	for _, s := range h.St.Services {
		if _, isFetcher := s.(*matchfetcher.Service); isFetcher {
			continue
		}
		run(fmt.Sprintf("%T", s), s.Run)
	}
	log := stacktest.Logger(t, p.logs)
	env := h.St.Infra.Env
	if o.concurrency <= 0 {
		o.concurrency = 16
	}
	if len(o.regions) == 0 {
		o.regions = []string{"americas", "asia", "europe", "sea"}
	}
	var closers []func()
	for i := range o.fetchers {
		name := fmt.Sprintf("match-fetcher-%d", i)
		plog := log.With("proc", name)
		nc, js, err := connect.NATS(ctx, h.St.NATSConfig(streams.UserMatchFetcher), h.St.InProcess(), name, plog)
		if err != nil {
			t.Fatal(err)
		}
		fp := &fetcherProc{}
		var client *riot.Client
		switch o.mode {
		case modeSplit:
			fp.lim = ratelimit.NewLocal(ratelimit.Options{MaxWait: env.Riot.RateLimitMaxWait, Logger: plog, LimitShare: 1 / float64(o.fetchers)})
			fp.stats = &riotclient.Stats{}
			client, err = riot.New(riot.Config{APIKey: env.Riot.APIKey.Reveal(), BaseURL: env.Riot.BaseURL, Timeout: env.Riot.Timeout(),
				Limiter: fp.lim, Logger: plog})
		default:
			cfg := env.Riot
			cfg.SharedRateLimit = o.mode != modeLocal
			client, fp.lim, fp.stats, err = riotclient.New(ctx, cfg, js, plog)
		}
		if err != nil {
			t.Fatal(err)
		}
		if sh, ok := fp.lim.(*ratelimit.Shared); ok {
			closers = append(closers, sh.Close)
		}
		closers = append(closers, nc.Close)
		cons := map[string]jetstream.Consumer{}
		for _, r := range o.regions {
			c, err := js.Consumer(ctx, streams.StreamFetch, streams.FetcherConsumer(r))
			if err != nil {
				t.Fatal(err)
			}
			cons[r] = c
		}
		svc, err := matchfetcher.New(matchfetcher.Config{Backoff: []time.Duration{time.Second}, Concurrency: o.concurrency},
			matchfetcher.Deps{JS: js, Consumers: cons, Riot: client, Base: app.Base{Subjects: h.St.Infra.Subjects, Logger: plog}})
		if err != nil {
			t.Fatal(err)
		}
		run(name, svc.Run)
		p.procs = append(p.procs, fp)
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	})
	return p
}

// backlog publishes one background FetchCommand per match ID.
func (p *pipeline) backlog(t testing.TB, ids []string, prio bus.Priority) {
	t.Helper()
	js := p.h.St.Infra.JS
	for _, id := range ids {
		_, r, err := riot.ParseMatchID(id)
		if err != nil {
			t.Fatal(err)
		}
		data := mustJSON(bus.FetchCommand{MatchID: id, Kind: bus.KindMatch, Region: string(r), Attempt: 1, Priority: prio, RequestID: "backlog"})
		if _, err := js.PublishAsync(p.h.St.Infra.Subjects.Fetch(string(r)), data, jetstream.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("backlog publish did not complete")
	}
}

// syntheticIDs are the match IDs of sim.Synthetic{Players: players,
// MatchesPerPlayer: per} on na1.
func syntheticIDs(players, per int) []string {
	var ids []string
	for i := range players * per {
		ids = append(ids, fmt.Sprintf("NA1_%d", sim.SyntheticGameIDBase+i))
	}
	return ids
}

// routeRequests is the number of requests the sim answered on route.
func routeRequests(st sim.Stats, route string) int64 {
	var n int64
	for _, byStatus := range st.Requests[route] {
		for _, c := range byStatus {
			n += c
		}
	}
	return n
}

func statusCount(st sim.Stats, status string) int64 {
	var n int64
	for _, ms := range st.Requests {
		for _, byStatus := range ms {
			n += byStatus[status]
		}
	}
	return n
}

func waitUntil(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	defer func() { t.Logf("waited %v for %s", time.Since(start).Round(time.Millisecond), what) }()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tightLimits are a development-key-like app limit and method limits below
// it, so both scopes bind.
var tightLimits = sim.RateLimits{App: "20:1,300:60", Method: map[string]string{sim.MethodMatch: "12:1", sim.MethodTimeline: "12:1"}}

// TestSharedKeyNoViolations: two fetchers sharing one key work a backlog;
// the simulator records no application or method violation and no window
// ever counted more than its limit.
func TestSharedKeyNoViolations(t *testing.T) {
	p := startPipeline(t, pipelineOptions{fetchers: 2, mode: modeShared,
		sim: sim.Options{Limits: tightLimits, Synthetic: sim.Synthetic{Players: 1, MatchesPerPlayer: 600}}})
	p.backlog(t, syntheticIDs(1, 600), bus.Background)
	s := p.h.St.Sim
	// Work until well past the first 1 s windows and the limits being learned.
	waitUntil(t, 20*time.Second, "150 requests on americas", func() bool { return routeRequests(s.Stats(), "americas") >= 150 })
	st := s.Stats()
	if st.Violations != 0 || st.RateLimited["application"] != 0 || st.RateLimited["method"] != 0 {
		t.Errorf("violations %d, 429s by type %v, want none", st.Violations, st.RateLimited)
	}
	for _, b := range st.Buckets {
		if b.MaxCount > b.Limit {
			t.Errorf("bucket %s %q %ds: max count %d > limit %d", b.Route, b.Method, b.WindowSeconds, b.MaxCount, b.Limit)
		}
	}
	for i, fp := range p.procs {
		if fp.stats.Requests.Load() == 0 {
			t.Errorf("fetcher %d sent no request: the key was not shared", i)
		}
	}
	if n := st.MethodCount(sim.MethodMatch, 200); n < 50 {
		t.Errorf("only %d matches fetched", n)
	}
	t.Logf("americas requests %d (fetcher 0: %d, fetcher 1: %d), buckets %+v", routeRequests(st, "americas"),
		p.procs[0].stats.Requests.Load(), p.procs[1].stats.Requests.Load(), st.Buckets)
	for i, fp := range p.procs {
		t.Logf("fetcher %d limiter counters %+v", i, fp.lim.(*ratelimit.Shared).Counters())
	}
}

// TestKeyRejectedStopsEveryCaller: a rogue user of the key gets it
// blacklisted; the first two 403s in a row from match-v5 stop every call
// with the key in both fetchers (and the rest of the pipeline), log an
// error, count a metric, and `riftflow status --ratelimit` shows it with
// its probes and how to clear it.
func TestKeyRejectedStopsEveryCaller(t *testing.T) {
	p := startPipeline(t, pipelineOptions{fetchers: 2, mode: modeShared,
		sim: sim.Options{Limits: tightLimits, Synthetic: sim.Synthetic{Players: 1, MatchesPerPlayer: 600},
			Blacklist: sim.Blacklist{Violations: 3, Duration: time.Hour}}})
	p.backlog(t, syntheticIDs(1, 600), bus.Background)
	s := p.h.St.Sim
	waitUntil(t, 15*time.Second, "40 requests on americas", func() bool { return routeRequests(s.Stats(), "americas") >= 40 })

	// The rogue: another program with the same key that ignores limits.
	env := p.h.St.Infra.Env.Riot
	url := strings.Replace(env.BaseURL, "{route}", "americas", 1) + "/lol/match/v5/matches/NA1_" + fmt.Sprint(sim.SyntheticGameIDBase)
	rogue := 0
	for !s.Stats().Blacklisted {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("X-Riot-Token", env.APIKey.Reveal())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		rogue++
		if rogue > 500 {
			t.Fatal("the sim did not blacklist the key")
		}
	}
	st0 := s.Stats()
	forbidden0 := statusCount(st0, "403")
	waitUntil(t, 15*time.Second, "every limiter to refuse the key", func() bool {
		for _, fp := range p.procs {
			if rej, _ := fp.lim.(*ratelimit.Shared).KeyRejected(); !rej {
				return false
			}
		}
		rej, _ := p.h.St.Infra.Limiter.(*ratelimit.Shared).KeyRejected()
		return rej
	})
	time.Sleep(500 * time.Millisecond) // requests already on the wire land
	st1 := s.Stats()
	time.Sleep(3 * time.Second)
	st2 := s.Stats()
	if st2.Total != st1.Total {
		t.Errorf("%d requests reached the sim after every limiter refused the key", st2.Total-st1.Total)
	}
	// At most the requests in flight when the first 403 came back were
	// answered 403: 2 fetchers × 16 per region, and never a storm.
	if n := statusCount(st2, "403") - forbidden0; n > 32 {
		t.Errorf("%d requests answered 403 after the blacklisting: the key was hammered", n)
	}
	t.Logf("rogue sent %d requests; 403s after blacklisting: %d; total requests %d", rogue, statusCount(st2, "403")-forbidden0, st2.Total)

	if logs := p.logs.String(); !strings.Contains(logs, "level=ERROR") || !strings.Contains(logs, "rejected") {
		t.Errorf("no error-level log line about the rejected key:\n%s", tail(logs, 2000))
	}
	if total, _ := opsSum(scrapeOps(t, p.h.St.Infra.Ops.Handler()), "riftflow_ratelimit_key_rejected_total", map[string]string{"status": "403"}); total < 1 {
		t.Errorf("/metrics: riftflow_ratelimit_key_rejected_total{status=\"403\"} = %v, want at least 1", total)
	}
	var out bytes.Buffer
	if err := riftflow.PrintRateLimit(p.h.Ctx, p.h.St.Infra.JS, riotclient.KeyID(env.APIKey.Reveal()), &out, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "KEY REJECTED") || !strings.Contains(out.String(), "Riot answered 403") ||
		!strings.Contains(out.String(), "probe") || !strings.Contains(out.String(), "riftflow clear-key-rejection") {
		t.Errorf("status does not show the rejection:\n%s", out.String())
	}
	t.Logf("riftflow status --ratelimit:\n%s", out.String())
}

// TestLongWaitDoesNotStall: asia's application budget is
// paused by a 429 with a 30 s Retry-After (another user of the key used
// it up). Americas keeps fetching; asia's fetches are rescheduled as
// message schedules, so they hold no MaxAckPending slot, and none reaches
// the sim before the pause ends.
func TestLongWaitDoesNotStall(t *testing.T) {
	p := startPipeline(t, pipelineOptions{fetchers: 2, mode: modeShared,
		sim: sim.Options{Limits: sim.RateLimits{App: "20:1,300:60", AppByRoute: map[string]string{"asia": "5:30"}},
			Synthetic: sim.Synthetic{Players: 1, MatchesPerPlayer: 400}}})
	s := p.h.St.Sim
	env := p.h.St.Infra.Env.Riot
	// Another user of the key spends asia's 30 s budget.
	var asiaIDs []string
	for _, pl := range s.Truth().Players {
		for _, m := range pl.Matches {
			if strings.HasPrefix(m.ID, "JP1_") && !slices.Contains(asiaIDs, m.ID) {
				asiaIDs = append(asiaIDs, m.ID)
			}
		}
	}
	if len(asiaIDs) < 10 {
		t.Skipf("only %d recorded JP1 matches (fixtures missing)", len(asiaIDs))
	}
	for range 5 {
		req, _ := http.NewRequest(http.MethodGet, strings.Replace(env.BaseURL, "{route}", "asia", 1)+"/lol/match/v5/matches/"+asiaIDs[0], nil)
		req.Header.Set("X-Riot-Token", env.APIKey.Reveal())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	asia0 := routeRequests(s.Stats(), "asia")
	p.backlog(t, asiaIDs, bus.Background)
	p.backlog(t, syntheticIDs(1, 400), bus.Background)

	js := p.h.St.Infra.JS
	asiaCons, err := js.Consumer(p.h.Ctx, streams.StreamFetch, streams.FetcherConsumer("asia"))
	if err != nil {
		t.Fatal(err)
	}
	fetchStream, err := js.Stream(p.h.Ctx, streams.StreamFetch)
	if err != nil {
		t.Fatal(err)
	}
	retrySubj := p.h.St.Infra.Subjects.FetchRetry("asia", "*")
	maxAckPending := 0
	scheduled := func() int {
		info, err := fetchStream.Info(p.h.Ctx, jetstream.WithSubjectFilter(retrySubj))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, c := range info.State.Subjects {
			n += int(c)
		}
		return n
	}
	// Every asia fetch ends up rescheduled, while americas keeps storing.
	waitUntil(t, 20*time.Second, "every asia fetch rescheduled and 30 americas matches stored", func() bool {
		info, err := asiaCons.Info(p.h.Ctx)
		if err != nil {
			t.Fatal(err)
		}
		maxAckPending = max(maxAckPending, info.NumAckPending)
		return scheduled() >= len(asiaIDs) && info.NumPending == 0 && info.NumAckPending == 0 &&
			p.h.Count(`SELECT count(*) FROM matches WHERE match_id LIKE 'NA1_9%'`) >= 30
	})
	st := s.Stats()
	// Before its first response a process knows no limits and sends one
	// probe (the conservative start): at most one request per fetcher
	// process reaches the spent budget, and the 429 it gets pauses the route
	// for every process.
	probes := len(p.procs)
	if got := routeRequests(st, "asia") - asia0; got > int64(probes) {
		t.Errorf("%d asia requests reached the sim during the pause (want at most %d, one probe per process)", got, probes)
	}
	if st.RateLimited["application"] > int64(probes) {
		t.Errorf("%d application 429s, want at most %d", st.RateLimited["application"], probes)
	}
	var paused bool
	for _, fp := range p.procs {
		for _, b := range fp.lim.(*ratelimit.Shared).Snapshot() {
			if b.Route == "asia" && b.Method == "app" && time.Until(b.PausedUntil) > 5*time.Second {
				paused = true
			}
		}
	}
	if !paused {
		t.Error("asia is not paused in the fetchers' limiters: the test did not exercise a long wait")
	}
	// Concurrency 16 × 2 fetchers could hold 32 slots; rescheduled fetches
	// hold none once acked.
	if maxAckPending > 32 {
		t.Errorf("asia consumer held %d ack-pending messages", maxAckPending)
	}
	t.Logf("asia: %d fetches rescheduled, max ack pending seen %d; americas matches stored %d; sim 429s %v",
		scheduled(), maxAckPending, p.h.Count(`SELECT count(*) FROM matches WHERE match_id LIKE 'NA1_9%'`), st.RateLimited)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
