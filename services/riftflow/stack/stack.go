// Package stack is the whole pipeline in one process, what `riftflow up`
// runs (Start): an embedded NATS server with one user per service (or
// NATS_URL), DATABASE_URL or a throwaway Postgres, the Riot API simulator
// or the real API, and the five services on them; the Infra they and
// `riftflow serve` build on; and the demo's plan and clock (SimDemo).
package stack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/riftflow/riftflow/internal/natsembed"
	"github.com/riftflow/riftflow/internal/pgcluster"
	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/connect"
	"github.com/riftflow/riftflow/pkg/ratelimit"
	"github.com/riftflow/riftflow/pkg/redact"
	"github.com/riftflow/riftflow/pkg/riotclient"
	"github.com/riftflow/riftflow/pkg/store"
	matchfetcher "github.com/riftflow/riftflow/services/match-fetcher"
	matchidlister "github.com/riftflow/riftflow/services/matchid-lister"
	"github.com/riftflow/riftflow/services/persister"
	"github.com/riftflow/riftflow/services/resolver"
	retrysweeper "github.com/riftflow/riftflow/services/retry-sweeper"
	"github.com/riftflow/riftflow/streams"
)

// Options configures a whole in-process pipeline.
type Options struct {
	// DataDir holds the embedded NATS store (nats/), the throwaway Postgres
	// (pg/) and the files other commands read to find them.
	DataDir string
	// Env is the configuration (NATS_URL, DATABASE_URL, RIOT_API_KEY, ...).
	// An empty NATS.URL starts an embedded server; an empty Postgres.URL a
	// throwaway cluster; an empty Riot.APIKey the simulator.
	Env config.Env
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
	// Now replaces the services' clock (tests, and the demo's clock at the
	// recorded dates).
	Now func() time.Time
	// demoClock is the clock behind Now and Sim.Now in a demo (SimDemo).
	demoClock *Clock
	Log       *slog.Logger
}

// Stack is a running pipeline.
type Stack struct {
	Infra   *Infra
	NATS    *server.Server // nil when NATS_URL was used
	NATSURL string         // the client URL others can connect to ("" if in-process only)
	// WebSocketURL is the embedded server's NATS-over-WebSocket listener, for
	// browsers reading lol.progress.<puuid> ("" without an embedded server).
	WebSocketURL string
	Sim          *sim.Sim // nil when RIOT_API_KEY was used
	DBURL        string
	Services     []Runner

	// DemoClock is the clock of the simulator and the services in a demo
	// against the simulator (SimDemo), nil otherwise.
	DemoClock *Clock
	// EphemeralDB says the Postgres is a throwaway cluster
	// (Options.EphemeralDB).
	EphemeralDB bool
	// users are the embedded server's NATS users (nil with NATS_URL).
	users   *Users
	closers []func()
}

// InProcess is the embedded server as a connection provider for
// connect.NATS and InfraOptions, or nil when NATS_URL was used (a nil
// *server.Server must not become a non-nil interface).
func (st *Stack) InProcess() nats.InProcessConnProvider {
	if st.NATS == nil {
		return nil
	}
	return st.NATS
}

// Runner is a service's Run.
type Runner interface {
	Run(ctx context.Context) error
}

