package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/redact"
	"github.com/riftflow/riftflow/pkg/telemetry"
)

// Service is a stage: Run consumes until ctx ends, then drains and returns.
type Service interface {
	Run(ctx context.Context) error
}

// Opener builds a stage on its process: it binds the consumers and
// buckets the stage uses on p, opens what else it needs (registering its
// closing with p.OnClose) and reads the stage's own environment.
type Opener func(ctx context.Context, p *Process) (Service, error)

// Config is what a service's run is given by Start: its name, the common
// environment and its logger.
type Config struct {
	Service string
	Env     config.Env
	Log     *slog.Logger
}

// Main is a service process from start to exit: Start, then Run with the
// stage open builds, then Exit with Run's error. Each service's main is
//
//	func main() { app.Main("persister", persister.Connect) }
func Main[S Service](service string, open func(context.Context, *Process) (S, error)) {
	ctx, cfg := Start(service)
	Exit(Run(ctx, cfg, func(ctx context.Context, p *Process) (Service, error) {
		s, err := open(ctx, p)
		if err != nil {
			return nil, err
		}
		return s, nil
	}))
}

// Start begins a service process (Main's first step): it loads and
// validates the environment (config.Load), builds the logger (LOG_LEVEL,
// LOG_FORMAT), logs the configuration, and returns a context cancelled on
// the first SIGINT/SIGTERM (a second one kills the process). Start and Run
// print a panic of the main goroutine redacted (redact.Panics). `<service>
// version` prints the stamped version (telemetry.ReadBuildInfo) and exits
// 0; a configuration error exits 1.
func Start(service string) (context.Context, Config) {
	defer redact.Panics(os.Stderr)
	if len(os.Args) == 2 && (os.Args[1] == "version" || os.Args[1] == "--version") {
		fmt.Println(service, telemetry.ReadBuildInfo())
		os.Exit(0)
	}
	env, err := config.Load()
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

// Run is a service process after Start: it sets up the Process
// (NewProcess: telemetry, NATS, the pause switch), serves the ops
// endpoints (/healthz, /readyz, /metrics at HTTP_ADDR), builds the stage
// with open and runs it until ctx ends (SIGTERM), under the pause switch's
// hold, then gives it SHUTDOWN_TIMEOUT to drain. A stop by ctx is a nil
// error; any other error, prefixed with the service name, is returned
// after everything opened is closed (Process.Close).
func Run(ctx context.Context, cfg Config, open Opener) error {
	defer redact.Panics(os.Stderr)
	if err := serve(ctx, cfg, open); err != nil {
		return fmt.Errorf("%s: %w", cfg.Service, err)
	}
	return nil
}

func serve(ctx context.Context, cfg Config, open Opener) error {
	p, err := NewProcess(ctx, cfg.Env, Options{Service: cfg.Service, Log: cfg.Log})
	if err != nil {
		return err
	}
	defer p.Close()
	stopOps := serveOps(ctx, p, cfg.Env.Ops.HTTPAddr, cfg.Log)
	defer stopOps()
	s, err := open(ctx, p)
	if err != nil {
		return err
	}
	return runUntilDrained(ctx, p.HoldContext(ctx), s, cfg.Env.Ops.ShutdownTimeout, cfg.Log)
}

// serveOps serves /healthz, /readyz and /metrics at addr until the
// returned stop is called. Once ctx ends (SIGTERM) /readyz answers 503, so
// the pod leaves its Service's endpoints while consumers drain; /healthz
// stays 200 so it is not killed.
func serveOps(ctx context.Context, p *Process, addr string, log *slog.Logger) (stop func()) {
	p.Ops.AddCheck("shutdown", func(context.Context) error {
		if ctx.Err() != nil {
			return errors.New("shutting down")
		}
		return nil
	})
	opsCtx, opsStop := context.WithCancel(context.Background())
	go func() {
		if err := p.Ops.Serve(opsCtx, addr); err != nil {
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
