package resolver

import (
	"context"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/streams"
)

// FromInfra builds a resolver, its Config read from the environment, bound
// to the "resolver" (interactive) and "resolver-background" consumers on
// INGEST.
func FromInfra(ctx context.Context, inf *app.Infra) (*Service, error) {
	return app.Assemble(ctx, inf, func(w *app.Wiring, _ Config) Deps {
		return Deps{JS: inf.JS, Consumer: w.Consumer(streams.StreamIngest, streams.ConsumerResolver),
			Background: w.Consumer(streams.StreamIngest, streams.ConsumerResolverBackground),
			RiotIDs:    w.KV(streams.BucketRiotIDs), Riot: inf.Riot, Dead: inf.DeadLetter(), Base: inf.Base("resolver")}
	}, func(cfg Config, d Deps) (*Service, error) {
		cfg.MaxMatchesPerRun, cfg.LookbackDays = inf.Env.Ingestion.MaxMatchesPerRun, inf.Env.Ingestion.LookbackDays
		return New(cfg, d)
	})
}
