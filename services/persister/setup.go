package persister

import (
	"context"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/streams"
)

// Connect is the persister process's stage (app.Main): the Postgres pool
// of DATABASE_URL (store.ConnectFor), then Open.
func Connect(ctx context.Context, p *app.Process) (*Service, error) {
	st, err := store.ConnectFor(ctx, p.Env.Postgres, p)
	if err != nil {
		return nil, err
	}
	return Open(ctx, p, st)
}

// Open builds a persister on p writing to st, its Config read from the
// environment, bound to the "persister" and "persister-interactive"
// consumers on FETCHED.
func Open(ctx context.Context, p *app.Process, st Store) (*Service, error) {
	return app.OpenStage(ctx, p, func(w *app.Wiring, _ *Config) (Deps, error) {
		return Deps{JS: p.JS, Consumer: w.Consumer(streams.StreamFetched, streams.ConsumerPersister), Store: st,
			Interactive: w.Consumer(streams.StreamFetched, streams.ConsumerPersisterInteractive),
			Locks:       w.Lock(streams.BucketSyncLocks), Payloads: w.ObjectStore(streams.ObjectPayloads),
			Dead: p.DeadLetter(), Base: p.Base("persister")}, nil
	}, New)
}
