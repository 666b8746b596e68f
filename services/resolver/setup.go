package resolver

import (
	"context"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/riotclient"
	"github.com/riftflow/riftflow/streams"
)

// Connect is the resolver process's stage (app.Main): the Riot client on
// the process's connection (riotclient.Open), then Open.
func Connect(ctx context.Context, p *app.Process) (*Service, error) {
	rc, _, _, err := riotclient.Open(ctx, p)
	if err != nil {
		return nil, err
	}
	return Open(ctx, p, rc)
}

// Open builds a resolver on p calling Riot through accounts, its Config
// read from the environment, bound to the "resolver" (interactive) and
// "resolver-background" consumers on INGEST.
func Open(ctx context.Context, p *app.Process, accounts Accounts) (*Service, error) {
	return app.OpenStage(ctx, p, func(w *app.Wiring, _ *Config) (Deps, error) {
		return Deps{JS: p.JS, Consumer: w.Consumer(streams.StreamIngest, streams.ConsumerResolver),
			Background: w.Consumer(streams.StreamIngest, streams.ConsumerResolverBackground),
			RiotIDs:    w.KV(streams.BucketRiotIDs), Riot: accounts, Dead: p.DeadLetter(), Base: p.Base("resolver")}, nil
	}, New)
}
