package riftflow

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/connect"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/services/riftflow/stack"
	"github.com/riftflow/riftflow/streams"
)

func TestMain(m *testing.M) { pgtest.Main(m, printChaosTable) }

// harness runs the whole pipeline in-process on a fresh database, an
// in-process embedded NATS server with memory streams, and the simulator.
type harness struct {
	t      testing.TB
	st     *stack.Stack
	db     *pgxpool.Pool // the test's own pool on the stack's database (pgtest.Pool)
	ctx    context.Context
	cancel context.CancelFunc
	done   chan error
	logs   *stagetest.Logs // what the services logged
	plan   []stack.Phase   // with harnessOptions.demo
}

type harnessOptions struct {
	sim   sim.Options
	env   map[string]string // extra environment (FETCH_BACKOFF, ...)
	now   func() time.Time
	noRun bool
	demo  bool // set the stack up as riftflow up --demo does (stack.SimDemo)
}

// fastEnv compresses every retry schedule so fault tests run in seconds.
var fastEnv = map[string]string{
	"FETCH_BACKOFF":     "1s,1s,1s,1s",
	"SWEEP_INTERVAL":    "1h",
	"SWEEP_STALE_AFTER": "10m",
	"PERSIST_MAX_WAIT":  "50ms",
	"SHUTDOWN_TIMEOUT":  "10s",
	"LOG_LEVEL":         "debug",
}

func startHarness(t testing.TB, o harnessOptions) *harness {
	t.Helper()
	if testing.Short() {
		t.Skip("in-process pipeline (NATS, Postgres, simulator, every stage): skipped under -short")
	}
	for k, v := range fastEnv {
		if _, set := o.env[k]; !set {
			t.Setenv(k, v)
		}
	}
	for k, v := range o.env {
		t.Setenv(k, v)
	}
	t.Setenv("NATS_URL", "")
	t.Setenv("RIOT_API_KEY", "")
	t.Setenv("DATABASE_URL", "")
	env, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	dbURL := pgtest.NewDatabase(t)
	env.Postgres.URL = config.Secret(dbURL)
	db := pgtest.Pool(t, dbURL)
	logs := &stagetest.Logs{}
	log := testLogger(t, logs)
	if o.sim.FixturesDir == "" {
		o.sim.FixturesDir = sim.FindFixtures()
		if o.sim.FixturesDir == "" && os.Getenv("CI") == "true" {
			t.Fatal("CI: testdata/riot-fixtures not found")
		}
	}
	if o.sim.Limits.App == "" {
		o.sim.Limits.App = "500:10,30000:600"
	}
	ctx, cancel := context.WithCancel(context.Background())
	so := stack.Options{DataDir: t.TempDir(), Env: env, NATSPort: -1, Sim: o.sim, MemoryStreams: true, Now: o.now, Log: log}
	var plan []stack.Phase
	if o.demo {
		if plan, err = stack.SimDemo(&so); err != nil {
			cancel()
			t.Fatal(err)
		}
	}
	st, err := stack.Start(ctx, so)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	h := &harness{t: t, st: st, db: db, ctx: ctx, cancel: cancel, done: make(chan error, 1), logs: logs, plan: plan}
	t.Cleanup(h.stop)
	// Tests inspect and manipulate streams (purges, consumer info, forged
	// messages) through st.Infra, so it connects as the admin user; the
	// five services keep their own users (TestNATSPermissions covers the
	// CLI/API user).
	nc, js, err := connect.NATS(ctx, st.NATSConfig(streams.UserAdmin), st.NATS, "test-admin", log)
	if err != nil {
		t.Fatal(err)
	}
	st.OnClose(nc.Close)
	st.Infra.NC, st.Infra.JS = nc, js
	if !o.noRun {
		go func() { h.done <- st.Run(ctx) }()
	} else {
		h.done <- nil
	}
	return h
}

// testWriter writes each log line to the test's log under -v
// (stagetest.TestLog).
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) { return stagetest.TestLog{T: w.t}.Write(p) }

// testLogger logs at info level to logs and, under -v, to the test's log.
func testLogger(t testing.TB, logs io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(io.MultiWriter(logs, testWriter{t}), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func (h *harness) stop() {
	if h.st == nil {
		return
	}
	h.cancel()
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("services returned: %v", err)
		}
	case <-time.After(45 * time.Second):
		// Runners return within ~21 s of cancellation (FetchWait 5 s +
		// natsx.DefaultDrainTimeout 15 s + 1 s); 45 s leaves room for a
		// loaded 2-core machine.
		h.t.Error("services did not drain within 45s")
	}
	h.st.Close()
	h.st = nil
}

