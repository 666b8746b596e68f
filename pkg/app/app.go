// Package app wires the infrastructure every riftflow process shares — the
// logger, OpenTelemetry, the ops HTTP server, NATS, Postgres and the Riot
// client with its shared rate limiter — so that each service's main is a
// few lines, and `riftflow up` can run all five services on one Infra.
package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/control"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/ratelimit"
	"github.com/riftflow/riftflow/pkg/redact"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/telemetry"
)

// Env is the configuration common to every process.
type Env struct {
	NATS      config.NATS
	Postgres  config.Postgres
	Riot      config.Riot
	Ops       config.Ops
	Ingestion config.Ingestion
}

// LoadEnv parses and validates Env from the environment.
func LoadEnv() (Env, error) {
	var e Env
	if err := config.Parse(&e); err != nil {
		return e, err
	}
	registerSecrets(e)
	return e, config.Validate(&e)
}

// registerSecrets has every log line and redacted error of this process
// mask the configured secrets (redact.Register).
func registerSecrets(e Env) {
	redact.Register(e.Riot.APIKey.Reveal(), e.NATS.Password.Reveal(), e.NATS.Token.Reveal())
	redact.Register(postgresPassword(e.Postgres.URL.Reveal()))
}

// postgresPassword is the password in a DATABASE_URL, in either form
// libpq takes: a URL (postgres://user:pw@host/db) or keyword/value
// (host=… password=pw, or password='p w' with quotes); "" if none.
func postgresPassword(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok {
			return pw
		}
	}
	if cfg, err := pgconn.ParseConfig(dsn); err == nil && cfg.Password != "" {
		return cfg.Password
	}
	return redact.KeywordPassword(dsn) // what pgconn could not parse (a missing sslcert file)
}

// Infra is what a service is built from. Fields a process does not use may
// be nil (the resolver has no Store; the persister no Riot client).
type Infra struct {
	Env      Env
	Log      *slog.Logger
	Tel      *telemetry.Telemetry
	Ops      *telemetry.Ops
	NC       *nats.Conn
	JS       jetstream.JetStream
	Subjects bus.Subjects
	Store    *store.Store
	Riot     *riot.Client
	Limiter  riot.Limiter
	// RiotStats counts Riot requests made by this process.
	RiotStats *RiotStats
	// Now is the clock services use; tests replace it.
	Now func() time.Time
	// Pause is the pause switch (pkg/control) this process watches; nil
	// when the control bucket is missing (never paused). HoldContext puts
	// it under every consumer.
	Pause *control.Switch

	lag *consumerLag
}

// FillDefaults gives a service's optional dependencies their defaults:
// slog.Default(), the global tracer "riftflow/<name>" and time.Now.
func FillDefaults(name string, log **slog.Logger, tr *trace.Tracer, now *func() time.Time) {
	if *log == nil {
		*log = slog.Default()
	}
	if *tr == nil {
		*tr = otel.Tracer("riftflow/" + name)
	}
	if *now == nil {
		*now = time.Now
	}
}

// Base is what every stage's Deps share (embedded): the subject names,
// its logger, tracer and clock.
type Base struct {
	Subjects bus.Subjects
	Logger   *slog.Logger
	Tracer   trace.Tracer
	Now      func() time.Time
}

// Fill gives zero fields their defaults: slog.Default(), the global
// tracer "riftflow/<name>" and time.Now.
func (b *Base) Fill(name string) { FillDefaults(name, &b.Logger, &b.Tracer, &b.Now) }

// Base returns service name's Base on inf: inf's subjects and clock, the
// service's own logger and tracer.
func (inf *Infra) Base(name string) Base {
	return Base{Subjects: inf.Subjects, Logger: inf.Logger(name), Tracer: inf.Tracer(name), Now: inf.Now}
}

// Tracer returns the tracer of one service, with its own service.name in
// Jaeger even when several services share the process.
func (inf *Infra) Tracer(service string) trace.Tracer {
	if inf.Tel == nil {
		return nil
	}
	return inf.Tel.TracerProvider(service).Tracer("riftflow/" + service)
}

