package retrysweeper

import (
	"context"
	"fmt"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/riotclient"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/streams"
)

// Connect is the retry-sweeper process's stage (app.Main): the Postgres
// pool of DATABASE_URL (store.ConnectFor) and, when RIOT_API_KEY is set,
// the Riot client for the scheduler's rank job (riotclient.Open: the same
// limiter shared through NATS KV as every other process, so its league-v4
// calls count against the key's budgets with the fetchers'), then Open.
func Connect(ctx context.Context, p *app.Process) (*Process, error) {
	st, err := store.ConnectFor(ctx, p.Env.Postgres, p)
	if err != nil {
		return nil, err
	}
	var leagues Leagues
	if p.Env.Riot.APIKey != "" {
		rc, _, _, err := riotclient.Open(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("scheduler: Riot client for the rank job: %w", err)
		}
		leagues = rc
	}
	return Open(ctx, p, st, leagues)
}

// Open builds the retry-sweeper process on p with st: a sweeper bound to
// the "retry-sweeper" consumer on ADVISORIES and "retry-sweeper-rejections"
// and "retry-sweeper-queued" on EVENTS, and the scheduler (OpenScheduler) with leagues.
func Open(ctx context.Context, p *app.Process, st *store.Store, leagues Leagues) (*Process, error) {
	svc, err := app.OpenStage(ctx, p, func(w *app.Wiring, _ *Config) (Deps, error) {
		return Deps{JS: p.JS, Advisories: w.Consumer(streams.StreamAdvisories, streams.ConsumerRetrySweeper),
			Rejections: w.Consumer(streams.StreamEvents, streams.ConsumerRetrySweeperRejections),
			Queued:     w.Consumer(streams.StreamEvents, streams.ConsumerRetrySweeperQueued), Store: st,
			Locks: w.Lock(streams.BucketSyncLocks), CronLocks: w.KV(streams.BucketCronLocks),
			Dead: p.DeadLetter(), Base: p.Base("retry-sweeper")}, nil
	}, New)
	if err != nil {
		return nil, err
	}
	sc, err := OpenScheduler(ctx, p, st, leagues)
	if err != nil {
		return nil, err
	}
	return &Process{Service: svc, Scheduler: sc}, nil
}

// OpenScheduler builds a scheduler on p with st, its ScheduleConfig read
// from the environment, the cron-locks bucket and leagues for the rank
// job (nil: that job fails with "no Riot client", and a warning says so).
func OpenScheduler(ctx context.Context, p *app.Process, st SchedulerStore, leagues Leagues) (*Scheduler, error) {
	return app.OpenStage(ctx, p, func(w *app.Wiring, _ *ScheduleConfig) (SchedulerDeps, error) {
		return SchedulerDeps{JS: p.JS, Store: st, CronLocks: w.KV(streams.BucketCronLocks), Riot: leagues, Base: p.Base("scheduler")}, nil
	}, func(cfg ScheduleConfig, d SchedulerDeps) (*Scheduler, error) {
		if leagues == nil {
			d.Logger.Warn("RIOT_API_KEY is not set: the rank job (CRON_RANK_DAILY) will fail with \"no Riot client\"")
		}
		return NewScheduler(cfg, d)
	})
}
