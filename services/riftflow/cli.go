// Package riftflow is the riftflow CLI: `riftflow up` runs the whole
// pipeline in one process (package stack) with the HTTP API (package
// api); `ingest`, `status`, `migrate`, `streams apply` and `sim` are the
// operator's tools.
package riftflow

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/connect"
	"github.com/riftflow/riftflow/pkg/redact"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/telemetry"
	"github.com/riftflow/riftflow/services/riftflow/api"
	"github.com/riftflow/riftflow/services/riftflow/stack"
	"github.com/riftflow/riftflow/streams"
)

const usage = `riftflow keeps a Postgres database filled with League of Legends data from the Riot API.

Usage:
  riftflow up [--demo] [--ephemeral-db] [--simulator] [--http-addr 127.0.0.1:8080] [--expose]
                                run the whole pipeline in one process (until Ctrl-C;
                                --demo ingests the recorded demo player, prints a summary, exits);
                                prints an admin API token; the API listens on loopback unless --expose
  riftflow token create --name N --scopes read,sync   a bearer token for the HTTP API (shown once)
  riftflow token list [--json]                       tokens (never the secret), scopes, last use
  riftflow token revoke ID                           revoke a token at once
  riftflow ingest --riot-id 'Name#TAG' | --puuid P  [--platform na1] [--mode latest|full]
                  [--count N] [--lookback-days D] [--queue Q] [--type ranked] [--force]
                  [--requested-by NAME] [--wait]
  riftflow status --riot-id 'Name#TAG' | --puuid P   account sync state (pending: queued, with its place), counts
  riftflow status --failures                         fetch failures by status, with reasons
  riftflow status --jobs [--job-type T]              the job log, newest first (pending ones with their place)
  riftflow status --schedules                        each scheduled job's last run and next run
  riftflow status --ratelimit                        Riot rate-limit budgets, 429s, waits, key rejected
  riftflow migrate                                   apply the SQL migrations (DATABASE_URL)
  riftflow streams apply                             create/update streams, consumers, KV buckets (NATS_URL)
  riftflow retry --match-id ID[,ID] | --puuid P | --all [--dead] [--limit 100]
                                                     replay permanently unfetchable matches (and, with
                                                     --dead, the dead letters naming them), 100 per run
  riftflow retry --dead [--stream S] [--match TEXT] [--limit 100]
                                                     replay dead letters to their original subjects
  riftflow serve                                     the HTTP API alone (/v1/..., SSE, /healthz, /metrics)
                                                     over NATS_URL and DATABASE_URL, for a Deployment
  riftflow show --match ID [--timeline] | --puuid P [--ranks | --reports] [--limit N] [--cursor C]
                                                     what the read API serves, from Postgres
  riftflow forget --puuid P                          erase a player: rows, cursors, cache; keeps
                                                     matches other stored accounts played in
  riftflow rotate-key [--dry-run]                    after changing RIOT_API_KEY (paused): re-resolve
                                                     every account, rewrite PUUIDs in one transaction
  riftflow clear-key-rejection [--key-id ID]         resume every process after a key rejection
                                                     (else each probes Riot with one call, 1m..30m apart)
  riftflow pause [--off] [--reason TEXT]             the pause switch: every service stops pulling
                                                     work (and the API answers 503) until --off
  riftflow sim [--addr 127.0.0.1:8099] [--key K] [--expose]  serve the Riot API simulator
  riftflow version                                   print the stamped version

Configuration comes from the environment; see README.md and docs/security.md.
Without NATS_URL or RIOT_API_KEY, 'up' starts its own embedded NATS and the
simulator (with DATABASE_URL, only given --simulator or --demo); without
DATABASE_URL it needs --ephemeral-db for a throwaway Postgres. The other commands find them through .data/.
`

// Invocation is one run of the CLI: its arguments (without the program
// name) and where it writes.
type Invocation struct {
	Args           []string
	Stdout, Stderr io.Writer
}

// Main runs the CLI with args (without the program name) under a context
// cancelled on SIGINT/SIGTERM, and returns the process exit code (Run).
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, Invocation{Args: args, Stdout: stdout, Stderr: stderr})
}

