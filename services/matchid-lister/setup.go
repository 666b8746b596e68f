package matchidlister

import (
	"context"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/riotclient"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/streams"
)

// Connect is the matchid-lister process's stage (app.Main): the Postgres
// pool of DATABASE_URL (store.ConnectFor) and the Riot client
// (riotclient.Open), then Open.
func Connect(ctx context.Context, p *app.Process) (*Service, error) {
	st, err := store.ConnectFor(ctx, p.Env.Postgres, p)
	if err != nil {
		return nil, err
	}
	rc, _, _, err := riotclient.Open(ctx, p)
	if err != nil {
		return nil, err
	}
	return Open(ctx, p, st, rc)
}

// Open builds a lister on p with st and Riot client rc, its Config read
// from the environment, bound to the "matchid-lister" (background) and
// "matchid-lister-interactive" consumers on SYNC.
func Open(ctx context.Context, p *app.Process, st Store, rc MatchLister) (*Service, error) {
	return app.OpenStage(ctx, p, func(w *app.Wiring, _ *Config) (Deps, error) {
		return Deps{JS: p.JS, Consumer: w.Consumer(streams.StreamSync, streams.ConsumerMatchIDLister),
			Interactive: w.Consumer(streams.StreamSync, streams.ConsumerMatchIDListerInteractive),
			Locks:       w.Lock(streams.BucketSyncLocks), Cursors: w.KV(streams.BucketCursors),
			Riot: rc, Store: st, Dead: p.DeadLetter(), Base: p.Base("matchid-lister")}, nil
	}, New)
}
