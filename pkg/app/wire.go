package app

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/natsx"
)

// Wiring binds what one stage uses on an Infra — its own environment, its
// durable consumers, KV buckets, locks and object stores declared in
// streams/ — and keeps the first error, so that a stage's FromInfra reads
// as the list of what it is built from, followed by one Err check. After
// an error every later call does nothing and returns a zero value.
type Wiring struct {
	ctx context.Context
	inf *Infra
	err error
}

// Wire starts the wiring of one stage on inf; env, when non-nil, is the
// stage's own configuration struct, parsed from the environment
// (config.Parse) first.
func (inf *Infra) Wire(ctx context.Context, env any) *Wiring {
	w := &Wiring{ctx: ctx, inf: inf}
	if env != nil {
		w.err = config.Parse(env)
	}
	return w
}

// Err is the first error of the wiring, or nil.
func (w *Wiring) Err() error { return w.err }

// Consumer binds a durable consumer (Infra.Consumer).
func (w *Wiring) Consumer(stream, name string) jetstream.Consumer {
	return wire(w, func() (jetstream.Consumer, error) { return w.inf.Consumer(w.ctx, stream, name) })
}

// KV opens a KV bucket (Infra.KV).
func (w *Wiring) KV(bucket string) jetstream.KeyValue {
	return wire(w, func() (jetstream.KeyValue, error) { return w.inf.KV(w.ctx, bucket) })
}

// Lock opens a lock over a KV bucket (Infra.Lock).
func (w *Wiring) Lock(bucket string) natsx.Lock {
	return wire(w, func() (natsx.Lock, error) { return w.inf.Lock(w.ctx, bucket) })
}

// ObjectStore opens an object store, failing with a hint when `riftflow
// streams apply` has not run.
func (w *Wiring) ObjectStore(name string) jetstream.ObjectStore {
	return wire(w, func() (jetstream.ObjectStore, error) {
		os, err := w.inf.JS.ObjectStore(w.ctx, name)
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
