package lister

import (
	"context"
	"time"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/streams"
)

// Env is the lister's own configuration.
type Env struct {
	// LockTTL is SYNC_LOCK_TTL, the sync lock's lifetime between renewals.
	LockTTL time.Duration `env:"SYNC_LOCK_TTL" envDefault:"5m"`
	// Overlap is CURSOR_OVERLAP, how far before the cursor a latest sync
	// starts listing, to catch games that were in progress.
	Overlap time.Duration `env:"CURSOR_OVERLAP" envDefault:"2h"`
	// Concurrency is LISTER_CONCURRENCY: background syncs listed at once.
	Concurrency int `env:"LISTER_CONCURRENCY" envDefault:"4"`
	// InteractiveConcurrency is LISTER_INTERACTIVE_CONCURRENCY: interactive
	// syncs (lol.sync.<platform>.interactive) listed at once, beside them.
	InteractiveConcurrency int `env:"LISTER_INTERACTIVE_CONCURRENCY" envDefault:"2"`
	// MatchIDsCacheTTL is LISTER_MATCH_IDS_CACHE_TTL: how long a complete
	// listing of a player's match IDs is reused by latest syncs without a
	// Riot call (design 002's match-ID cache); negative disables it.
	MatchIDsCacheTTL time.Duration `env:"LISTER_MATCH_IDS_CACHE_TTL" envDefault:"5m"`
	// RetryDelay is LISTER_RETRY_DELAY: the first retry delay of a failed
	// match list, doubled per delivery up to 5 min.
	RetryDelay time.Duration `env:"LISTER_RETRY_DELAY" envDefault:"5s"`
	// MatchRetentionDays is MATCH_RETENTION_DAYS (the fetcher reads it
	// too): how long Riot serves a match; no listing starts earlier.
	MatchRetentionDays int `env:"MATCH_RETENTION_DAYS" envDefault:"730"`
}

// FromInfra builds a lister bound to the "matchid-lister" (background) and
// "matchid-lister-interactive" consumers on SYNC.
func FromInfra(ctx context.Context, inf *app.Infra) (*Service, error) {
	return app.Assemble(ctx, inf, func(w *app.Wiring, _ Env) Deps {
		return Deps{JS: inf.JS, Consumer: w.Consumer(streams.StreamSync, streams.ConsumerMatchIDLister),
			Interactive: w.Consumer(streams.StreamSync, streams.ConsumerMatchIDListerInteractive),
			Locks:       w.Lock(streams.BucketSyncLocks), Cursors: w.KV(streams.BucketCursors),
			Riot: inf.Riot, Store: inf.Store, Dead: inf.DeadLetter(), Base: inf.Base("matchid-lister")}
	}, func(e Env, d Deps) (*Service, error) {
		return New(Config{LockTTL: e.LockTTL, Overlap: e.Overlap, Concurrency: e.Concurrency, InteractiveConcurrency: e.InteractiveConcurrency,
			RetryDelay: e.RetryDelay, MatchIDsCacheTTL: e.MatchIDsCacheTTL,
			MatchRetention: time.Duration(e.MatchRetentionDays) * 24 * time.Hour}, d)
	})
}
