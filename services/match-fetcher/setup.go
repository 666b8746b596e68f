package fetcher

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/streams"
)

// Env is the fetcher's own configuration.
type Env struct {
	// Regions is FETCHER_REGIONS: the regional routes this process serves
	// (a Deployment per region scales them apart).
	Regions []string `env:"FETCHER_REGIONS" envDefault:"americas,asia,europe,sea" envSeparator:","`
	// Backoff is FETCH_BACKOFF: delays before attempts 2, 3, 4, 5 (design 000).
	Backoff     []time.Duration `env:"FETCH_BACKOFF" envDefault:"30s,60s,120s,300s" envSeparator:","`
	MaxAttempts int             `env:"FETCH_MAX_ATTEMPTS" envDefault:"5"`
	// Retention in days: Riot keeps matches 2 years and timelines 1 year.
	MatchRetentionDays    int `env:"MATCH_RETENTION_DAYS" envDefault:"730"`
	TimelineRetentionDays int `env:"TIMELINE_RETENTION_DAYS" envDefault:"365"`
	// Concurrency is FETCHER_CONCURRENCY: fetches in flight per region.
	Concurrency int `env:"FETCHER_CONCURRENCY" envDefault:"16"`
	// InteractiveConcurrency is FETCHER_INTERACTIVE_CONCURRENCY: interactive
	// fetches in flight per region, beside the background ones.
	InteractiveConcurrency int `env:"FETCHER_INTERACTIVE_CONCURRENCY" envDefault:"4"`
	// InlinePayloadMax is FETCH_INLINE_PAYLOAD_MAX: the largest gzip payload
	// (bytes) published inside its FetchResult; larger ones go through the
	// payloads object store.
	InlinePayloadMax int `env:"FETCH_INLINE_PAYLOAD_MAX" envDefault:"524288"`
}

// FromInfra builds a fetcher bound to "match-fetcher-<region>" on FETCH for
// each region in FETCHER_REGIONS.
func FromInfra(ctx context.Context, inf *app.Infra) (*Service, error) {
	var e Env
	if err := config.Parse(&e); err != nil {
		return nil, err
	}
	cons, interactive := map[string]jetstream.Consumer{}, map[string]jetstream.Consumer{}
	for _, r := range e.Regions {
		if !riot.Region(r).Valid() {
			return nil, fmt.Errorf("FETCHER_REGIONS: unknown regional route %q", r)
		}
		c, err := inf.Consumer(ctx, streams.StreamFetch, streams.FetcherConsumer(r))
		if err != nil {
			return nil, err
		}
		cons[r] = c
		ic, err := inf.Consumer(ctx, streams.StreamFetch, streams.InteractiveFetcherConsumer(r))
		if err != nil {
			return nil, err
		}
		interactive[r] = ic
	}
	payloads, err := inf.JS.ObjectStore(ctx, streams.ObjectPayloads)
	if err != nil {
		return nil, fmt.Errorf("open object store %s (run `riftflow streams apply`): %w", streams.ObjectPayloads, err)
	}
	return New(Config{Backoff: e.Backoff, MaxAttempts: e.MaxAttempts,
		MatchRetention:    time.Duration(e.MatchRetentionDays) * 24 * time.Hour,
		TimelineRetention: time.Duration(e.TimelineRetentionDays) * 24 * time.Hour, Concurrency: e.Concurrency, InteractiveConcurrency: e.InteractiveConcurrency,
		InlinePayloadMax: e.InlinePayloadMax,
		CallTimeout:      inf.Env.Riot.RateLimitMaxWait + inf.Env.Riot.Timeout()},
		Deps{JS: inf.JS, Consumers: cons, Interactive: interactive, Riot: inf.Riot, Dead: inf.DeadLetter(), Payloads: payloads, Base: inf.Base("match-fetcher")})
}
