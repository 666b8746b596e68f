// Package riftflow is the riftflow CLI: `riftflow up` runs the whole
// pipeline in one process (embedded NATS, a throwaway Postgres or
// DATABASE_URL, the Riot API simulator or the real API, and the five
// services); `ingest`, `status`, `migrate`, `streams apply` and `sim` are
// the operator's tools.
package riftflow

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"golang.org/x/sync/errgroup"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/pgtest"
	"github.com/riftflow/riftflow/pkg/sim"
	"github.com/riftflow/riftflow/pkg/store"
	fetcher "github.com/riftflow/riftflow/services/match-fetcher"
	lister "github.com/riftflow/riftflow/services/matchid-lister"
	"github.com/riftflow/riftflow/services/persister"
	"github.com/riftflow/riftflow/services/resolver"
	sweeper "github.com/riftflow/riftflow/services/retry-sweeper"
	"github.com/riftflow/riftflow/streams"
)

// StackOptions configures a whole in-process pipeline.
type StackOptions struct {
	// DataDir holds the embedded NATS store (nats/), the throwaway Postgres
	// (pg/) and the files other commands read to find them.
	DataDir string
	// Env is the configuration (NATS_URL, DATABASE_URL, RIOT_API_KEY, ...).
	// An empty NATS.URL starts an embedded server; an empty Postgres.URL a
	// throwaway cluster; an empty Riot.APIKey the simulator.
	Env app.Env
	// NATSPort is the embedded server's client port (0: 4222 if free, else
	// random; -1: in-process only).
	NATSPort int
	// Sim configures the simulator when one is started (APIKey is filled).
	Sim sim.Options
	// MemoryStreams keeps streams in memory (tests).
	MemoryStreams bool
	// StreamOptions overrides parts of the stream declarations (tests).
	StreamOptions streams.Options
	// PgFsync keeps fsync on for the throwaway Postgres (make run).
	PgFsync bool
	// EphemeralDB allows a throwaway Postgres cluster when Env has no
	// DATABASE_URL (`riftflow up --ephemeral-db`). Without it a missing
	// DATABASE_URL is an error, so a typo never sends writes to a database
	// that disappears.
	EphemeralDB bool
	// AnchorDemo re-dates the simulator's data so the demo player's newest
	// match was played a day ago (by default the newest match of all the
	// loaded data is), so the demo exercises storing, not only retention.
	AnchorDemo bool
	// Now replaces the services' clock (tests).
	Now func() time.Time
	Log *slog.Logger
}

// Stack is a running pipeline.
type Stack struct {
	Infra   *app.Infra
	NATS    *server.Server // nil when NATS_URL was used
	NATSURL string         // the client URL others can connect to ("" if in-process only)
	// WebSocketURL is the embedded server's NATS-over-WebSocket listener, for
	// browsers reading lol.progress.<puuid> ("" without an embedded server).
	WebSocketURL string
	Sim          *sim.Sim // nil when RIOT_API_KEY was used
	DBURL        string
	Services     []Runner

	closers []func()
}

// Runner is a service's Run.
type Runner interface {
	Run(ctx context.Context) error
}

