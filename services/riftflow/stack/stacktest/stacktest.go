// Package stacktest runs the whole pipeline in a test as `riftflow up`
// runs it (package stack): a fresh migrated database (internal/pgtest), an
// in-process embedded NATS server with memory streams, the Riot API
// simulator and the five services, in the test process (Start), with
// what the tests of the CLI, the HTTP API (APIServer) and the pipeline
// end to end (e2e/) drive and inspect it with. Only _test.go files import
// it (it imports package testing); a test binary that uses it calls
// pgtest.Main from its TestMain.
package stacktest

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/internal/testenv"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/connect"
	"github.com/riftflow/riftflow/services/riftflow/api"
	"github.com/riftflow/riftflow/services/riftflow/api/apitest"
	"github.com/riftflow/riftflow/services/riftflow/stack"
	"github.com/riftflow/riftflow/streams"
)

// Harness is the whole pipeline running in-process on a fresh database,
// an in-process embedded NATS server with memory streams, and the
// simulator; it stops when the test ends.
type Harness struct {
	T  testing.TB
	St *stack.Stack  // St.Infra is connected as the NATS admin user
	DB *pgxpool.Pool // the test's own pool on the stack's database (pgtest.Pool)
	// Ctx ends when the test ends; the services run under it.
	Ctx context.Context
	// Done receives what the services' Run returned (nil at once with
	// Options.NoRun); a test that reads it puts it back for the cleanup.
	Done chan error
	Logs *stagetest.Logs // what the services logged
	Plan []stack.Phase   // with Options.Demo

	cancel context.CancelFunc
}

// Options says how Start sets the stack up.
type Options struct {
	Sim   sim.Options
	Env   map[string]string // extra environment (FETCH_BACKOFF, ...), over FastEnv
	Now   func() time.Time  // the services' clock (stack.Options.Now)
	NoRun bool              // start everything but do not run the services
	Demo  bool              // set the stack up as riftflow up --demo does (stack.SimDemo)
}

// FastEnv compresses every retry schedule so fault tests run in seconds.
var FastEnv = map[string]string{
	"FETCH_BACKOFF":     "1s,1s,1s,1s",
	"SWEEP_INTERVAL":    "1h",
	"SWEEP_STALE_AFTER": "10m",
	"PERSIST_MAX_WAIT":  "50ms",
	"SHUTDOWN_TIMEOUT":  "10s",
	"LOG_LEVEL":         "debug",
}