// HoldContext returns ctx under which every consumer holds (pulls
// nothing) while the pause switch is on.
func (inf *Infra) HoldContext(ctx context.Context) context.Context {
	if inf.Pause == nil {
		return ctx
	}
	return natsx.WithHold(ctx, inf.Pause.Paused)
}

// Logger returns the process logger tagged with a service name.
func (inf *Infra) Logger(service string) *slog.Logger { return inf.Log.With("service", service) }

// Consumer binds a durable consumer declared in streams/, failing with a
// hint when `riftflow streams apply` has not run. A bound consumer gets a
// readiness check ("consumer <name>": its info can be read) and its queue
// length is exported as the riftflow.consumer.pending, .ack_pending and
// .redelivered gauges (see consumerLag).
func (inf *Infra) Consumer(ctx context.Context, stream, name string) (jetstream.Consumer, error) {
	c, err := inf.JS.Consumer(ctx, stream, name)
	if err != nil {
		return nil, fmt.Errorf("bind consumer %s on %s (run `riftflow streams apply`): %w", name, stream, err)
	}
	if inf.lag != nil {
		inf.lag.add(c, stream, name)
	}
	if inf.Ops != nil {
		inf.Ops.AddCheck("consumer "+name, func(ctx context.Context) error {
			_, err := c.Info(ctx)
			return err
		})
	}
	return c, nil
}

// KV opens a KV bucket declared in streams/.
func (inf *Infra) KV(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := inf.JS.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("open KV bucket %s (run `riftflow streams apply`): %w", bucket, err)
	}
	return kv, nil
}

// Lock opens a lock over a KV bucket.
func (inf *Infra) Lock(ctx context.Context, bucket string) (natsx.Lock, error) {
	kv, err := inf.KV(ctx, bucket)
	if err != nil {
		return natsx.Lock{}, err
	}
	return natsx.Lock{KV: kv, JS: inf.JS, Bucket: bucket}, nil
}

// DeadLetter is the dead-letter publisher every consumer's settle policy
// uses (the DEAD stream declared in streams/).
func (inf *Infra) DeadLetter() *natsx.DeadLetter {
	return &natsx.DeadLetter{JS: inf.JS, Prefix: inf.Subjects.Dead()}
}