// Run runs the command inv.Args names until it is done or ctx ends, and
// returns the process exit code: 0, or 1 with the (redacted) error on
// inv.Stderr.
func Run(ctx context.Context, inv Invocation) int {
	args, stdout, stderr := inv.Args, inv.Stdout, inv.Stderr
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		return 0
	}
	var err error
	switch args[0] {
	case "up":
		err = cmdUp(ctx, args[1:], stdout, stderr)
	case "ingest":
		err = cmdIngest(ctx, args[1:], stdout)
	case "status":
		err = cmdStatus(ctx, args[1:], stdout)
	case "migrate":
		err = cmdMigrate(ctx, stderr)
	case "streams":
		if len(args) < 2 || args[1] != "apply" {
			err = errors.New("usage: riftflow streams apply")
		} else {
			err = cmdStreamsApply(ctx, stderr)
		}
	case "sim":
		err = cmdSim(ctx, args[1:], stdout, stderr)
	case "serve":
		err = cmdServe(ctx, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "riftflow", telemetry.ReadBuildInfo())
	case "retry":
		err = cmdRetry(ctx, args[1:], stdout, stderr)
	case "token":
		err = cmdToken(ctx, args[1:], stdout)
	case "pause":
		err = cmdPause(ctx, args[1:], stdout, stderr)
	case "forget":
		err = cmdForget(ctx, args[1:], stdout, stderr)
	case "show":
		err = cmdShow(ctx, args[1:], stdout, stderr)
	case "rotate-key":
		err = cmdRotateKey(ctx, args[1:], stdout, stderr)
	case "clear-key-rejection":
		err = cmdClearKeyRejection(ctx, args[1:], stdout, stderr)
	default:
		err = fmt.Errorf("unknown command %q\n\n%s", args[0], usage)
	}
	if err != nil {
		fmt.Fprintf(stderr, "riftflow %s: %s\n", args[0], redact.String(err.Error()))
		return 1
	}
	return 0
}

// ---- up -------------------------------------------------------------------

