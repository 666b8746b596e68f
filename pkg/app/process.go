package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/connect"
	"github.com/riftflow/riftflow/pkg/control"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/telemetry"
)

// Process is what every stage of a process runs on: the environment, the
// logger, OpenTelemetry with the ops server's checks, the NATS connection,
// the subject names, the clock and the pause switch. What a stage opens
// beside it (a Postgres pool, a Riot limiter) it closes with OnClose.
type Process struct {
	Env      config.Env
	Log      *slog.Logger
	Tel      *telemetry.Telemetry
	Ops      *telemetry.Ops
	NC       *nats.Conn
	JS       jetstream.JetStream
	Subjects bus.Subjects
	// Now is the clock services use (HostClock); tests replace it.
	Now func() time.Time
	// Pause is the pause switch (pkg/control) this process watches; nil
	// when the control bucket is missing (never paused). HoldContext puts
	// it under every consumer.
	Pause *control.Switch

	lag     *consumerLag
	closers *closers // shared by copies of the Process
}

// closers are what Process.Close calls.
type closers struct {
	mu sync.Mutex
	fs []func()
}

// Options says how NewProcess sets a process up.
type Options struct {
	// Service names the process in telemetry and on its NATS connection.
	Service string
	Log     *slog.Logger
	// NATSServer, when set, is used in-process instead of NATS_URL (an
	// embedded server from internal/natsembed, in riftflow up and tests).
	NATSServer nats.InProcessConnProvider
}

// NewProcess sets up telemetry (with the riftflow.consumer.* gauges of
// every consumer bound through it), connects to NATS as env.NATS says
// (connect.NATS, with a "nats" readiness check) and watches the pause
// switch. Close releases everything, in reverse order.
func NewProcess(ctx context.Context, env config.Env, o Options) (*Process, error) {
	p := &Process{Env: env, Log: o.Log, Subjects: bus.Subjects{Prefix: env.NATS.SubjectPrefix}, Now: processClock,
		closers: &closers{}}
	tel, err := telemetry.Setup(ctx, telemetry.Config{ServiceName: o.Service, Logger: o.Log})
	if err != nil {
		return nil, err
	}
	p.Tel, p.Ops = tel, tel.NewOps()
	p.OnClose(func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tel.Shutdown(c)
	})
	if p.lag, err = newConsumerLag(tel.MeterProvider()); err != nil {
		p.Close()
		return nil, fmt.Errorf("telemetry: consumer gauges: %w", err)
	}
	p.OnClose(p.lag.close)
	nc, js, err := connect.NATS(ctx, env.NATS, o.NATSServer, o.Service, o.Log)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("nats: %w", err)
	}
	p.NC, p.JS = nc, js
	p.OnClose(nc.Close)
	p.Ops.AddCheck("nats", func(context.Context) error {
		if !nc.IsConnected() {
			return errors.New("not connected")
		}
		return nil
	})
	if kv, err := js.KeyValue(ctx, control.Bucket); err != nil {
		o.Log.Warn("no pause switch: the control KV bucket is missing (run `riftflow streams apply`)", "err", err)
	} else if p.Pause, err = control.Watch(ctx, kv, o.Log); err != nil {
		p.Close()
		return nil, fmt.Errorf("pause switch: %w", err)
	}
	return p, nil
}

// OnClose has Close call f; the last registered is called first. A copy
// of p (a stage's own logger or clock) shares p's closing.
func (p *Process) OnClose(f func()) {
	p.closers.mu.Lock()
	defer p.closers.mu.Unlock()
	p.closers.fs = append(p.closers.fs, f)
}

// Close calls what OnClose registered, last first, once.
func (p *Process) Close() {
	p.closers.mu.Lock()
	fs := p.closers.fs
	p.closers.fs = nil
	p.closers.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// Base returns service name's Base on p: p's subjects and clock, the
// service's own logger and tracer.
func (p *Process) Base(name string) Base {
	return Base{Subjects: p.Subjects, Logger: p.Logger(name), Tracer: p.Tracer(name), Now: p.Now}
}

// Tracer returns the tracer of one service, with its own service.name in
// Jaeger even when several services share the process.
func (p *Process) Tracer(service string) trace.Tracer {
	if p.Tel == nil {
		return nil
	}
	return p.Tel.TracerProvider(service).Tracer("riftflow/" + service)
}

// HoldContext returns ctx under which every consumer holds (pulls
// nothing) while the pause switch is on.
func (p *Process) HoldContext(ctx context.Context) context.Context {
	if p.Pause == nil {
		return ctx
	}
	return natsx.WithHold(ctx, p.Pause.Paused)
}

// Logger returns the process logger tagged with a service name.
func (p *Process) Logger(service string) *slog.Logger { return p.Log.With("service", service) }

// Consumer binds a durable consumer declared in streams/, failing with a
// hint when `riftflow streams apply` has not run. A bound consumer gets a
// readiness check ("consumer <name>": its info can be read) and its queue
// length is exported as the riftflow.consumer.pending, .ack_pending and
// .redelivered gauges (see consumerLag).
func (p *Process) Consumer(ctx context.Context, stream, name string) (jetstream.Consumer, error) {
	c, err := p.JS.Consumer(ctx, stream, name)
	if err != nil {
		return nil, fmt.Errorf("bind consumer %s on %s (run `riftflow streams apply`): %w", name, stream, err)
	}
	if p.lag != nil {
		p.lag.add(c, stream, name)
	}
	if p.Ops != nil {
		p.Ops.AddCheck("consumer "+name, func(ctx context.Context) error {
			_, err := c.Info(ctx)
			return err
		})
	}
	return c, nil
}

// KV opens a KV bucket declared in streams/.
func (p *Process) KV(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := p.JS.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("open KV bucket %s (run `riftflow streams apply`): %w", bucket, err)
	}
	return kv, nil
}

// Lock opens a lock over a KV bucket.
func (p *Process) Lock(ctx context.Context, bucket string) (natsx.Lock, error) {
	kv, err := p.KV(ctx, bucket)
	if err != nil {
		return natsx.Lock{}, err
	}
	return natsx.Lock{KV: kv, JS: p.JS, Bucket: bucket}, nil
}

// DeadLetter is the dead-letter publisher every consumer's settle policy
// uses (the DEAD stream declared in streams/).
func (p *Process) DeadLetter() *natsx.DeadLetter {
	return &natsx.DeadLetter{JS: p.JS, Prefix: p.Subjects.Dead()}
}

// AddCheck adds a readiness check to the ops server's /readyz.
func (p *Process) AddCheck(name string, check func(context.Context) error) {
	p.Ops.AddCheck(name, check)
}
