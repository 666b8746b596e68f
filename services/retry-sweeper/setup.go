package sweeper

import (
	"context"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/streams"
)

// FromInfra builds the retry-sweeper process: a sweeper bound to the
// "retry-sweeper" consumer on ADVISORIES, and the scheduler (scheduler.go).
func FromInfra(ctx context.Context, inf *app.Infra) (*Process, error) {
	svc, err := sweeperFromInfra(ctx, inf)
	return withScheduler(ctx, inf, svc, err)
}

// sweeperFromInfra builds the sweeper from its Config, read from the
// environment.
func sweeperFromInfra(ctx context.Context, inf *app.Infra) (*Service, error) {
	return app.Assemble(ctx, inf, func(w *app.Wiring, _ Config) Deps {
		return Deps{JS: inf.JS, Advisories: w.Consumer(streams.StreamAdvisories, streams.ConsumerRetrySweeper),
			Rejections: w.Consumer(streams.StreamEvents, streams.ConsumerRetrySweeperRejections),
			Queued:     w.Consumer(streams.StreamEvents, streams.ConsumerRetrySweeperQueued), Store: inf.Store,
			Locks: w.Lock(streams.BucketSyncLocks), CronLocks: w.KV(streams.BucketCronLocks),
			Dead: inf.DeadLetter(), Base: inf.Base("retry-sweeper")}
	}, New)
}