func cmdUp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	demo := fs.Bool("demo", false, "ingest the recorded demo player, print a summary and exit")
	timeout := fs.Duration("timeout", 5*time.Minute, "with --demo: give up after this long")
	ephemeral := fs.Bool("ephemeral-db", false, "start a throwaway Postgres under .data/pg instead of DATABASE_URL (its data is not meant to be kept)")
	httpAddr := fs.String("http-addr", "", "the API's listen address (default HTTP_ADDR if set, else "+api.DefaultAddr+")")
	expose := fs.Bool("expose", false, "allow an --http-addr/HTTP_ADDR beyond loopback (the API is authenticated, but not encrypted: put TLS in front)")
	simulator := fs.Bool("simulator", false, "with DATABASE_URL and no RIOT_API_KEY: fetch from the built-in Riot simulator anyway, storing its matches in that database")
	if err := fs.Parse(args); err != nil {
		return err
	}
	addr, err := api.Addr(*httpAddr, os.Getenv("HTTP_ADDR"), *expose)
	if err != nil {
		return err
	}
	env, err := config.Load()
	if err != nil {
		return err
	}
	if err := simulatorChosen(env, *simulator || *demo || *ephemeral); err != nil {
		return err
	}
	log := newLogger(stderr, env)
	if *demo && env.Ops.LogLevel == "info" {
		// Keep the demo's output readable: progress goes to stdout.
		log = telemetry.NewLogger(stderr, slog.LevelWarn, env.Ops.LogFormat)
	}
	config.Log(log, "riftflow", env)
	started := time.Now()
	if *ephemeral {
		fmt.Fprintf(stdout, "EPHEMERAL DATABASE: a throwaway Postgres under %s (--ephemeral-db); set DATABASE_URL to keep data\n",
			filepath.Join(dataDir(), "pg"))
	}
	so := stack.Options{DataDir: dataDir(), Env: env, PgFsync: true, Log: log, EphemeralDB: *ephemeral}
	var plan []stack.Phase
	if *demo && env.Riot.APIKey == "" {
		if plan, err = stack.SimDemo(&so); err != nil {
			return err
		}
	}
	st, err := stack.Start(ctx, so)
	if err != nil {
		return err
	}
	defer st.Close()

	api.New(st.Infra.Process, st.Infra.Store).Mount(st.Infra.Ops)
	token, err := localToken(ctx, st)
	if err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(addr)
	if p, _ := strconv.Atoi(port); addr == api.DefaultAddr && !stack.PortFree(host, p) {
		addr = "127.0.0.1:0" // the default is taken: any loopback port (printed below)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	opsCtx, opsStop := context.WithCancel(context.Background())
	defer opsStop()
	srv := api.NewServer(opsCtx, st.Infra.Ops.Handler(), log, api.DefaultTimeouts)
	go srv.Serve(ln)
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- st.Run(runCtx) }()

	// NATS_URL may carry a password: the banner shows the URL redacted.
	fmt.Fprintf(stdout, "riftflow is up: NATS %s, HTTP %s (/v1/sync, /healthz, /readyz, /metrics)\n", redact.String(orInProcess(st.NATSURL)), "http://"+ln.Addr().String())
	fmt.Fprintf(stdout, "API token for %s (scope admin, revoked at the next `riftflow up`; also in %s):\n  %s\n",
		localUser(), filepath.Join(dataDir(), "api.token"), token)
	if st.WebSocketURL != "" {
		fmt.Fprintf(stdout, "progress for browsers: NATS over WebSocket at %s (subscribe to %s)\n", st.WebSocketURL, st.Infra.Subjects.ProgressAll())
	}
	if st.Sim != nil {
		fmt.Fprintf(stdout, "Riot API: built-in simulator (RIOT_API_KEY unset), %d recorded players\n", len(st.Sim.Players()))
	}
	if !*demo {
		fmt.Fprintln(stdout, "Ctrl-C to stop. Try: riftflow ingest --riot-id 'LugnutsK#000' --platform na1 --mode full --wait")
		<-ctx.Done()
		fmt.Fprintln(stdout, "stopping: draining consumers…")
		cancel()
		return drainWait(done, env.Ops.ShutdownTimeout)
	}

	err = runDemo(ctx, st, plan, stdout, *timeout, started)
	cancel()
	if derr := drainWait(done, env.Ops.ShutdownTimeout); err == nil {
		err = derr
	}
	return err
}

func drainWait(done <-chan error, d time.Duration) error {
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		return errors.New("services did not drain within SHUTDOWN_TIMEOUT")
	}
}

// simulatorChosen refuses to run the built-in Riot simulator (no
// RIOT_API_KEY) against a database the user gave (DATABASE_URL) unless
// that was asked for (--simulator, or --demo, which is a simulator run),
// so synthetic matches never land in a real database by default.
func simulatorChosen(env config.Env, asked bool) error {
	if env.Riot.APIKey != "" || env.Postgres.URL == "" || asked {
		return nil
	}
	return errors.New("RIOT_API_KEY is not set, so `up` would fetch from the built-in Riot simulator and store its " +
		"synthetic matches in DATABASE_URL as if Riot had sent them: set RIOT_API_KEY, pass --simulator to do it " +
		"on purpose, or unset DATABASE_URL and pass --ephemeral-db for a throwaway database")
}

func orInProcess(s string) string {
	if s == "" {
		return "(in-process)"
	}
	return s
}

// ---- migrate / streams apply / sim ----------------------------------------

func cmdMigrate(ctx context.Context, stderr io.Writer) error {
	env, url, err := loadDB()
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx, url, newLogger(stderr, env)); err != nil {
		return err
	}
	fmt.Fprintln(stderr, "migrations applied")
	return nil
}

func cmdStreamsApply(ctx context.Context, stderr io.Writer) error {
	env, err := config.Load()
	if err != nil {
		return err
	}
	if err := localNATS(&env, true); err != nil {
		return err
	}
	log := newLogger(stderr, env)
	nc, js, err := connect.NATS(ctx, env.NATS, nil, "riftflow-streams-apply", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	set, err := streams.Load(streams.Options{Prefix: env.NATS.SubjectPrefix, Replicas: env.NATS.StreamReplicas})
	if err != nil {
		return err
	}
	if err := streams.Apply(ctx, js, set, log); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "applied %d streams, %d consumers, %d KV buckets\n", len(set.Streams), len(set.Consumers), len(set.Buckets))
	return nil
}

