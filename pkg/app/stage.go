package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/natsx"
)

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
func (b *Base) Fill(name string) {
	if b.Logger == nil {
		b.Logger = slog.Default()
	}
	if b.Tracer == nil {
		b.Tracer = otel.Tracer("riftflow/" + name)
	}
	if b.Now == nil {
		b.Now = time.Now
	}
}

// Queue is one durable consumer a stage serves: its name (logs and
// metrics) and how many messages it handles at once. A nil Consumer is an
// optional queue the stage was built without; Consume skips it.
type Queue struct {
	Consumer    jetstream.Consumer
	Name        string
	Concurrency int
}

// Consume serves every queue through h (natsx.Consume with opts, and the
// queue's Name and Concurrency), each with its own handlers, so that one
// queue never waits behind another, until ctx ends and they have drained.
// The first error stops them all and is returned.
func Consume(ctx context.Context, h natsx.Handler, opts natsx.ConsumeOptions, queues ...Queue) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, q := range queues {
		if q.Consumer == nil {
			continue
		}
		o := opts
		o.Name, o.Concurrency = q.Name, q.Concurrency
		g.Go(func() error { return natsx.Consume(ctx, q.Consumer, h, o) })
	}
	return g.Wait()
}
