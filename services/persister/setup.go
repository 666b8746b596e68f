package persister

import (
	"context"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/streams"
)

// FromInfra builds a persister, its Config read from the environment,
// bound to the "persister" and "persister-interactive" consumers on
// FETCHED.
func FromInfra(ctx context.Context, inf *app.Infra) (*Service, error) {
	return app.Assemble(ctx, inf, func(w *app.Wiring, _ Config) Deps {
		return Deps{JS: inf.JS, Consumer: w.Consumer(streams.StreamFetched, streams.ConsumerPersister), Store: inf.Store,
			Interactive: w.Consumer(streams.StreamFetched, streams.ConsumerPersisterInteractive),
			Locks:       w.Lock(streams.BucketSyncLocks), Payloads: w.ObjectStore(streams.ObjectPayloads),
			Dead: inf.DeadLetter(), Base: inf.Base("persister")}
	}, New)
}
