package lister

import (
	"context"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/streams"
)

// FromInfra builds a lister, its Config read from the environment, bound
// to the "matchid-lister" (background) and "matchid-lister-interactive"
// consumers on SYNC.
func FromInfra(ctx context.Context, inf *app.Infra) (*Service, error) {
	return app.Assemble(ctx, inf, func(w *app.Wiring, _ Config) Deps {
		return Deps{JS: inf.JS, Consumer: w.Consumer(streams.StreamSync, streams.ConsumerMatchIDLister),
			Interactive: w.Consumer(streams.StreamSync, streams.ConsumerMatchIDListerInteractive),
			Locks:       w.Lock(streams.BucketSyncLocks), Cursors: w.KV(streams.BucketCursors),
			Riot: inf.Riot, Store: inf.Store, Dead: inf.DeadLetter(), Base: inf.Base("matchid-lister")}
	}, New)
}
