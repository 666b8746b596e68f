package fetcher

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/store"
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
	// NotFoundFresh is FETCH_NOT_FOUND_FRESH: a 404 for a match older than
	// this (known from its fetch or the ledger) is final at once; only a
	// younger one gets the backoff's retries.
	NotFoundFresh time.Duration `env:"FETCH_NOT_FOUND_FRESH" envDefault:"6h"`
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
	// ResultsBacklogMax is FETCH_RESULTS_BACKLOG_MAX: bytes of fetch results
	// waiting in FETCHED past which background fetches are held (negative:
	// never).
	ResultsBacklogMax int64 `env:"FETCH_RESULTS_BACKLOG_MAX" envDefault:"67108864"`
}

// FromInfra builds a fetcher bound to "match-fetcher-<region>" on FETCH for
// each region in FETCHER_REGIONS.
func FromInfra(ctx context.Context, inf *app.Infra) (*Service, error) {
	var e Env
	w := inf.Wire(ctx, &e)
	d := Deps{JS: inf.JS, Consumers: map[string]jetstream.Consumer{}, Interactive: map[string]jetstream.Consumer{},
		Riot: inf.Riot, Dead: inf.DeadLetter(), Payloads: w.ObjectStore(streams.ObjectPayloads), Base: inf.Base("match-fetcher")}
	for _, r := range e.Regions {
		if !riot.Region(r).Valid() {
			return nil, fmt.Errorf("FETCHER_REGIONS: unknown regional route %q", r)
		}
		d.Consumers[r] = w.Consumer(streams.StreamFetch, streams.FetcherConsumer(r))
		d.Interactive[r] = w.Consumer(streams.StreamFetch, streams.InteractiveFetcherConsumer(r))
	}
	if err := w.Err(); err != nil {
		return nil, err
	}
	results, err := inf.JS.Stream(ctx, streams.StreamFetched)
	if err != nil {
		return nil, fmt.Errorf("fetcher: stream %s (backpressure): %w", streams.StreamFetched, err)
	}
	d.Results = results
	// The ledger check (holds.go) uses the process's pool when it has one
	// (riftflow up, tests), else its own, which connects on first use: the
	// fetcher starts and fetches while Postgres is down.
	switch {
	case inf.Store != nil:
		d.Ledger = inf.Store
	case inf.Env.Postgres.URL != "":
		st, err := store.Dial(inf.Env.Postgres.URL.Reveal())
		if err != nil {
			return nil, fmt.Errorf("fetcher: DATABASE_URL: %w", err)
		}
		context.AfterFunc(ctx, st.Close)
		d.Ledger = st
	}
	return New(Config{ResultsBacklogMax: e.ResultsBacklogMax, Backoff: e.Backoff, MaxAttempts: e.MaxAttempts, NotFoundFresh: e.NotFoundFresh,
		MatchRetention:    time.Duration(e.MatchRetentionDays) * 24 * time.Hour,
		TimelineRetention: time.Duration(e.TimelineRetentionDays) * 24 * time.Hour, Concurrency: e.Concurrency, InteractiveConcurrency: e.InteractiveConcurrency,
		InlinePayloadMax: e.InlinePayloadMax,
		CallTimeout:      inf.Env.Riot.RateLimitMaxWait + inf.Env.Riot.Timeout()}, d)
}