// Start starts the stack on a fresh database and, unless o.NoRun, runs
// its services; skipped under -short.
func Start(t testing.TB, o Options) *Harness {
	t.Helper()
	testenv.SkipShort(t, "in-process pipeline (NATS, Postgres, simulator, every stage)")
	for k, v := range FastEnv {
		if _, set := o.Env[k]; !set {
			t.Setenv(k, v)
		}
	}
	for k, v := range o.Env {
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
	log := Logger(t, logs)
	if o.Sim.FixturesDir == "" {
		o.Sim.FixturesDir = sim.FindFixtures()
		if o.Sim.FixturesDir == "" && os.Getenv("CI") == "true" {
			t.Fatal("CI: testdata/riot-fixtures not found")
		}
	}
	if o.Sim.Limits.App == "" {
		o.Sim.Limits.App = "500:10,30000:600"
	}
	ctx, cancel := context.WithCancel(context.Background())
	so := stack.Options{DataDir: t.TempDir(), Env: env, NATSPort: -1, Sim: o.Sim, MemoryStreams: true, Now: o.Now, Log: log}
	var plan []stack.Phase
	if o.Demo {
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
	h := &Harness{T: t, St: st, DB: db, Ctx: ctx, cancel: cancel, Done: make(chan error, 1), Logs: logs, Plan: plan}
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
	if !o.NoRun {
		go func() { h.Done <- st.Run(ctx) }()
	} else {
		h.Done <- nil
	}
	return h
}

// Logger logs at info level to logs and, under -v, to the test's log
// (stagetest.Writer).
func Logger(t testing.TB, logs io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(io.MultiWriter(logs, stagetest.Writer(t)), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func (h *Harness) stop() {
	if h.St == nil {
		return
	}
	h.cancel()
	select {
	case err := <-h.Done:
		if err != nil {
			h.T.Errorf("services returned: %v", err)
		}
	case <-time.After(45 * time.Second):
		// Runners return within ~21 s of cancellation (FetchWait 5 s +
		// natsx.DefaultDrainTimeout 15 s + 1 s); 45 s leaves room for a
		// loaded 2-core machine.
		h.T.Error("services did not drain within 45s")
	}
	h.St.Close()
	h.St = nil
}

// Ingest publishes req (a generated request id and trigger "test" unless
// set) and waits up to timeout for its sync to end (stack.IngestAndWait).
func (h *Harness) Ingest(req bus.IngestRequest, timeout time.Duration) (bus.ProgressEvent, error) {
	h.T.Helper()
	if req.RequestID == "" {
		req.RequestID = "t-" + stack.RandHex(6)
	}
	if req.Trigger == "" {
		req.Trigger = "test"
	}
	ctx, cancel := context.WithTimeout(h.Ctx, timeout)
	defer cancel()
	return stack.IngestAndWait(ctx, h.St.Infra.NC, h.St.Infra.Subjects, req, io.Discard)
}

// Demo is the simulator's demo player.
func (h *Harness) Demo() sim.Player {
	h.T.Helper()
	p, ok := h.St.Sim.DemoPlayer()
	if !ok {
		h.T.Fatal("no demo player")
	}
	return p
}

// Count runs a count(*)-style query.
func (h *Harness) Count(sql string, args ...any) int {
	h.T.Helper()
	var n int
	if err := h.DB.QueryRow(h.Ctx, sql, args...).Scan(&n); err != nil {
		h.T.Fatalf("%s: %v", sql, err)
	}
	return n
}

// WaitIdle waits until every consumer has nothing pending or in flight.
func (h *Harness) WaitIdle(timeout time.Duration) {
	h.T.Helper()
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
			cons, err := h.St.Infra.JS.Consumer(h.Ctx, c.stream, c.name)
			if err != nil {
				h.T.Fatal(err)
			}
			info, err := cons.Info(h.Ctx)
			if err != nil {
				h.T.Fatal(err)
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
	h.T.Fatal("pipeline not idle")
}

// WaitFor polls cond until it holds or the deadline passes.
func WaitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// Synthetic is a harness with the scheduler off on the simulator's
// synthetic players (matches each), and synthetic player i of them.
func Synthetic(t *testing.T, players, matches, i int) (*Harness, sim.PlayerTruth) {
	t.Helper()
	h := Start(t, Options{Env: map[string]string{"SCHEDULE_ENABLE": "false"},
		Sim: sim.Options{Synthetic: sim.Synthetic{Players: players, MatchesPerPlayer: matches}}})
	return h, SynthPlayer(t, h, i)
}

// Synced is Synthetic with one player of matches matches, synced in full
// by Riot ID (every match stored), the pipeline idle again.
func Synced(t *testing.T, matches int) (*Harness, sim.PlayerTruth) {
	t.Helper()
	h, p := Synthetic(t, 1, matches, 1)
	ev, err := h.Ingest(bus.IngestRequest{RiotID: sim.SyntheticRiotID(1).String(), Platform: "na1", Mode: bus.ModeFull, LookbackDays: 30}, 2*time.Minute)
	if err != nil || ev.Status != "completed" || ev.Total != matches {
		t.Fatalf("sync: %+v %v, want completed with %d matches", ev, err, matches)
	}
	h.WaitIdle(20 * time.Second)
	return h, p
}

// SynthPlayer is the simulator's synthetic player i on na1.
func SynthPlayer(t *testing.T, h *Harness, i int) sim.PlayerTruth {
	t.Helper()
	p, ok := h.St.Sim.Truth().Players[sim.SyntheticPUUID("na1", i)]
	if !ok {
		t.Fatalf("no synthetic player %d", i)
	}
	return p
}

// NewAPI is the HTTP API over inf, as `riftflow up` and `riftflow serve`
// build it.
func NewAPI(inf *stack.Infra) *api.API { return api.New(inf.Process, inf.Store) }

// NewToken creates an API token named name with scopes in inf's store and
// returns its secret and its row, or fails the test.
func NewToken(t testing.TB, inf *stack.Infra, name string, scopes ...api.Scope) (string, api.APIToken) {
	t.Helper()
	return apitest.NewToken(t, api.NewTokens(inf.Store), name, scopes...)
}

// WithToken serves h with a fresh token of scope (apitest.WithToken).
func WithToken(t testing.TB, inf *stack.Infra, h http.Handler, scope api.Scope) http.Handler {
	t.Helper()
	token, _ := NewToken(t, inf, "test "+t.Name(), scope)
	return apitest.WithToken(h, token)
}

// APIServer serves the HTTP API on inf until the test ends, every request
// with a token of scope (WithToken).
func APIServer(t *testing.T, inf *stack.Infra, scope api.Scope) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(WithToken(t, inf, NewAPI(inf).Handler(), scope))
	t.Cleanup(srv.Close)
	return srv
}
