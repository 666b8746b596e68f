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
	Overlap     time.Duration `env:"CURSOR_OVERLAP" envDefault:"2h"`
	Concurrency int           `env:"LISTER_CONCURRENCY" envDefault:"4"`
	// RetryDelay is LISTER_RETRY_DELAY: the first retry delay of a failed
	// match list, doubled per delivery up to 5 min.
	RetryDelay time.Duration `env:"LISTER_RETRY_DELAY" envDefault:"5s"`
}

// FromInfra builds a lister bound to the "matchid-lister" consumer on SYNC.
func FromInfra(ctx context.Context, inf *app.Infra) (*Service, error) {
	var e Env
	w := inf.Wire(ctx, &e)
	d := Deps{JS: inf.JS, Consumer: w.Consumer(streams.StreamSync, streams.ConsumerMatchIDLister),
		Locks: w.Lock(streams.BucketSyncLocks), Cursors: w.KV(streams.BucketCursors),
		Riot: inf.Riot, Store: inf.Store, Dead: inf.DeadLetter(), Base: inf.Base("matchid-lister")}
	if err := w.Err(); err != nil {
		return nil, err
	}
	return New(Config{LockTTL: e.LockTTL, Overlap: e.Overlap, Concurrency: e.Concurrency, RetryDelay: e.RetryDelay}, d)
}