// ConnectNATS connects to cfg.URL, or in-process to srv when it is non-nil.
// A connection with a user (NATS_USER) takes its replies on
// bus.InboxPrefix(user), the only inboxes the user's permissions allow
// (streams.Grants).
func ConnectNATS(ctx context.Context, cfg config.NATS, srv nats.InProcessConnProvider, name string, log *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	cc := natsx.ConnConfig{URL: cfg.URL, Name: name, User: cfg.User, Password: cfg.Password.Reveal(),
		Token: cfg.Token.Reveal(), NKeySeedFile: cfg.NKeySeedFile, CredsFile: cfg.CredsFile,
		TLSCAFile: cfg.TLSCA, TLSCertFile: cfg.TLSCert, TLSKeyFile: cfg.TLSKey, InProcess: srv, Logger: log}
	if cfg.User != "" {
		cc.InboxPrefix = bus.InboxPrefix(cfg.User)
	}
	if cc.URL == "" && srv == nil {
		return nil, nil, errors.New("NATS_URL is not set")
	}
	nc, err := natsx.Connect(ctx, cc)
	if err != nil {
		return nil, nil, err
	}
	if err := CheckServerVersion(nc.ConnectedServerVersion()); err != nil {
		nc.Close()
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// MinServerVersion is the oldest nats-server riftflow runs on: per-key KV
// TTLs (sync locks, 2.11) and message schedules (fetch retries, 2.12).
const MinServerVersion = "2.12.0"

// CheckServerVersion fails with a clear message for a nats-server older
// than MinServerVersion (e.g. a distribution's 2.9), before anything is
// created on it.
func CheckServerVersion(v string) error {
	if v == "" || versionAtLeast(v, MinServerVersion) {
		return nil
	}
	return fmt.Errorf("nats-server %s is too old: riftflow needs %s or newer (per-key KV TTLs, message schedules); "+
		"unset NATS_URL to use the embedded server", v, MinServerVersion)
}

// versionAtLeast compares dotted versions numerically ("2.9.10" < "2.12.0");
// pre-release suffixes are ignored.
func versionAtLeast(v, min string) bool {
	parse := func(s string) [3]int {
		var out [3]int
		s, _, _ = strings.Cut(strings.TrimPrefix(s, "v"), "-")
		for i, p := range strings.SplitN(s, ".", 3) {
			out[i], _ = strconv.Atoi(p)
		}
		return out
	}
	a, b := parse(v), parse(min)
	for i := range a {
		if a[i] != b[i] {
			return a[i] > b[i]
		}
	}
	return true
}

// RiotStats counts the Riot requests of a process: requests sent and 429s.
type RiotStats struct {
	Requests, RateLimited, ServerErrors atomic.Int64
}

type countingTransport struct {
	next  http.RoundTripper
	stats *RiotStats
}

// Unwrap is the transport it counts for (riot's send check looks through it).
func (t countingTransport) Unwrap() http.RoundTripper { return t.next }

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.stats.Requests.Add(1)
	resp, err := t.next.RoundTrip(r)
	if err == nil {
		switch {
		case resp.StatusCode == http.StatusTooManyRequests:
			t.stats.RateLimited.Add(1)
		case resp.StatusCode >= 500:
			t.stats.ServerErrors.Add(1)
		}
	}
	return resp, err
}

// KeyID is the limiter's identity for an API key: its ShortHash. The key
// itself is never stored or logged.
func KeyID(apiKey string) string { return ShortHash(apiKey) }

// ShortHash is the first 16 hex digits of the SHA-256 of s: a short, stable
// name for a secret or a player that does not reveal it, and an id part
// that is the same on every replica.
func ShortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// NewRiot builds the Riot client on a limiter shared through NATS KV (or a
// local one when cfg.SharedRateLimit is off). A 401/403 seen by any process
// stops every process using the key (two answers in a row from a key
// endpoint prove it, riot.Config.KeyRejectAfter); a probe that finds the
// key accepted again, or `riftflow clear-key-rejection`, restarts them all.
func NewRiot(ctx context.Context, cfg config.Riot, js jetstream.JetStream, log *slog.Logger) (*riot.Client, riot.Limiter, *RiotStats, error) {
	if cfg.APIKey == "" {
		return nil, nil, nil, errors.New("RIOT_API_KEY is not set")
	}
	opts := ratelimit.Options{MaxWait: cfg.RateLimitMaxWait, Logger: log, Now: processClock,
		BackoffStart: cfg.BackoffStart, BackoffMax: cfg.BackoffMax}
	stats := &RiotStats{}
	rc := riot.Config{APIKey: cfg.APIKey.Reveal(), BaseURL: cfg.BaseURL, Timeout: cfg.Timeout(), Logger: log,
		BreakerTimeout: cfg.BreakerTimeout,
		HTTPClient:     &http.Client{Transport: countingTransport{next: riot.NewTransport(0), stats: stats}}}
	var lim ceilinged
	var client atomic.Pointer[riot.Client] // set below; the watcher may clear it
	if cfg.SharedRateLimit && js != nil {
		sh, err := ratelimit.NewShared(ctx, js, ratelimit.SharedOptions{Options: opts, KeyID: KeyID(cfg.APIKey.Reveal()),
			OnKeyCleared: func() {
				if c := client.Load(); c != nil {
					c.AcceptKey()
				}
			}})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("shared rate limiter: %w", err)
		}
		rc.OnKeyRejected = func(status int) {
			if err := sh.RejectKey(status); err != nil {
				log.Error("could not share the key rejection", "err", err)
			}
		}
		rc.OnKeyAccepted = func() {
			if err := sh.ClearKeyRejection(); err != nil {
				log.Error("could not share that the key is accepted again", "err", err)
			}
		}
		lim = sh
	} else {
		lim = ratelimit.NewLocal(opts)
	}
	var ceil Ceilings
	if err := config.Parse(&ceil); err != nil {
		return nil, nil, nil, err
	}
	rc.Limiter = WithCeilings(lim, ceil)
	c, err := riot.New(rc)
	if err != nil {
		return nil, nil, nil, err
	}
	client.Store(c)
	return c, lim, stats, nil
}

