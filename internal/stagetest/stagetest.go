// Package stagetest runs one pipeline stage in a test on real parts: an
// in-process JetStream server (internal/natstest) with every stream,
// consumer and bucket streams/ declares, a fresh migrated Postgres
// database (internal/pgtest) when the stage needs one, and the Riot API
// simulator (internal/sim) when it calls Riot. The stage is built by the
// constructor its service binary runs (its Connect, given to app.Main) on
// the app.Process that app.NewProcess makes, with DATABASE_URL and
// RIOT_API_KEY pointing at the test's database and simulator, so a test
// covers the stage's wiring as the binary runs it. Only _test.go files import
// it (it imports package testing); a test binary that uses DB calls
// pgtest.Main from its TestMain.
package stagetest

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/natstest"
	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/streams"
)

// Options says what the stage under test uses besides NATS.
type Options struct {
	// DB gives the stage a fresh migrated database (DATABASE_URL; the
	// test reaches it through Env.Store and Env.DB).
	DB bool
	// Riot, when non-nil, starts the simulator with these options (its
	// APIKey and, when empty, FixturesDir are filled in) and points the
	// stage's Riot client at it (RIOT_API_KEY, RIOT_API_BASE_URL).
	Riot *sim.Options
	// Env is environment for the stage (its Config, config.Env), set
	// with t.Setenv for the test.
	Env map[string]string
}

// Env is a stage's world in a test.
type Env struct {
	T *testing.T
	// Process is what the stage is built on; Process.JS also serves the
	// test for publishing and inspecting.
	Process *app.Process
	// Store is the test's own store on the stage's database, or nil.
	Store *store.Store
	// DB is the test's own pool on the stage's database, for SQL of its
	// own (pgtest.Pool), or nil.
	DB *pgxpool.Pool
	// Sim is the simulator behind the stage's Riot client, or nil.
	Sim *sim.Sim
	// DBURL is the stage's database, or "".
	DBURL string
}

// New builds the stage's world; everything stops when the test ends.
func New(t *testing.T, o Options) *Env {
	t.Helper()
	for _, k := range []string{"NATS_URL", "DATABASE_URL", "RIOT_API_KEY"} {
		t.Setenv(k, "")
	}
	for k, v := range o.Env {
		t.Setenv(k, v)
	}
	e := &Env{T: t}
	log := slog.New(slog.NewTextHandler(Writer(t), &slog.HandlerOptions{Level: slog.LevelDebug}))
	if o.DB {
		e.DBURL = pgtest.NewDatabase(t)
		t.Setenv("DATABASE_URL", e.DBURL)
		st, err := store.Open(t.Context(), e.DBURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		e.Store = st
		e.DB = pgtest.Pool(t, e.DBURL)
	}
	if o.Riot != nil {
		var base, key string
		e.Sim, base, key = startSim(t, *o.Riot, log)
		t.Setenv("RIOT_API_KEY", key)
		t.Setenv("RIOT_API_BASE_URL", base)
	}
	env, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.Server(t)
	_, admin := natstest.Connect(t, srv)
	Declare(t, admin, streams.Options{}, log)
	p, err := app.NewProcess(t.Context(), env, app.Options{Service: "stagetest", Log: log, NATSServer: srv})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	e.Process = p
	return e
}

// Declare applies on js every stream, consumer and bucket streams/
// declares (streams.Load with o, then streams.Apply, which logs each
// object to log, slog.Default when nil), or fails the test.
func Declare(t testing.TB, js jetstream.JetStream, o streams.Options, log *slog.Logger) {
	t.Helper()
	set, err := streams.Load(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Apply(t.Context(), js, set, log); err != nil {
		t.Fatal(err)
	}
}

// startSim starts the simulator on a loopback port, closed at cleanup.
// Without fixtures it fails under CI=true and skips the test otherwise.
func startSim(t *testing.T, so sim.Options, log *slog.Logger) (s *sim.Sim, baseURL, apiKey string) {
	t.Helper()
	if so.APIKey == "" {
		so.APIKey = "RGAPI-stagetest"
	}
	if so.FixturesDir == "" {
		if so.FixturesDir = sim.FindFixtures(); so.FixturesDir == "" {
			if os.Getenv("CI") == "true" {
				t.Fatal("CI: testdata/riot-fixtures not found")
			}
			t.Skip("testdata/riot-fixtures not found")
		}
	}
	if so.Logger == nil {
		so.Logger = log
	}
	s, err := sim.New(so)
	if err != nil {
		t.Fatal(err)
	}
	if baseURL, err = s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, baseURL, so.APIKey
}

// Start is New, then the stage built by open (its Connect) on e.Process,
// running until the test ends (Run).
func Start[S app.Service](t *testing.T, o Options, open func(context.Context, *app.Process) (S, error)) *Env {
	t.Helper()
	e := New(t, o)
	svc, err := open(t.Context(), e.Process)
	if err != nil {
		t.Fatal(err)
	}
	e.Run(svc)
	return e
}

// DemoPlayer is the simulator's demo player (sim.Sim.DemoPlayer), or a
// test failure.
func (e *Env) DemoPlayer() sim.Player {
	e.T.Helper()
	p, ok := e.Sim.DemoPlayer()
	if !ok {
		e.T.Fatal("the simulator has no demo player")
	}
	return p
}

// Run runs s until the test ends (RunService).
func (e *Env) Run(s app.Service) { RunService(e.T, "stage", s) }

// RunService runs s until the test ends: its Run's context is cancelled at
// cleanup, which waits for Run to return; a non-nil error from it fails the
// test, named name.
func RunService(t testing.TB, name string, s app.Service) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
}

// Publish publishes v as JSON on subject and waits for the stream's ack.
func (e *Env) Publish(subject string, v any, opts ...jetstream.PublishOpt) {
	e.T.Helper()
	if _, err := natsx.Publish(e.T.Context(), e.Process.JS, subject, v, opts...); err != nil {
		e.T.Fatal(err)
	}
}

// Subscribe collects the messages on subject (core NATS) from now on.
func (e *Env) Subscribe(subject string) <-chan []byte {
	e.T.Helper()
	ch := make(chan []byte, 64)
	sub, err := e.Process.NC.Subscribe(subject, func(m *nats.Msg) { ch <- m.Data })
	if err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(func() { _ = sub.Unsubscribe() })
	return ch
}

// Wait polls cond until it holds, or fails the test after a minute (a
// hang guard, not a timing assertion).
func (e *Env) Wait(what string, cond func() bool) {
	e.T.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			e.T.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Count runs sql (one row, one integer column) on the stage's database.
func (e *Env) Count(sql string, args ...any) int {
	e.T.Helper()
	return pgtest.Count(e.T, e.DB, sql, args...)
}
