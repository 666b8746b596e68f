package resolver

import (
	"context"
	"time"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/streams"
)

// Env is the resolver's own configuration.
type Env struct {
	// Concurrency is RESOLVER_CONCURRENCY: interactive requests handled at once.
	Concurrency int `env:"RESOLVER_CONCURRENCY" envDefault:"8"`
	// BackgroundConcurrency is RESOLVER_BACKGROUND_CONCURRENCY: background
	// requests (lol.ingest.request.background) handled at once, beside them.
	BackgroundConcurrency int `env:"RESOLVER_BACKGROUND_CONCURRENCY" envDefault:"2"`
	// RetryDelay is RESOLVER_RETRY_DELAY: the first retry delay of a failed
	// account lookup, doubled per delivery.
	RetryDelay time.Duration `env:"RESOLVER_RETRY_DELAY" envDefault:"5s"`
}

// FromInfra builds a resolver bound to the "resolver" (interactive) and
// "resolver-background" consumers on INGEST.
func FromInfra(ctx context.Context, inf *app.Infra) (*Service, error) {
	var e Env
	w := inf.Wire(ctx, &e)
	d := Deps{JS: inf.JS, Consumer: w.Consumer(streams.StreamIngest, streams.ConsumerResolver),
		Background: w.Consumer(streams.StreamIngest, streams.ConsumerResolverBackground),
		RiotIDs:    w.KV(streams.BucketRiotIDs), Riot: inf.Riot, Dead: inf.DeadLetter(), Base: inf.Base("resolver")}
	if err := w.Err(); err != nil {
		return nil, err
	}
	return New(Config{MaxMatchesPerRun: inf.Env.Ingestion.MaxMatchesPerRun, LookbackDays: inf.Env.Ingestion.LookbackDays,
		Concurrency: e.Concurrency, BackgroundConcurrency: e.BackgroundConcurrency, RetryDelay: e.RetryDelay}, d)
}