// cmdServe is `riftflow serve`: the HTTP API of `riftflow up` (POST
// /v1/sync, the SSE progress stream, account link/unlink/login, the job
// log) with /healthz, /readyz and /metrics on HTTP_ADDR, as its own
// process over NATS_URL and DATABASE_URL. The five services run elsewhere
// (their own Deployments); serve publishes requests and reads progress.
// It returns once ctx ends and the server has shut down.
func cmdServe(ctx context.Context, stderr io.Writer) error {
	env, err := config.Load()
	if err != nil {
		return err
	}
	log := newLogger(stderr, env).With("service", "riftflow-api")
	config.Log(log, "riftflow-api", env)
	inf, closeInf, err := stack.OpenInfra(ctx, env, stack.InfraOptions{Service: "riftflow-api", NeedDB: true, Log: log})
	if err != nil {
		return err
	}
	defer closeInf()
	// The API opens the sync-locks and riot-ids buckets and reads the
	// EVENTS stream: not ready until `riftflow streams apply` made them.
	inf.Ops.AddCheck("streams", func(ctx context.Context) error {
		_, err := inf.JS.Stream(ctx, streams.StreamEvents)
		return err
	})
	inf.Ops.AddCheck("shutdown", func(context.Context) error { return ctx.Err() })
	api.New(inf.Process, inf.Store).Mount(inf.Ops)
	addr := env.Ops.HTTPAddr
	if addr == "" {
		addr = telemetry.Addr()
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	log.Info("HTTP API serving", "addr", ln.Addr().String())
	// The same server as `riftflow up`'s: read, write and idle timeouts and
	// a 32 KiB header limit (docs/security.md).
	return telemetry.ServeUntil(ctx, api.NewServer(context.WithoutCancel(ctx), inf.Ops.Handler(), log, api.DefaultTimeouts), ln)
}

func cmdSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8099", "listen address (loopback unless --expose)")
	expose := fs.Bool("expose", false, "allow a listen address beyond loopback (a simulator in a pod, behind a Service)")
	key := fs.String("key", "", "API key clients must send (default: generated and printed)")
	fixtures := fs.String("fixtures", sim.FindFixtures(), "recorded Riot responses, laid out like testdata/riot-fixtures")
	app := fs.String("app-limit", sim.DefaultAppLimit, "application rate limit, Riot's header format")
	synthetic := fs.Int("synthetic-players", 0, "add synthetic players (clones of recorded matches)")
	perPlayer := fs.Int("synthetic-matches", 500, "matches per synthetic player")
	derive := fs.Bool("derive-timelines", false, "serve a timeline for every match, re-keyed from a recorded one (sim.Options.DeriveTimelines)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *key == "" {
		*key = "RGAPI-sim-" + randHex(8)
	}
	s, err := sim.New(sim.Options{APIKey: *key, FixturesDir: *fixtures, Limits: sim.RateLimits{App: *app},
		Synthetic: sim.Synthetic{Players: *synthetic, MatchesPerPlayer: *perPlayer}, DeriveTimelines: *derive,
		Logger: telemetry.NewLogger(stderr, slog.LevelInfo, "text")})
	if err != nil {
		return err
	}
	defer s.Close()
	var base string
	if *expose {
		ln, lerr := net.Listen("tcp", *addr)
		if lerr != nil {
			return fmt.Errorf("sim: %w", lerr)
		}
		base, err = s.Serve(ln)
	} else {
		base, err = s.Start(*addr)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Riot API simulator on %s\nexport RIOT_API_BASE_URL='%s' RIOT_API_KEY='%s'\n", strings.TrimSuffix(base, "/{route}"), base, *key)
	fmt.Fprintf(stdout, "%d players; admin: GET /sim/stats, GET /sim/truth, POST /sim/faults\n", len(s.Players()))
	<-ctx.Done()
	return nil
}