// Needs says what a service connects to besides NATS.
type Needs struct {
	DB   bool // Postgres at DATABASE_URL
	Riot bool // the Riot API (RIOT_API_KEY) with the shared rate limiter
}

// Config is what a service's run is given by Start: its name, the common
// environment (Env) and its logger.
type Config struct {
	Service string
	Env     Env
	Log     *slog.Logger
}

// Start begins a service process (Main's first step): it loads and
// validates Env, builds the logger (LOG_LEVEL, LOG_FORMAT), logs the
// configuration, and returns a context cancelled on the first SIGINT/SIGTERM
// (a second one kills the process). Start and Run print a
// panic of the main goroutine redacted (redact.Panics). `<service> version`
// prints the stamped version (telemetry.ReadBuildInfo) and exits 0; a
// configuration error exits 1.
func Start(service string) (context.Context, Config) {
	defer redact.Panics(os.Stderr)
	if len(os.Args) == 2 && (os.Args[1] == "version" || os.Args[1] == "--version") {
		fmt.Println(service, telemetry.ReadBuildInfo())
		os.Exit(0)
	}
	env, err := LoadEnv()
	if err != nil {
		Exit(fmt.Errorf("%s: %w", service, err))
	}
	level, err := telemetry.LevelFromString(env.Ops.LogLevel)
	if err != nil {
		Exit(fmt.Errorf("%s: %w", service, err))
	}
	log := telemetry.NewLogger(os.Stderr, level, env.Ops.LogFormat).With("service", service)
	config.Log(log, service, env)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	return ctx, Config{Service: service, Env: env, Log: log}
}

// Exit ends a service process with run's error: it returns for nil, else
// exits with status 1 and the (redacted) error on stderr. Run's errors
// start with the service name.
func Exit(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, redact.String(err.Error()))
		os.Exit(1)
	}
}

// Run is a service process after Start: it connects what the service
// needs (NATS always; Postgres and the Riot client with the shared rate
// limiter as needs says), serves the ops endpoints (/healthz, /readyz,
// /metrics at HTTP_ADDR), builds the stage on that (its FromInfra, through
// Stage) and runs it until ctx ends (SIGTERM), under the pause switch's
// hold, then gives it SHUTDOWN_TIMEOUT to drain. A stop by ctx is a nil
// error; any other error, prefixed with the service name, is returned
// after everything opened is closed.
func Run(ctx context.Context, cfg Config, needs Needs, build Constructor) error {
	defer redact.Panics(os.Stderr)
	if err := serve(ctx, cfg, needs, build); err != nil {
		return fmt.Errorf("%s: %w", cfg.Service, err)
	}
	return nil
}

func serve(ctx context.Context, cfg Config, needs Needs, build Constructor) error {
	inf, closeInf, err := Build(ctx, cfg.Env, BuildOptions{Service: cfg.Service, NeedDB: needs.DB, NeedRiot: needs.Riot, Log: cfg.Log})
	if err != nil {
		return err
	}
	defer closeInf()
	stopOps := serveOps(ctx, inf, cfg.Env.Ops.HTTPAddr, cfg.Log)
	defer stopOps()
	s, err := build(ctx, inf)
	if err != nil {
		return err
	}
	return runUntilDrained(ctx, inf.HoldContext(ctx), s, cfg.Env.Ops.ShutdownTimeout, cfg.Log)
}