// Start starts the infrastructure, applies migrations and streams, and
// builds the five services. Call Run to run them and Close afterwards.
func Start(ctx context.Context, o Options) (*Stack, error) {
	st := &Stack{DemoClock: o.demoClock, EphemeralDB: o.EphemeralDB}
	ok := false
	defer func() {
		if !ok {
			st.Close()
		}
	}()
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
		return nil, err
	}
	env := o.Env
	so := o.StreamOptions
	so.Prefix, so.Replicas = env.NATS.SubjectPrefix, max(env.NATS.StreamReplicas, so.Replicas)
	if o.MemoryStreams {
		so.MemoryStorage = true
	}
	set, err := streams.Load(so)
	if err != nil {
		return nil, err
	}
	steps := []func() error{
		func() error { return st.startNATS(o, env.NATS.URL, set) },
		func() error { return st.startPostgres(ctx, o, &env) },
		func() error { return st.startRiot(o, &env) },
		func() error { return st.applyStreams(ctx, o, env, set) },
		func() error { return st.buildServices(ctx, o, env) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	ok = true
	return st, nil
}

// startNATS starts the embedded JetStream server, on port 4222 when it is
// free (or o.NATSPort), unless natsURL names a server. The embedded server
// has one NATS user per service, with the permissions of streams.Permissions.
func (st *Stack) startNATS(o Options, natsURL string, set *streams.Set) error {
	if natsURL != "" {
		st.NATSURL = natsURL
		return nil
	}
	users, err := NewUsers(set)
	if err != nil {
		return err
	}
	st.users = users
	port := o.NATSPort
	if port == 0 {
		port = 4222
		if !PortFree("127.0.0.1", port) {
			o.Log.Info("port 4222 is taken; the embedded NATS server takes a random port")
			port = 0
		}
	}
	srv, err := natsembed.StartServer(natsembed.Options{Name: "riftflow", StoreDir: filepath.Join(o.DataDir, "nats"),
		Host: "127.0.0.1", Port: port, WebSocketPort: wsPort(port), NoLog: true,
		JetStreamMaxMemory: natsembed.SmallNodeMaxMemory, JetStreamMaxStore: natsembed.SmallNodeMaxStore,
		Configure: func(so *server.Options) {
			so.Users = users.Server
			so.Websocket.NoAuthUser = streams.UserWeb
		}})
	if err != nil {
		return fmt.Errorf("embedded NATS: %w", err)
	}
	st.NATS = srv
	st.closers = append(st.closers, func() { srv.Shutdown(); srv.WaitForShutdown() })
	if port >= 0 {
		st.NATSURL = srv.ClientURL()
		// Local tools connect as the CLI user (ingest, status) or the
		// admin (streams apply, retry --dead); the files are 0600.
		WriteFile(o.DataDir, "nats.url", withUser(st.NATSURL, streams.UserCLI, users.Password[streams.UserCLI]))
		WriteFile(o.DataDir, "nats-admin.url", withUser(st.NATSURL, streams.UserAdmin, users.Password[streams.UserAdmin]))
		st.WebSocketURL = srv.WebsocketURL()
		WriteFile(o.DataDir, "nats-ws.url", st.WebSocketURL)
	}
	o.Log.Info("embedded NATS JetStream started", "url", st.NATSURL, "store", filepath.Join(o.DataDir, "nats"))
	return nil
}

// startPostgres uses DATABASE_URL or, with EphemeralDB, starts a throwaway
// cluster under DataDir/pg (setting env's URL), then migrates.
func (st *Stack) startPostgres(ctx context.Context, o Options, env *config.Env) error {
	if env.Postgres.URL == "" && !o.EphemeralDB {
		return errors.New("DATABASE_URL is not set: point it at your Postgres, or pass --ephemeral-db " +
			"to start a throwaway cluster under " + filepath.Join(o.DataDir, "pg") + " (its data is not meant to be kept)")
	}
	if env.Postgres.URL != "" && o.EphemeralDB {
		return errors.New("give DATABASE_URL or --ephemeral-db, not both")
	}
	if env.Postgres.URL == "" {
		o.Log.Warn("EPHEMERAL DATABASE: --ephemeral-db starts a throwaway Postgres cluster; do not keep data you need in it",
			"dir", filepath.Join(o.DataDir, "pg"))
		url, stop, err := pgcluster.Ensure(ctx, pgcluster.Options{DataDir: filepath.Join(o.DataDir, "pg"), Logger: o.Log, Fsync: o.PgFsync})
		if err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		st.closers = append(st.closers, func() {
			if err := stop(); err != nil {
				o.Log.Warn("stopping the throwaway Postgres", "err", err)
			}
		})
		env.Postgres.URL = secret(url)
		WriteFile(o.DataDir, "database.url", url)
	}
	st.DBURL = env.Postgres.URL.Reveal()
	if err := store.Migrate(ctx, st.DBURL, o.Log); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// startRiot starts the Riot API simulator on a loopback port when env has
// no RIOT_API_KEY, and points env's Riot client at it.
func (st *Stack) startRiot(o Options, env *config.Env) error {
	if env.Riot.APIKey != "" {
		return nil
	}
	so := o.Sim
	so.APIKey = "RGAPI-sim-" + RandHex(8)
	if so.FixturesDir == "" {
		so.FixturesDir = sim.FindFixtures()
	}
	if so.Logger == nil {
		so.Logger = o.Log
	}
	s, err := sim.New(so)
	if err != nil {
		return fmt.Errorf("simulator: %w", err)
	}
	base, err := s.Start("127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("simulator: %w", err)
	}
	st.Sim = s
	st.closers = append(st.closers, func() { s.Close() })
	env.Riot.APIKey, env.Riot.BaseURL = secret(so.APIKey), base
	o.Log.Info("Riot API simulator serving recorded data", "base_url", base, "players", len(s.Players()))
	return nil
}

// applyStreams creates or updates the streams, consumers and buckets
// declared in streams/.
func (st *Stack) applyStreams(ctx context.Context, o Options, env config.Env, set *streams.Set) error {
	nc, js, err := connect.NATS(ctx, st.natsAs(env.NATS, streams.UserAdmin), st.InProcess(), "riftflow-streams-apply", o.Log)
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	defer nc.Close()
	if err := streams.Apply(ctx, js, set, o.Log); err != nil {
		return fmt.Errorf("streams apply: %w", err)
	}
	return nil
}

// buildServices builds the shared infrastructure and the five services on it.
// With the embedded server each service gets its own connection as its own
// NATS user; the Riot client and its shared limiter are built on the
// fetcher's connection, as the Riot callers' user owns the rate-limit state.
func (st *Stack) buildServices(ctx context.Context, o Options, env config.Env) error {
	cliEnv := env
	cliEnv.NATS = st.natsAs(env.NATS, streams.UserCLI)
	inf, closeInf, err := OpenInfra(ctx, cliEnv, InfraOptions{Service: "riftflow", NeedDB: true, NeedRiot: st.users == nil,
		Log: o.Log, NATSServer: st.InProcess()})
	if err != nil {
		return err
	}
	st.closers = append(st.closers, closeInf)
	if o.Now != nil {
		inf.Now = o.Now
	}
	st.Infra = inf
	builders := []struct {
		user string
		open func(context.Context, *Infra) (app.Service, error)
	}{
		{streams.UserResolver, func(ctx context.Context, in *Infra) (app.Service, error) {
			return service(resolver.Open(ctx, in.Process, in.Riot))
		}},
		{streams.UserMatchIDLister, func(ctx context.Context, in *Infra) (app.Service, error) {
			return service(matchidlister.Open(ctx, in.Process, in.Store, in.Riot))
		}},
		{streams.UserMatchFetcher, func(ctx context.Context, in *Infra) (app.Service, error) {
			return service(matchfetcher.Open(ctx, in.Process, in.Riot, in.Store))
		}},
		{streams.UserPersister, func(ctx context.Context, in *Infra) (app.Service, error) {
			return service(persister.Open(ctx, in.Process, in.Store))
		}},
		{streams.UserRetrySweeper, func(ctx context.Context, in *Infra) (app.Service, error) {
			return service(retrysweeper.Open(ctx, in.Process, in.Store, in.Riot))
		}},
	}
	infras := make([]*Infra, len(builders))
	for i, b := range builders {
		infras[i] = inf
		if st.users == nil {
			continue // NATS_URL: every service shares the configured credentials
		}
		own, err := st.connectAs(ctx, inf, env, b.user, o.Log)
		if err != nil {
			return err
		}
		infras[i] = own
	}
	for i, b := range builders {
		own := infras[i]
		own.Riot, own.Limiter, own.RiotStats = inf.Riot, inf.Limiter, inf.RiotStats
		r, err := b.open(ctx, own)
		if err != nil {
			return err
		}
		st.Services = append(st.Services, r)
	}
	return nil
}

// connectAs is a copy of inf on its own connection as user; for the
// fetcher's user it also builds the Riot client and limiter into inf.
func (st *Stack) connectAs(ctx context.Context, inf *Infra, env config.Env, user string, log *slog.Logger) (*Infra, error) {
	nc, js, err := connect.NATS(ctx, st.natsAs(env.NATS, user), st.InProcess(), user, log)
	if err != nil {
		return nil, fmt.Errorf("nats (%s): %w", user, err)
	}
	st.closers = append(st.closers, nc.Close)
	p := *inf.Process
	p.NC, p.JS = nc, js
	own := *inf
	own.Process = &p
	if user == streams.UserMatchFetcher {
		c, lim, stats, err := riotclient.New(ctx, env.Riot, js, log)
		if err != nil {
			return nil, err
		}
		if sh, ok := lim.(*ratelimit.Shared); ok {
			st.closers = append(st.closers, sh.Close)
		}
		inf.Riot, inf.Limiter, inf.RiotStats = c, lim, stats
	}
	return &own, nil
}

// service is a stage's Open result as an app.Service.
func service[S app.Service](s S, err error) (app.Service, error) {
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Users are the embedded server's NATS users: streams.Permissions with a
// random password each.
type Users struct {
	Server   []*server.User    // for the server's options
	Password map[string]string // each user's password
}

// NewUsers makes the embedded server's users from the permission table,
// with random 256-bit passwords registered with pkg/redact.
func NewUsers(set *streams.Set) (*Users, error) {
	perms, err := streams.Permissions(set)
	if err != nil {
		return nil, err
	}
	u := &Users{Password: map[string]string{}}
	for _, p := range perms {
		pw := RandHex(32)
		redact.Register(pw)
		u.Password[p.User] = pw
		sp := &server.Permissions{Subscribe: &server.SubjectPermission{Allow: p.Subscribe}}
		if len(p.Publish) == 0 {
			sp.Publish = &server.SubjectPermission{Deny: []string{">"}}
		} else {
			sp.Publish = &server.SubjectPermission{Allow: p.Publish}
		}
		u.Server = append(u.Server, &server.User{Username: p.User, Password: pw, Permissions: sp})
	}
	return u, nil
}

// natsAs is cfg with user's credentials when the stack runs its own server
// with users, else cfg unchanged.
func (st *Stack) natsAs(cfg config.NATS, user string) config.NATS {
	if st.users == nil {
		return cfg
	}
	cfg.User, cfg.Password, cfg.Token, cfg.NKeySeedFile, cfg.CredsFile = user, config.Secret(st.users.Password[user]), "", "", ""
	return cfg
}

// NATSConfig is the NATS configuration to connect to the stack's server
// as user (a streams.User* name); with NATS_URL, the configured one.
func (st *Stack) NATSConfig(user string) config.NATS { return st.natsAs(st.Infra.Env.NATS, user) }

// withUser puts user:password into a nats:// URL.
func withUser(raw, user, password string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.User = url.UserPassword(user, password)
	return u.String()
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

// OnClose adds f to what Close stops, before everything Start started.
func (st *Stack) OnClose(f func()) { st.closers = append(st.closers, f) }

// Close stops everything Start started, in reverse order.
func (st *Stack) Close() {
	for i := len(st.closers) - 1; i >= 0; i-- {
		st.closers[i]()
	}
	st.closers = nil
}

// PortFree reports whether host:port can be listened on now.
func PortFree(host string, port int) bool {
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

// WriteFile writes content and a newline to dir/name, readable by its
// owner only: the files a local `riftflow up` leaves for the other
// commands (nats.url, database.url, api.token, ...).
func WriteFile(dir, name, content string) {
	_ = os.WriteFile(filepath.Join(dir, name), []byte(content+"\n"), 0o600)
}

// RandHex is n random bytes in hex: request ids, generated keys and
// passwords of the local stack and the CLI.
func RandHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func secret(s string) config.Secret { return config.Secret(s) }
