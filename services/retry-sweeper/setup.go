package sweeper

import (
	"context"
	"time"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/streams"
)

// Env is the sweeper's own configuration.
type Env struct {
	Interval    time.Duration `env:"SWEEP_INTERVAL" envDefault:"1h"`
	StaleAfter  time.Duration `env:"SWEEP_STALE_AFTER" envDefault:"10m"`
	QueueSlack  time.Duration `env:"SWEEP_QUEUE_SLACK" envDefault:"10m"`
	StuckAfter  time.Duration `env:"SYNC_STUCK_AFTER" envDefault:"10m"`
	LockTTL     time.Duration `env:"SYNC_LOCK_TTL" envDefault:"5m"`
	BatchSize   int           `env:"SWEEP_BATCH" envDefault:"100"`
	MaxAttempts int           `env:"FETCH_MAX_ATTEMPTS" envDefault:"5"`
	RetryMax    time.Duration `env:"SWEEP_RETRY_MAX" envDefault:"6h"`
}

// FromInfra builds the retry-sweeper process: a sweeper bound to the
// "retry-sweeper" consumer on ADVISORIES, and the scheduler (scheduler.go).
func FromInfra(ctx context.Context, inf *app.Infra) (*Process, error) {
	svc, err := sweeperFromInfra(ctx, inf)
	return withScheduler(ctx, inf, svc, err)
}

func sweeperFromInfra(ctx context.Context, inf *app.Infra) (*Service, error) {
	var e Env
	w := inf.Wire(ctx, &e)
	d := Deps{JS: inf.JS, Advisories: w.Consumer(streams.StreamAdvisories, streams.ConsumerRetrySweeper), Store: inf.Store,
		Locks: w.Lock(streams.BucketSyncLocks), CronLocks: w.KV(streams.BucketCronLocks),
		Dead: inf.DeadLetter(), Base: inf.Base("retry-sweeper")}
	if err := w.Err(); err != nil {
		return nil, err
	}
	return New(Config(e), d)
}