// serveOps serves /healthz, /readyz and /metrics at addr until the
// returned stop is called. Once ctx ends (SIGTERM) /readyz answers 503, so
// the pod leaves its Service's endpoints while consumers drain; /healthz
// stays 200 so it is not killed.
func serveOps(ctx context.Context, inf *Infra, addr string, log *slog.Logger) (stop func()) {
	inf.Ops.AddCheck("shutdown", func(context.Context) error {
		if ctx.Err() != nil {
			return errors.New("shutting down")
		}
		return nil
	})
	opsCtx, opsStop := context.WithCancel(context.Background())
	go func() {
		if err := inf.Ops.Serve(opsCtx, addr); err != nil {
			log.Error("ops server", "err", err)
		}
	}()
	return opsStop
}

// runUntilDrained runs s under runCtx (ctx with the pause switch's hold);
// once ctx ends it gives s drain to return. A stop by ctx is a nil error.
func runUntilDrained(ctx, runCtx context.Context, s Service, drain time.Duration, log *slog.Logger) error {
	errc := make(chan error, 1)
	go func() { errc <- s.Run(runCtx) }()
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		log.Info("shutting down: draining consumers", "timeout", drain)
		select {
		case err = <-errc:
		case <-time.After(drain):
			err = errors.New("drain did not finish within SHUTDOWN_TIMEOUT")
		}
	}
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// BuildOptions says what Build sets up.
type BuildOptions struct {
	Service  string
	NeedDB   bool
	NeedRiot bool
	Log      *slog.Logger
	// NATSServer, when set, is used in-process instead of NATS_URL (an
	// embedded server from internal/natsembed, in riftflow up and tests).
	NATSServer nats.InProcessConnProvider
}

// Build creates an Infra from env. The returned func closes everything.
func Build(ctx context.Context, env Env, o BuildOptions) (*Infra, func(), error) {
	inf := &Infra{Env: env, Log: o.Log, Subjects: bus.Subjects{Prefix: env.NATS.SubjectPrefix}, Now: processClock}
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	tel, err := telemetry.Setup(ctx, telemetry.Config{ServiceName: o.Service, Logger: o.Log})
	if err != nil {
		return nil, nil, err
	}
	inf.Tel = tel
	closers = append(closers, func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tel.Shutdown(c)
	})
	inf.Ops = tel.NewOps()
	lag, err := newConsumerLag(tel.MeterProvider())
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("telemetry: consumer gauges: %w", err)
	}
	inf.lag = lag
	closers = append(closers, lag.close)

	nc, js, err := ConnectNATS(ctx, env.NATS, o.NATSServer, o.Service, o.Log)
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("nats: %w", err)
	}
	inf.NC, inf.JS = nc, js
	closers = append(closers, nc.Close)
	inf.Ops.AddCheck("nats", func(context.Context) error {
		if !nc.IsConnected() {
			return errors.New("not connected")
		}
		return nil
	})
	if kv, err := js.KeyValue(ctx, control.Bucket); err != nil {
		o.Log.Warn("no pause switch: the control KV bucket is missing (run `riftflow streams apply`)", "err", err)
	} else if inf.Pause, err = control.Watch(ctx, kv, o.Log); err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("pause switch: %w", err)
	}

	if o.NeedDB {
		if env.Postgres.URL == "" {
			closeAll()
			return nil, nil, errors.New("DATABASE_URL is not set")
		}
		st, err := store.Open(ctx, env.Postgres.URL.Reveal(), store.MaxConns(env.Postgres.PoolMaxConns))
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("postgres: %w", err)
		}
		inf.Store = st
		closers = append(closers, st.Close)
		inf.Ops.AddCheck("postgres", st.Ping)
	}
	if o.NeedRiot {
		c, lim, stats, err := NewRiot(ctx, env.Riot, js, o.Log)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		inf.Riot, inf.Limiter, inf.RiotStats = c, lim, stats
		if sh, ok := lim.(*ratelimit.Shared); ok {
			closers = append(closers, sh.Close)
		}
	}
	return inf, closeAll, nil
}
