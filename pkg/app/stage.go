package app

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/riftflow/riftflow/pkg/natsx"
)

// Service is a stage built by its FromInfra: Run consumes until ctx ends,
// then drains and returns.
type Service interface {
	Run(ctx context.Context) error
}

// Constructor builds a stage from the shared infrastructure (a stage's
// FromInfra, through Stage).
type Constructor func(ctx context.Context, inf *Infra) (Service, error)

// Stage turns a stage's FromInfra, which returns its own type, into a
// Constructor: app.Stage(persister.FromInfra).
func Stage[S Service](fromInfra func(context.Context, *Infra) (S, error)) Constructor {
	return func(ctx context.Context, inf *Infra) (Service, error) {
		s, err := fromInfra(ctx, inf)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}

// Main is a service process from start to exit; each service's main is
//
//	func main() { app.Main("persister", app.Needs{DB: true}, persister.FromInfra) }
//
// naming the service, what the process connects besides NATS and the
// stage it runs: Start, then Run with the stage fromInfra builds, then
// Exit with Run's error.
func Main[S Service](service string, needs Needs, fromInfra func(context.Context, *Infra) (S, error)) {
	ctx, cfg := Start(service)
	Exit(Run(ctx, cfg, needs, Stage(fromInfra)))
}

// Assemble is a stage's FromInfra, written once: it parses the stage's
// own configuration E from the environment (Infra.Wire), binds the
// stage's Deps D on inf with bind (consumers, buckets, locks through the
// Wiring), and once every bind has succeeded makes the stage with build
// (its New, from E and D).
func Assemble[E, D, S any](ctx context.Context, inf *Infra, bind func(w *Wiring, e E) D, build func(e E, d D) (S, error)) (S, error) {
	var e E
	w := inf.Wire(ctx, &e)
	d := bind(w, e)
	if err := w.Err(); err != nil {
		var none S
		return none, err
	}
	return build(e, d)
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
