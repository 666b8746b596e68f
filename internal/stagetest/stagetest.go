// Package stagetest runs one pipeline stage in a test on real parts: an
// in-process JetStream server (internal/natstest) with every stream,
// consumer and bucket streams/ declares, a fresh migrated Postgres
// database (internal/pgtest) when the stage needs one, and the Riot API
// simulator (internal/sim) when it calls Riot. The stage is built by its
// own FromInfra on the app.Infra that app.Build makes, so a test covers the
// stage's wiring as a service binary runs it. Only _test.go files import
// it (it imports package testing); a test binary that uses DB calls
// pgtest.Main from its TestMain.
package stagetest

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/natstest"
	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/streams"
)

// Options says what the stage under test uses besides NATS.
type Options struct {
	// DB gives the stage a fresh migrated database (Infra.Store).
	DB bool
	// Riot, when non-nil, starts the simulator with these options (its
	// APIKey and, when empty, FixturesDir are filled in) and gives the
	// stage a Riot client on it (Infra.Riot, with the shared limiter).
	Riot *sim.Options
	// Env is environment for the stage (its Env struct, app.Env), set
	// with t.Setenv for the test.
	Env map[string]string
}

// Env is a stage's world in a test.
type Env struct {
	T *testing.T
	// Infra is what the stage's FromInfra is given; Infra.JS also serves
	// the test for publishing and inspecting.
	Infra *app.Infra
	// Sim is the simulator behind Infra.Riot, or nil.
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
	env, err := app.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	e := &Env{T: t}
	log := slog.New(slog.NewTextHandler(Writer(t), &slog.HandlerOptions{Level: slog.LevelDebug}))
	if o.DB {
		e.DBURL = pgtest.NewDatabase(t)
		env.Postgres.URL = config.Secret(e.DBURL)
	}
	if o.Riot != nil {
		var base, key string
		e.Sim, base, key = startSim(t, *o.Riot, log)
		env.Riot.APIKey, env.Riot.BaseURL = config.Secret(key), base
	}
	srv := natstest.Server(t)
	_, admin := natstest.Connect(t, srv)
	set, err := streams.Load(streams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Apply(t.Context(), admin, set, log); err != nil {
		t.Fatal(err)
	}
	inf, closeInf, err := app.Build(t.Context(), env, app.BuildOptions{Service: "stagetest", NeedDB: o.DB,
		NeedRiot: o.Riot != nil, Log: log, NATSServer: srv})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeInf)
	e.Infra = inf
	return e
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

// Start is New, then the stage built by fromInfra (its FromInfra) on
// e.Infra, running until the test ends (Run).
func Start[S app.Service](t *testing.T, o Options, fromInfra func(context.Context, *app.Infra) (S, error)) *Env {
	t.Helper()
	e := New(t, o)
	svc, err := fromInfra(t.Context(), e.Infra)
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
	if _, err := natsx.Publish(e.T.Context(), e.Infra.JS, subject, v, opts...); err != nil {
		e.T.Fatal(err)
	}
}

// Subscribe collects the messages on subject (core NATS) from now on.
func (e *Env) Subscribe(subject string) <-chan []byte {
	e.T.Helper()
	ch := make(chan []byte, 64)
	sub, err := e.Infra.NC.Subscribe(subject, func(m *nats.Msg) { ch <- m.Data })
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
	var n int
	if err := e.Infra.Store.Pool().QueryRow(e.T.Context(), sql, args...).Scan(&n); err != nil {
		e.T.Fatalf("%s: %v", sql, err)
	}
	return n
}