// ingest publishes req and waits for its sync to end.
func (h *harness) ingest(req bus.IngestRequest, timeout time.Duration) (bus.ProgressEvent, error) {
	h.t.Helper()
	if req.RequestID == "" {
		req.RequestID = "t-" + randHex(6)
	}
	if req.Trigger == "" {
		req.Trigger = "test"
	}
	ctx, cancel := context.WithTimeout(h.ctx, timeout)
	defer cancel()
	return stack.IngestAndWait(ctx, h.st.Infra.NC, h.st.Infra.Subjects, req, io.Discard)
}

func (h *harness) demo() sim.Player {
	h.t.Helper()
	p, ok := h.st.Sim.DemoPlayer()
	if !ok {
		h.t.Fatal("no demo player")
	}
	return p
}

// count runs a count(*)-style query.
func (h *harness) count(sql string, args ...any) int {
	h.t.Helper()
	var n int
	if err := h.db.QueryRow(h.ctx, sql, args...).Scan(&n); err != nil {
		h.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// fingerprint is an md5 over every row of the data tables, to prove that a
// replay changed nothing.
func (h *harness) fingerprint() string {
	h.t.Helper()
	var parts []string
	for _, q := range []string{
		`SELECT md5(string_agg(t::text, '|' ORDER BY match_id)) FROM matches t`,
		`SELECT md5(string_agg(t::text, '|' ORDER BY match_id, participant_id)) FROM match_participants t`,
		`SELECT md5(string_agg(t::text, '|' ORDER BY match_id)) FROM match_timelines t`,
		`SELECT md5(string_agg(t::text, '|' ORDER BY match_id, kind)) FROM match_fetches t`,
	} {
		var s *string
		if err := h.db.QueryRow(h.ctx, q).Scan(&s); err != nil {
			h.t.Fatal(err)
		}
		if s == nil {
			parts = append(parts, "-")
		} else {
			parts = append(parts, *s)
		}
	}
	return strings.Join(parts, ",")
}

// ledger returns match_fetches status by "match_id/kind".
func (h *harness) ledger() map[string]string {
	h.t.Helper()
	rows, _ := h.db.Query(h.ctx, `SELECT match_id || '/' || kind, status FROM match_fetches`)
	out := map[string]string{}
	var k, v string
	if _, err := pgx.ForEachRow(rows, []any{&k, &v}, func() error { out[k] = v; return nil }); err != nil {
		h.t.Fatal(err)
	}
	return out
}

// waitIdle waits until every consumer has nothing pending or in flight.
func (h *harness) waitIdle(timeout time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		busy := false
		for _, c := range []struct{ stream, name string }{
			{streams.StreamIngest, streams.ConsumerResolver}, {streams.StreamSync, streams.ConsumerMatchIDLister},
			{streams.StreamFetched, streams.ConsumerPersister},
			{streams.StreamIngest, streams.ConsumerResolverBackground}, {streams.StreamSync, streams.ConsumerMatchIDListerInteractive},
			{streams.StreamFetched, streams.ConsumerPersisterInteractive},
			{streams.StreamFetch, streams.FetcherConsumer("americas")}, {streams.StreamFetch, streams.FetcherConsumer("asia")},
			{streams.StreamFetch, streams.FetcherConsumer("europe")}, {streams.StreamFetch, streams.FetcherConsumer("sea")},
			{streams.StreamFetch, streams.InteractiveFetcherConsumer("americas")}, {streams.StreamFetch, streams.InteractiveFetcherConsumer("asia")},
			{streams.StreamFetch, streams.InteractiveFetcherConsumer("europe")}, {streams.StreamFetch, streams.InteractiveFetcherConsumer("sea")},
		} {
			cons, err := h.st.Infra.JS.Consumer(h.ctx, c.stream, c.name)
			if err != nil {
				h.t.Fatal(err)
			}
			info, err := cons.Info(h.ctx)
			if err != nil {
				h.t.Fatal(err)
			}
			if info.NumPending > 0 || info.NumAckPending > 0 {
				busy = true
			}
		}
		if !busy {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	h.t.Fatal("pipeline not idle")
}

// capture records every message on subjects until stop is called.
func (h *harness) capture(subjects ...string) (msgs func() []*nats.Msg, stop func()) {
	ch := make(chan *nats.Msg, 1<<16)
	var subs []*nats.Subscription
	for _, s := range subjects {
		sub, err := h.st.Infra.NC.ChanSubscribe(s, ch)
		if err != nil {
			h.t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	var got []*nats.Msg
	return func() []*nats.Msg {
			for {
				select {
				case m := <-ch:
					got = append(got, m)
				default:
					return got
				}
			}
		}, func() {
			for _, s := range subs {
				s.Unsubscribe()
			}
		}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// wantAnswers checks how many answers of each status (want) the simulator
// gave to method.
func (h *harness) wantAnswers(method string, want map[int]int64) {
	h.t.Helper()
	st := h.st.Sim.Stats()
	for status, n := range want {
		if got := st.MethodCount(method, status); got != n {
			h.t.Errorf("%s %ds = %d, want %d", method, status, got, n)
		}
	}
}

// offsetClock is a clock the test moves: real time plus an offset.
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) Now() time.Time            { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *offsetClock) Set(d time.Duration)       { c.off.Store(int64(d)) }
func (c *offsetClock) Offset() (d time.Duration) { return time.Duration(c.off.Load()) }

// slowTimelines keeps every sync running for a while (each timeline fetch
// waits d), so concurrent triggers really overlap the running sync.
func slowTimelines(d time.Duration) sim.Faults {
	return sim.Faults{Slow: 1, SlowDelay: d, Methods: []string{sim.MethodTimeline}}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func publishReq(t *testing.T, h *harness, req bus.IngestRequest) {
	t.Helper()
	if err := req.Normalize(); err != nil {
		t.Fatal(err)
	}
	if err := stack.PublishIngest(h.ctx, h.st.Infra.NC, h.st.Infra.Subjects, req); err != nil {
		t.Fatal(err)
	}
}

// synthHarness is a harness with the scheduler off on the simulator's
// synthetic players (matches each), and synthetic player i of them.
func synthHarness(t *testing.T, players, matches, i int) (*harness, sim.PlayerTruth) {
	t.Helper()
	h := startHarness(t, harnessOptions{env: map[string]string{"SCHEDULE_ENABLE": "false"},
		sim: sim.Options{Synthetic: sim.Synthetic{Players: players, MatchesPerPlayer: matches}}})
	return h, synthPlayer(t, h, i)
}

// syncedHarness is synthHarness with one player of matches matches, synced
// in full by Riot ID (every match stored), the pipeline idle again.
func syncedHarness(t *testing.T, matches int) (*harness, sim.PlayerTruth) {
	t.Helper()
	h, p := synthHarness(t, 1, matches, 1)
	ev, err := h.ingest(bus.IngestRequest{RiotID: sim.SyntheticRiotID(1).String(), Platform: "na1", Mode: bus.ModeFull, LookbackDays: 30}, 2*time.Minute)
	if err != nil || ev.Status != "completed" || ev.Total != matches {
		t.Fatalf("sync: %+v %v, want completed with %d matches", ev, err, matches)
	}
	h.waitIdle(20 * time.Second)
	return h, p
}

func synthPlayer(t *testing.T, h *harness, i int) sim.PlayerTruth {
	t.Helper()
	p, ok := h.st.Sim.Truth().Players[sim.SyntheticPUUID("na1", i)]
	if !ok {
		t.Fatalf("no synthetic player %d", i)
	}
	return p
}

// richestPlayer is the recorded player with a Riot ID and the most matches
// inside the listing window of lookbackDays.
func richestPlayer(t *testing.T, h *harness, lookbackDays int) (sim.PlayerTruth, []sim.MatchTruth) {
	t.Helper()
	truth := h.st.Sim.Truth()
	cutoff := truth.Now - int64(lookbackDays)*24*3600*1000
	var best sim.PlayerTruth
	var bestM []sim.MatchTruth
	ids := make([]string, 0, len(truth.Players))
	for id := range truth.Players {
		ids = append(ids, id)
	}
	sort.Strings(ids) // deterministic choice among equals
	for _, id := range ids {
		p := truth.Players[id]
		if p.GameName == "" || p.TagLine == "" || p.Platform == "" || strings.HasPrefix(p.GameName, "Synth") {
			continue
		}
		var in []sim.MatchTruth
		for _, m := range p.Matches {
			if m.GameCreation >= cutoff {
				in = append(in, m)
			}
		}
		if len(in) > len(bestM) {
			best, bestM = p, in
		}
	}
	if len(bestM) == 0 {
		t.Fatal("no recorded player has matches in the window")
	}
	return best, bestM
}

func idsOf(ms []sim.MatchTruth) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// dbDown is a copy of h's Infra on a database that is down: a closed
// store.
func (h *harness) dbDown() *stack.Infra {
	h.t.Helper()
	down, err := store.Open(h.ctx, pgtest.NewDatabase(h.t))
	if err != nil {
		h.t.Fatal(err)
	}
	down.Close()
	inf := *h.st.Infra
	inf.Store = down
	return &inf
}
