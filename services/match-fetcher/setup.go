package matchfetcher

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/riotclient"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/streams"
)

// Connect is the match-fetcher process's stage (app.Main): the Riot
// client (riotclient.Open) and, when DATABASE_URL is set, a ledger pool
// that connects on first use (store.Dial: the fetcher starts and fetches
// while Postgres is down), then Open.
func Connect(ctx context.Context, p *app.Process) (*Service, error) {
	rc, _, _, err := riotclient.Open(ctx, p)
	if err != nil {
		return nil, err
	}
	var ledger Ledger
	if p.Env.Postgres.URL != "" {
		st, err := store.Dial(p.Env.Postgres.URL.Reveal())
		if err != nil {
			return nil, fmt.Errorf("fetcher: DATABASE_URL: %w", err)
		}
		p.OnClose(st.Close)
		ledger = st
	}
	return Open(ctx, p, rc, ledger)
}

// Open builds a fetcher on p with Riot client rc and the fetch ledger
// (nil: none, holds.go), its Config read from the environment, bound to
// "match-fetcher-<region>" and its interactive twin on FETCH for each
// region in FETCHER_REGIONS.
func Open(ctx context.Context, p *app.Process, rc Matches, ledger Ledger) (*Service, error) {
	return app.OpenStage(ctx, p, func(w *app.Wiring, cfg *Config) (Deps, error) {
		cfg.CallTimeout = p.Env.Riot.RateLimitMaxWait + p.Env.Riot.Timeout()
		d := Deps{JS: p.JS, Consumers: map[string]jetstream.Consumer{}, Interactive: map[string]jetstream.Consumer{},
			Riot: rc, Ledger: ledger, Dead: p.DeadLetter(), Payloads: w.ObjectStore(streams.ObjectPayloads), Base: p.Base("match-fetcher")}
		for _, r := range cfg.Regions {
			if !riot.Region(r).Valid() {
				return d, fmt.Errorf("FETCHER_REGIONS: unknown regional route %q", r)
			}
			d.Consumers[r] = w.Consumer(streams.StreamFetch, streams.FetcherConsumer(r))
			d.Interactive[r] = w.Consumer(streams.StreamFetch, streams.InteractiveFetcherConsumer(r))
		}
		return d, nil
	}, func(cfg Config, d Deps) (*Service, error) {
		results, err := p.JS.Stream(ctx, streams.StreamFetched)
		if err != nil {
			return nil, fmt.Errorf("fetcher: stream %s (backpressure): %w", streams.StreamFetched, err)
		}
		d.Results = results
		return New(cfg, d)
	})
}
