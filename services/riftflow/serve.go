package riftflow

import (
	"context"
	"fmt"
	"io"
	"net"

	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/telemetry"
	"github.com/riftflow/riftflow/services/riftflow/api"
	"github.com/riftflow/riftflow/services/riftflow/stack"
	"github.com/riftflow/riftflow/streams"
)

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
