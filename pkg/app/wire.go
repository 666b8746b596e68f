package app

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/natsx"
)

// Wiring binds what one stage uses on a Process — its durable consumers,
// KV buckets, locks and object stores declared in streams/ — and keeps the
// first error, so that a stage's Open reads as the list of what it is
// built from, followed by one Err check. After an error every later call
// does nothing and returns a zero value.
type Wiring struct {
	ctx context.Context
	p   *Process
	err error
}

// OpenStage is a stage's Open, written once: it reads the stage's Config
// C from the environment (config.Parse: each field's env variable and
// default in its tags), binds the stage's Deps D on p with bind (given
// the Config, which it may complete from p), then builds the stage with
// newStage. It returns the first error of config.Parse, of bind, of the
// Wiring (Err) or of newStage, and the zero S with it.
func OpenStage[C, D, S any](ctx context.Context, p *Process, bind func(w *Wiring, cfg *C) (D, error), newStage func(C, D) (S, error)) (S, error) {
	var zero S
	var cfg C
	if err := config.Parse(&cfg); err != nil {
		return zero, err
	}
	w := p.Wire(ctx)
	d, err := bind(w, &cfg)
	if err != nil {
		return zero, err
	}
	if err := w.Err(); err != nil {
		return zero, err
	}
	return newStage(cfg, d)
}

// Wire starts the wiring of one stage on p.
func (p *Process) Wire(ctx context.Context) *Wiring { return &Wiring{ctx: ctx, p: p} }

// Err is the first error of the wiring, or nil.
func (w *Wiring) Err() error { return w.err }

// Consumer binds a durable consumer (Process.Consumer).
func (w *Wiring) Consumer(stream, name string) jetstream.Consumer {
	return wire(w, func() (jetstream.Consumer, error) { return w.p.Consumer(w.ctx, stream, name) })
}

// KV opens a KV bucket (Process.KV).
func (w *Wiring) KV(bucket string) jetstream.KeyValue {
	return wire(w, func() (jetstream.KeyValue, error) { return w.p.KV(w.ctx, bucket) })
}

// Lock opens a lock over a KV bucket (Process.Lock).
func (w *Wiring) Lock(bucket string) natsx.Lock {
	return wire(w, func() (natsx.Lock, error) { return w.p.Lock(w.ctx, bucket) })
}

// ObjectStore opens an object store, failing with a hint when `riftflow
// streams apply` has not run.
func (w *Wiring) ObjectStore(name string) jetstream.ObjectStore {
	return wire(w, func() (jetstream.ObjectStore, error) {
		os, err := w.p.JS.ObjectStore(w.ctx, name)
		if err != nil {
			return nil, fmt.Errorf("open object store %s (run `riftflow streams apply`): %w", name, err)
		}
		return os, nil
	})
}

// wire runs open unless the wiring has failed already, and keeps its error.
func wire[T any](w *Wiring, open func() (T, error)) T {
	var zero T
	if w.err != nil {
		return zero
	}
	v, err := open()
	if err != nil {
		w.err = err
		return zero
	}
	return v
}
