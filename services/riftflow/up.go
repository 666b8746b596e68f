package riftflow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/redact"
	"github.com/riftflow/riftflow/pkg/telemetry"
	"github.com/riftflow/riftflow/services/riftflow/api"
	"github.com/riftflow/riftflow/services/riftflow/stack"
)

// cmdUp is `riftflow up`: the whole pipeline in one process (stack.Start)
// with the HTTP API, on loopback unless --expose, until ctx ends; with
// --demo it ingests the demo player, prints a summary and returns.
func cmdUp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("up", stderr)
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
	apiURL, stopAPI, err := serveAPI(st, addr, log)
	if err != nil {
		return err
	}
	defer stopAPI()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- st.Run(runCtx) }()

	upBanner(stdout, st, apiURL, token)
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

// serveAPI serves st's HTTP API (its ops handler, with the API mounted) on
// addr, or on any loopback port when addr is the default and taken. It
// returns the API's URL and a stop that shuts the server down (5 s
// grace).
func serveAPI(st *stack.Stack, addr string, log *slog.Logger) (string, func(), error) {
	host, port, _ := net.SplitHostPort(addr)
	if p, _ := strconv.Atoi(port); addr == api.DefaultAddr && !stack.PortFree(host, p) {
		addr = "127.0.0.1:0" // the default is taken: any loopback port (printed by upBanner)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	opsCtx, opsStop := context.WithCancel(context.Background())
	srv := api.NewServer(opsCtx, st.Infra.Ops.Handler(), log, api.DefaultTimeouts)
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		opsStop()
	}, nil
}

// upBanner tells the user of `riftflow up` where the pipeline is: NATS
// (its URL redacted: NATS_URL may carry a password), the API and its
// token, the WebSocket for browsers, and the simulator when it serves.
func upBanner(w io.Writer, st *stack.Stack, apiURL, token string) {
	fmt.Fprintf(w, "riftflow is up: NATS %s, HTTP %s (/v1/sync, /healthz, /readyz, /metrics)\n", redact.String(orInProcess(st.NATSURL)), apiURL)
	fmt.Fprintf(w, "API token for %s (scope admin, revoked at the next `riftflow up`; also in %s):\n  %s\n",
		localUser(), filepath.Join(dataDir(), "api.token"), token)
	if st.WebSocketURL != "" {
		fmt.Fprintf(w, "progress for browsers: NATS over WebSocket at %s (subscribe to %s)\n", st.WebSocketURL, st.Infra.Subjects.ProgressAll())
	}
	if st.Sim != nil {
		fmt.Fprintf(w, "Riot API: built-in simulator (RIOT_API_KEY unset), %d recorded players\n", len(st.Sim.Players()))
	}
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
