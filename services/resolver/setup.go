package resolver

import (
	"context"
	"time"

	"github.com/riftflow/riftflow/pkg/app"
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
	w := inf.Wire(ctx, &e)
	d := Deps{JS: inf.JS, Consumer: w.Consumer(streams.StreamIngest, streams.ConsumerResolver),
		RiotIDs: w.KV(streams.BucketRiotIDs), Riot: inf.Riot, Dead: inf.DeadLetter(), Base: inf.Base("resolver")}
	if err := w.Err(); err != nil {
		return nil, err
	}
	return New(Config{MaxMatchesPerRun: inf.Env.Ingestion.MaxMatchesPerRun, LookbackDays: inf.Env.Ingestion.LookbackDays,
		Concurrency: e.Concurrency, RetryDelay: e.RetryDelay}, d)
}
