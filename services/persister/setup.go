package persister

import (
	"context"
	"time"

	"github.com/riftflow/riftflow/pkg/app"
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

// FromInfra builds a persister bound to the "persister" and
// "persister-interactive" consumers on FETCHED.
func FromInfra(ctx context.Context, inf *app.Infra) (*Service, error) {
	var e Env
	w := inf.Wire(ctx, &e)
	d := Deps{JS: inf.JS, Consumer: w.Consumer(streams.StreamFetched, streams.ConsumerPersister), Store: inf.Store,
		Interactive: w.Consumer(streams.StreamFetched, streams.ConsumerPersisterInteractive),
		Locks:       w.Lock(streams.BucketSyncLocks), Payloads: w.ObjectStore(streams.ObjectPayloads),
		Dead: inf.DeadLetter(), Base: inf.Base("persister")}
	if err := w.Err(); err != nil {
		return nil, err
	}
	return New(Config{MaxBatch: e.MaxBatch, MaxWait: e.MaxWait, LockTTL: e.LockTTL, MaxBatchBytes: e.MaxBytes, Writers: e.Writers}, d)
}
