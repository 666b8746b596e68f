package resolver

import (
	"context"
	"time"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/streams"
)

// Env is the resolver's own configuration.
type Env struct {
	// Concurrency is RESOLVER_CONCURRENCY: requests handled at once.
	Concurrency int `env:"RESOLVER_CONCURRENCY" envDefault:"8"`
	// RetryDelay is RESOLVER_RETRY_DELAY: the first retry delay of a failed
	// account lookup, doubled per delivery.
	RetryDelay time.Duration `env:"RESOLVER_RETRY_DELAY" envDefault:"5s"`
}

// FromInfra builds a resolver bound to the "resolver" consumer on INGEST.
func FromInfra(ctx context.Context, inf *app.Infra) (*Service, error) {
	var e Env
	if err := config.Parse(&e); err != nil {
		return nil, err
	}
	cons, err := inf.Consumer(ctx, streams.StreamIngest, streams.ConsumerResolver)
	if err != nil {
		return nil, err
	}
	ids, err := inf.KV(ctx, streams.BucketRiotIDs)
	if err != nil {
		return nil, err
	}
	return New(Config{MaxMatchesPerRun: inf.Env.Ingestion.MaxMatchesPerRun, LookbackDays: inf.Env.Ingestion.LookbackDays,
		Concurrency: e.Concurrency, RetryDelay: e.RetryDelay},
		Deps{JS: inf.JS, Consumer: cons, RiotIDs: ids, Riot: inf.Riot, Dead: inf.DeadLetter(), Base: inf.Base("resolver")})
}