// StartStack starts the infrastructure, applies migrations and streams, and
// builds the five services. Call Run to run them and Close afterwards.
func StartStack(ctx context.Context, o StackOptions) (*Stack, error) {
	st := &Stack{}
	ok := false
	defer func() {
		if !ok {
			st.Close()
		}
	}()
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
		return nil, err
	}
	env := o.Env

	// NATS.
	if env.NATS.URL == "" {
		port := o.NATSPort
		if port == 0 {
			port = 4222
			if !portFree("127.0.0.1", port) {
				log.Info("port 4222 is taken; the embedded NATS server takes a random port")
				port = 0
			}
		}
		srv, err := natsx.StartServer(natsx.EmbeddedOptions{Name: "riftflow", StoreDir: filepath.Join(o.DataDir, "nats"),
			Host: "127.0.0.1", Port: port, WebSocketPort: wsPort(port), NoLog: true})
		if err != nil {
			return nil, fmt.Errorf("embedded NATS: %w", err)
		}
		st.NATS = srv
		st.closers = append(st.closers, func() { srv.Shutdown(); srv.WaitForShutdown() })
		if port >= 0 {
			st.NATSURL = srv.ClientURL()
			writeFile(o.DataDir, "nats.url", st.NATSURL)
			st.WebSocketURL = srv.WebsocketURL()
			writeFile(o.DataDir, "nats-ws.url", st.WebSocketURL)
		}
		log.Info("embedded NATS JetStream started", "url", st.NATSURL, "store", filepath.Join(o.DataDir, "nats"))
	} else {
		st.NATSURL = env.NATS.URL
	}

	// Postgres.
	if env.Postgres.URL == "" && !o.EphemeralDB {
		return nil, errors.New("DATABASE_URL is not set: point it at your Postgres, or pass --ephemeral-db " +
			"to start a throwaway cluster under " + filepath.Join(o.DataDir, "pg") + " (its data is not meant to be kept)")
	}
	if env.Postgres.URL != "" && o.EphemeralDB {
		return nil, errors.New("give DATABASE_URL or --ephemeral-db, not both")
	}
	if env.Postgres.URL == "" {
		log.Warn("EPHEMERAL DATABASE: --ephemeral-db starts a throwaway Postgres cluster; do not keep data you need in it",
			"dir", filepath.Join(o.DataDir, "pg"))
		url, stop, err := pgtest.Ensure(ctx, pgtest.Options{DataDir: filepath.Join(o.DataDir, "pg"), Logger: log, Fsync: o.PgFsync})
		if err != nil {
			return nil, fmt.Errorf("postgres: %w", err)
		}
		st.closers = append(st.closers, func() {
			if err := stop(); err != nil {
				log.Warn("stopping the throwaway Postgres", "err", err)
			}
		})
		env.Postgres.URL = secret(url)
		writeFile(o.DataDir, "database.url", url)
	}
	st.DBURL = env.Postgres.URL.Reveal()
	if err := store.Migrate(ctx, st.DBURL, log); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}

	// The Riot API, or its simulator.
	if env.Riot.APIKey == "" {
		so := o.Sim
		so.APIKey = "RGAPI-sim-" + randHex(8)
		if so.FixturesDir == "" {
			so.FixturesDir = sim.FindFixtures()
		}
		if so.Logger == nil {
			so.Logger = log
		}
		s, err := sim.New(so)
		if err != nil {
			return nil, fmt.Errorf("simulator: %w", err)
		}
		if o.AnchorDemo && so.Shift == 0 {
			if shift, ok := demoShift(s); ok {
				s.Close()
				so.Shift = shift
				if s, err = sim.New(so); err != nil {
					return nil, fmt.Errorf("simulator: %w", err)
				}
			}
		}
		base, err := s.Start("127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("simulator: %w", err)
		}
		st.Sim = s
		st.closers = append(st.closers, func() { s.Close() })
		env.Riot.APIKey, env.Riot.BaseURL = secret(so.APIKey), base
		log.Info("Riot API simulator serving recorded data", "base_url", base, "players", len(s.Players()))
	}

	so := o.StreamOptions
	so.Prefix, so.Replicas = env.NATS.SubjectPrefix, max(env.NATS.StreamReplicas, so.Replicas)
	if o.MemoryStreams {
		so.MemoryStorage = true
	}
	set, err := streams.Load(so)
	if err != nil {
		return nil, err
	}
	nc, js, err := app.ConnectNATS(ctx, env.NATS, st.NATS, "riftflow-streams-apply", log)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	err = streams.Apply(ctx, js, set, log)
	nc.Close()
	if err != nil {
		return nil, fmt.Errorf("streams apply: %w", err)
	}

	inf, closeInf, err := app.Build(ctx, env, app.BuildOptions{Service: "riftflow", NeedDB: true, NeedRiot: true, Log: log, NATSServer: st.NATS})
	if err != nil {
		return nil, err
	}
	st.closers = append(st.closers, closeInf)
	if o.Now != nil {
		inf.Now = o.Now
	}
	st.Infra = inf

	builders := []func(context.Context, *app.Infra) (Runner, error){
		func(ctx context.Context, inf *app.Infra) (Runner, error) { return resolver.FromInfra(ctx, inf) },
		func(ctx context.Context, inf *app.Infra) (Runner, error) { return lister.FromInfra(ctx, inf) },
		func(ctx context.Context, inf *app.Infra) (Runner, error) { return fetcher.FromInfra(ctx, inf) },
		func(ctx context.Context, inf *app.Infra) (Runner, error) { return persister.FromInfra(ctx, inf) },
		func(ctx context.Context, inf *app.Infra) (Runner, error) { return sweeper.FromInfra(ctx, inf) },
	}
	for _, b := range builders {
		r, err := b(ctx, inf)
		if err != nil {
			return nil, err
		}
		st.Services = append(st.Services, r)
	}
	ok = true
	return st, nil
}

// Run runs every service until ctx ends, then waits for them to drain.
func (st *Stack) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(st.Infra.HoldContext(ctx))
	var cancelled atomic.Int64 // unix ns when ctx ended
	context.AfterFunc(ctx, func() { cancelled.Store(time.Now().UnixNano()) })
	names := []string{"resolver", "matchid-lister", "match-fetcher", "persister", "retry-sweeper"}
	for i, s := range st.Services {
		g.Go(func() error {
			err := s.Run(ctx)
			if at := cancelled.Load(); at != 0 && i < len(names) {
				st.Infra.Log.Info("service stopped", "service", names[i], "drain", time.Since(time.Unix(0, at)).Round(time.Millisecond), "err", err)
			}
			return err
		})
	}
	err := g.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// Close stops everything StartStack started, in reverse order.
func (st *Stack) Close() {
	for i := len(st.closers) - 1; i >= 0; i-- {
		st.closers[i]()
	}
	st.closers = nil
}

// demoShift is the sim shift that puts the demo player's newest match one
// day before now.
func demoShift(s *sim.Sim) (time.Duration, bool) {
	p, ok := s.DemoPlayer()
	if !ok {
		return 0, false
	}
	pt, ok := s.Truth().Players[p.PUUID]
	if !ok || len(pt.Matches) == 0 {
		return 0, false
	}
	var newest int64
	for _, m := range pt.Matches {
		newest = max(newest, m.GameCreation)
	}
	recorded := time.UnixMilli(newest).Add(-s.Shift())
	return time.Since(recorded) - 24*time.Hour, true
}

func portFree(host string, port int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// wsPort is the WebSocket port for browsers reading progress: 8222+1 style
// fixed ports collide too easily, so a random one unless in-process only.
func wsPort(natsPort int) int {
	if natsPort < 0 {
		return 0
	}
	return -1
}

func writeFile(dir, name, content string) {
	_ = os.WriteFile(filepath.Join(dir, name), []byte(content+"\n"), 0o600)
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
