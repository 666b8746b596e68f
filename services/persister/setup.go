package persister

import (
	"context"
	"fmt"
	"time"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/streams"
)

// Env is the persister's own configuration.
type Env struct {
	MaxBatch int           `env:"PERSIST_MAX_BATCH" envDefault:"200"`
	MaxWait  time.Duration `env:"PERSIST_MAX_WAIT" envDefault:"200ms"`
	LockTTL  time.Duration `env:"SYNC_LOCK_TTL" envDefault:"5m"`
	// MaxBytes caps one batch's message bytes; Writers is the number of
	// batches in flight (see Config).
	MaxBytes int `env:"PERSIST_MAX_BATCH_BYTES" envDefault:"1310720"`
	Writers  int `env:"PERSIST_WRITERS" envDefault:"2"`
}

// FromInfra builds a persister bound to the "persister" consumer on FETCHED.
func FromInfra(ctx context.Context, inf *app.Infra) (*Service, error) {
	var e Env
	if err := config.Parse(&e); err != nil {
		return nil, err
	}
	cons, err := inf.Consumer(ctx, streams.StreamFetched, streams.ConsumerPersister)
	if err != nil {
		return nil, err
	}
	locks, err := inf.Lock(ctx, streams.BucketSyncLocks)
	if err != nil {
		return nil, err
	}
	payloads, err := inf.JS.ObjectStore(ctx, streams.ObjectPayloads)
	if err != nil {
		return nil, fmt.Errorf("open object store %s (run `riftflow streams apply`): %w", streams.ObjectPayloads, err)
	}
	return New(Config{MaxBatch: e.MaxBatch, MaxWait: e.MaxWait, LockTTL: e.LockTTL, MaxBatchBytes: e.MaxBytes, Writers: e.Writers},
		Deps{JS: inf.JS, Consumer: cons, Store: inf.Store, Locks: locks, Dead: inf.DeadLetter(), Payloads: payloads, Base: inf.Base("persister")})
}
