package retrysweeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"golang.org/x/sync/errgroup"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/redact"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/syncjob"
)

// Scheduled job types (jobs.type) and cron-locks key prefixes.
const (
	JobLatestAll    = "latest_all"
	JobRankDaily    = "rank_daily"
	JobWeeklyReport = "weekly_report"
	JobPruneJobs    = "prune_jobs"
	JobRecovery     = "recovery"
)

// ScheduleConfig is design 002's scheduler: standard 5-field cron expressions
// (minute hour day-of-month month day-of-week, evaluated in UTC) for the
// scheduled jobs, run by gocron v2 (github.com/go-co-op/gocron/v2).
type ScheduleConfig struct {
	// Enable is SCHEDULE_ENABLE; false runs no scheduled job (start-up
	// recovery still runs).
	Enable bool `env:"SCHEDULE_ENABLE" envDefault:"true"`
	// LatestEvery (CRON_LATEST_EVERY): a latest sync for every active
	// account.
	LatestEvery string `env:"CRON_LATEST_EVERY" envDefault:"0 */1 * * *"`
	// RankDaily (CRON_RANK_DAILY): league-v4 snapshots.
	RankDaily string `env:"CRON_RANK_DAILY" envDefault:"0 3 * * *"`
	// WeeklyReport (CRON_WEEKLY_REPORT): weekly reports.
	WeeklyReport string `env:"CRON_WEEKLY_REPORT" envDefault:"0 4 * * 1"`
	// Poll is how often Run reads the clock (SCHEDULE_POLL); a run is late
	// by at most Poll. gocron's timers run on that clock (pollClock), so an
	// injected clock (SchedulerDeps.Now) drives the schedules in tests.
	Poll time.Duration `env:"SCHEDULE_POLL" envDefault:"15s"`
	// LockTTL is how long a run's cron-locks key is kept (default 8 days,
	// longer than the longest period, so no replica re-runs a time).
	LockTTL time.Duration
	// AbandonAfter: a run of a job still "running" this long after it
	// started is taken as abandoned by a process that exited mid-run, and
	// recorded failed when the job next runs (default 6 h).
	AbandonAfter time.Duration
	// PruneJobs (CRON_PRUNE_JOBS): delete finished jobs rows older than
	// JobRetention (JOB_HISTORY_RETENTION, 90 days).
	PruneJobs    string        `env:"CRON_PRUNE_JOBS" envDefault:"30 4 * * *"`
	JobRetention time.Duration `env:"JOB_HISTORY_RETENTION" envDefault:"2160h"`
	// JobMaxFailed (JOB_HISTORY_MAX_FAILED): the prune job also keeps only
	// the newest JobMaxFailed failed rows of each job type (design 002's
	// removeOnFail: 100); 0 or less: no cap.
	JobMaxFailed int `env:"JOB_HISTORY_MAX_FAILED" envDefault:"100" zero:"keep"`
	// CatchUp (SCHEDULE_CATCH_UP): at start, each job's most recent
	// scheduled time within LockTTL runs once if no replica ran it (its
	// cron-locks key is absent): runs missed while no scheduler was up are
	// caught up once, not once per missed time.
	CatchUp bool `env:"SCHEDULE_CATCH_UP" envDefault:"true"`
}

// SchedulerStore is the part of pkg/store the scheduler uses.
type SchedulerStore interface {
	ActiveAccounts(ctx context.Context) ([]store.Account, error)
	UpsertLeagueEntries(ctx context.Context, entries []store.LeagueEntry) error
	WeeklyStats(ctx context.Context, puuid string, from, to time.Time) (store.WeeklyStats, error)
	LPChange(ctx context.Context, puuid, queueType string, from, to time.Time) (*int, error)
	SaveWeeklyReport(ctx context.Context, r store.WeeklyReport) error
	RecordJob(ctx context.Context, j store.Job) error
	AbandonJobs(ctx context.Context, jobType string, startedBefore time.Time, reason string) (int, error)
	PruneJobs(ctx context.Context, finishedBefore time.Time, keepFailed int) (aged, capped int64, err error)
	// QueueSync records a scheduled sync as pending when it is published;
	// FinishJob fails it when the publish fails.
	QueueSync(ctx context.Context, r store.SyncRequest) (bool, error)
	FinishJob(ctx context.Context, id string, status syncjob.Status, errMsg string) error
}

// Leagues is the part of the Riot client the rank job uses (league-v4 GET
// /lol/league/v4/entries/by-puuid/{puuid} on the account's platform).
type Leagues interface {
	LeagueEntriesByPUUID(ctx context.Context, platform riot.Platform, puuid string) ([]riot.LeagueEntry, error)
}

// SchedulerDeps are the scheduler's collaborators.
type SchedulerDeps struct {
	JS        jetstream.JetStream
	Store     SchedulerStore
	Riot      Leagues            // nil: the rank job fails with a reason
	CronLocks jetstream.KeyValue // cron-locks: one key per job and scheduled time
	// Base's Now is the clock the cron expressions are evaluated against
	// (tests inject one).
	app.Base
}

// Scheduler runs design 002's scheduled jobs. Several replicas may run one:
// each scheduled time of each job runs on exactly one, the replica that
// creates the cron-locks key "<job>.<unix seconds>" first.
type Scheduler struct {
	cfg  ScheduleConfig
	d    SchedulerDeps
	jobs []scheduledJob
	// runs counts finished runs of this replica by job type and result
	// (riftflow_scheduled_job_runs_total{job_type, result="completed"|"failed"}).
	runs metric.Int64Counter
}

// runAttrs are the metric attributes of a finished run of job.
func runAttrs(job, result string) metric.AddOption {
	return metric.WithAttributes(attribute.String("job.type", job), attribute.String("result", result))
}

type scheduledJob struct {
	name  string
	expr  string
	env   string      // its environment variable, e.g. CRON_LATEST_EVERY
	sched gocron.Cron // parsed by gocron's default cron (standard 5 fields, UTC)
}

// WeeklyNotice is published on lol.report.weekly for every stored report.
type WeeklyNotice struct {
	PUUID        string               `json:"puuid"`
	WeekStart    string               `json:"week_start"` // YYYY-MM-DD (UTC), the report covers 7 days from it
	Games        int                  `json:"games"`
	Wins         int                  `json:"wins"`
	Kills        int                  `json:"kills"`
	Deaths       int                  `json:"deaths"`
	Assists      int                  `json:"assists"`
	KDA          float64              `json:"kda"` // (kills+assists)/max(deaths,1)
	TopChampions []store.ChampionStat `json:"top_champions"`
	LPChange     *int                 `json:"lp_change,omitempty"` // solo queue, else flex; absent when unknown
	At           time.Time            `json:"at"`
}

// NewScheduler parses the cron expressions (gocron's standard 5-field
// syntax, in UTC) and checks deps. Empty expressions take design 002's
// defaults. Errors: a missing dependency; an expression that does not
// parse or never fires, naming its environment variable.
func NewScheduler(cfg ScheduleConfig, d SchedulerDeps) (*Scheduler, error) {
	if d.JS == nil || d.Store == nil || d.CronLocks == nil {
		return nil, errors.New("scheduler: JS, Store and CronLocks are required")
	}
	cfg.fill()
	d.Base.Fill("scheduler")
	jobs, err := parseJobs(cfg, d.Now())
	if err != nil {
		return nil, err
	}
	s := &Scheduler{cfg: cfg, d: d, jobs: jobs}
	s.runs, err = otel.Meter("riftflow/scheduler").Int64Counter("riftflow.scheduled_job.runs",
		metric.WithDescription("Finished runs of a scheduled job on this replica, by job.type (jobs.type) and result (completed, failed)."),
		metric.WithUnit("{run}"))
	if err != nil {
		return nil, fmt.Errorf("scheduler: metric: %w", err)
	}
	// Every series exists from the start at 0, so increase() sees the
	// first failure of a job too.
	for _, j := range s.jobs {
		for _, result := range []string{string(syncjob.Completed), string(syncjob.Failed)} {
			s.runs.Add(context.Background(), 0, runAttrs(j.name, result))
		}
	}
	return s, nil
}

// fill sets design 002's defaults in the fields left empty.
func (c *ScheduleConfig) fill() {
	config.Defaults(c)
	config.Fill(c, ScheduleConfig{LockTTL: 8 * 24 * time.Hour, AbandonAfter: 6 * time.Hour})
}

// parseJobs parses each job's cron expression of cfg, checking that it
// fires after now. Errors name the environment variable.
func parseJobs(cfg ScheduleConfig, now time.Time) ([]scheduledJob, error) {
	var jobs []scheduledJob
	for _, j := range []struct{ name, expr, env string }{
		{JobLatestAll, cfg.LatestEvery, "CRON_LATEST_EVERY"},
		{JobRankDaily, cfg.RankDaily, "CRON_RANK_DAILY"},
		{JobWeeklyReport, cfg.WeeklyReport, "CRON_WEEKLY_REPORT"},
		{JobPruneJobs, cfg.PruneJobs, "CRON_PRUNE_JOBS"},
	} {
		sc := gocron.NewDefaultCron(false)
		if err := sc.IsValid(j.expr, time.UTC, now); err != nil {
			return nil, fmt.Errorf("scheduler: %s %q: %w", j.env, j.expr, err)
		}
		jobs = append(jobs, scheduledJob{name: j.name, expr: j.expr, env: j.env, sched: sc})
	}
	return jobs, nil
}

// Schedule is one scheduled job as configured: its name (the jobs rows'
// type), cron expression (UTC), environment variable and next time.
type Schedule struct {
	Job  string    `json:"job"`
	Expr string    `json:"schedule"`
	Env  string    `json:"env"`
	Next time.Time `json:"next_run"`
}

// Schedules returns every scheduled job of cfg (design 002's defaults for
// empty expressions) with its first time after now; nil when
// SCHEDULE_ENABLE is false. Errors: an expression that does not parse or
// never fires. `riftflow status --schedules` shows them beside each job's
// last run from the job log.
func Schedules(cfg ScheduleConfig, now time.Time) ([]Schedule, error) {
	if !cfg.Enable {
		return nil, nil
	}
	cfg.fill()
	jobs, err := parseJobs(cfg, now)
	if err != nil {
		return nil, err
	}
	out := make([]Schedule, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, Schedule{Job: j.name, Expr: j.expr, Env: j.env, Next: j.sched.Next(now).UTC()})
	}
	return out, nil
}

// Next returns each job's first scheduled time after t.
func (s *Scheduler) Next(t time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	for _, j := range s.jobs {
		out[j.name] = j.sched.Next(t)
	}
	return out
}

// Prev returns each job's last scheduled time at or before t and after
// t − LockTTL (absent when there is none).
func (s *Scheduler) Prev(t time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	for _, j := range s.jobs {
		var last time.Time
		for at := j.sched.Next(t.Add(-s.cfg.LockTTL)); !at.After(t) && !at.IsZero(); at = j.sched.Next(at) {
			last = at
		}
		if !last.IsZero() {
			out[j.name] = last
		}
	}
	return out
}

// Run fires every job at its scheduled times until ctx ends, on a gocron
// scheduler whose clock is the scheduler's (read every Poll). Each firing
// runs the job for its last scheduled time at or before now (Prev): after
// a clock jump past several times, once, for the latest; RunJob's
// cron-locks key makes that run happen on one replica only. With CatchUp,
// each job's last scheduled time before the start runs first unless some
// replica ran it (once, however many were missed). With Enable false it
// returns at once. Errors: gocron refusing a job or failing to stop.
func (s *Scheduler) Run(ctx context.Context) error {
	if !s.cfg.Enable {
		s.d.Logger.InfoContext(ctx, "schedules disabled (SCHEDULE_ENABLE=false)")
		return nil
	}
	start := s.d.Now()
	next := s.Next(start)
	for _, j := range s.jobs {
		s.d.Logger.InfoContext(ctx, "schedule", "job", j.name, "cron", j.expr, "next", next[j.name])
	}
	if s.cfg.CatchUp {
		for name, at := range s.Prev(start) {
			ran, err := s.RunJob(ctx, name, at)
			if ran {
				s.d.Logger.InfoContext(ctx, "caught up a missed scheduled run", "job", name, "scheduled_at", at, "err", err)
			}
		}
	}
	clock := newPollClock(s.d.Now)
	sched, err := gocron.NewScheduler(gocron.WithClock(clock), gocron.WithLocation(time.UTC),
		gocron.WithLogger(s.d.Logger), gocron.WithStopTimeout(30*time.Second))
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	for _, j := range s.jobs {
		_, err := sched.NewJob(gocron.CronJob(j.expr, false), gocron.NewTask(func(ctx context.Context) {
			at, ok := s.Prev(s.d.Now())[j.name]
			if !ok {
				return
			}
			if _, err := s.RunJob(ctx, j.name, at); err != nil && ctx.Err() == nil {
				s.d.Logger.WarnContext(ctx, "scheduled job failed", "job", j.name, "scheduled_at", at, "err", err)
			}
		}), gocron.WithName(j.name), gocron.WithContext(ctx), gocron.WithSingletonMode(gocron.LimitModeReschedule))
		if err != nil {
			sched.Shutdown()
			return fmt.Errorf("scheduler: job %s %q: %w", j.name, j.expr, err)
		}
	}
	sched.Start()
	clock.run(ctx, s.cfg.Poll)
	if err := sched.Shutdown(); err != nil {
		return fmt.Errorf("scheduler: stop: %w", err)
	}
	return nil
}

// JobID is the jobs-row id of job's run scheduled at at: "<job>-<unix s>".
func JobID(job string, at time.Time) string { return fmt.Sprintf("%s-%d", job, at.Unix()) }

// RunJob runs job (JobLatestAll, JobRankDaily or JobWeeklyReport) for its
// scheduled time at, if this replica wins at's cron-locks key; ran is false
// when another replica (or an earlier call) owns it. The run is logged in
// the jobs table with id JobID(job, at): running, then completed or failed
// with the reason (failed when any account failed; the others are done),
// and counted in riftflow_scheduled_job_runs_total{job_type, result}.
func (s *Scheduler) RunJob(ctx context.Context, job string, at time.Time) (ran bool, err error) {
	var run func(context.Context, time.Time) (map[string]any, error)
	switch job {
	case JobLatestAll:
		run = s.latestAll
	case JobRankDaily:
		run = s.rankDaily
	case JobWeeklyReport:
		run = s.weeklyReport
	case JobPruneJobs:
		run = s.pruneJobs
	default:
		return false, fmt.Errorf("scheduler: unknown job %q", job)
	}
	key := fmt.Sprintf("%s.%d", job, at.Unix())
	if _, err := s.d.CronLocks.Create(ctx, key, []byte(s.d.Now().UTC().Format(time.RFC3339)), jetstream.KeyTTL(s.cfg.LockTTL)); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			s.d.Logger.DebugContext(ctx, "scheduled run owned by another replica", "job", job, "scheduled_at", at)
			return false, nil
		}
		return false, fmt.Errorf("scheduler: cron lock %s: %w", key, err)
	}
	ctx, span := s.d.Tracer.Start(ctx, "scheduler "+job)
	defer span.End()
	id := JobID(job, at)
	// Earlier runs of job still "running" after AbandonAfter belong to a
	// process that exited mid-run (kill -9, OOM): record them failed.
	if n, err := s.d.Store.AbandonJobs(ctx, job, s.d.Now().Add(-s.cfg.AbandonAfter), "abandoned: the process running it exited"); err != nil {
		return true, err
	} else if n > 0 {
		s.d.Logger.WarnContext(ctx, "abandoned scheduled runs recorded failed", "job", job, "runs", n)
	}
	if err := s.d.Store.RecordJob(ctx, store.Job{ID: id, Type: job, Status: syncjob.Running, RequestedAt: at, StartedAt: s.d.Now()}); err != nil {
		return true, err
	}
	var detail map[string]any
	var runErr error
	// The row leaves "running" on every exit path: an error, a panic, or
	// shutdown (ctx cancelled: written on a context of its own).
	defer func() {
		ran = true
		if p := recover(); p != nil {
			runErr = fmt.Errorf("panic: %v", p)
		} else if runErr == nil && ctx.Err() != nil {
			runErr = fmt.Errorf("interrupted: %w", ctx.Err())
		}
		fin := store.Job{ID: id, Type: job, Status: syncjob.Completed, RequestedAt: at, FinishedAt: s.d.Now()}
		if runErr != nil {
			fin.Status, fin.Error = syncjob.Failed, runErr.Error()
		}
		s.runs.Add(context.WithoutCancel(ctx), 1, runAttrs(job, string(fin.Status)))
		if detail != nil {
			fin.Detail, _ = json.Marshal(detail)
		}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if rerr := s.d.Store.RecordJob(wctx, fin); rerr != nil && err == nil {
			err = rerr
		}
		if err == nil {
			err = runErr
		}
		s.d.Logger.InfoContext(ctx, "scheduled job ran", "job", job, "scheduled_at", at, "detail", detail, "err", runErr)
	}()
	detail, runErr = run(ctx, at)
	return true, nil
}

// pruneJobs deletes finished jobs rows older than JobRetention before at,
// and the failed rows of each type beyond the newest JobMaxFailed.
func (s *Scheduler) pruneJobs(ctx context.Context, at time.Time) (map[string]any, error) {
	before := at.Add(-s.cfg.JobRetention)
	aged, capped, err := s.d.Store.PruneJobs(ctx, before, s.cfg.JobMaxFailed)
	return map[string]any{"deleted": aged + capped, "finished_before": before.UTC(), "failed_over_cap": capped,
		"max_failed_per_type": s.cfg.JobMaxFailed}, err
}

// ScheduledRequestID is the request id of the hourly latest sync of puuid
// scheduled at at (≤ 64 bytes): the same on every replica and retry.
func ScheduledRequestID(puuid string, at time.Time) string {
	return fmt.Sprintf("sched-%d-%s", at.Unix(), redact.ShortHash(puuid))
}

// latestAll publishes a latest IngestRequest (priority background, trigger
// schedule) for every active account not syncing now.
func (s *Scheduler) latestAll(ctx context.Context, at time.Time) (map[string]any, error) {
	accts, err := s.d.Store.ActiveAccounts(ctx)
	if err != nil {
		return nil, err
	}
	published, skipped := 0, 0
	var errs []error
	for _, a := range accts {
		if a.SyncStatus == syncjob.Syncing {
			skipped++ // its sync is running; stuck ones are the sweeper's
			continue
		}
		req := bus.IngestRequest{RequestID: ScheduledRequestID(a.PUUID, at), PUUID: a.PUUID, Platform: a.Platform,
			Mode: bus.ModeLatest, Priority: bus.Background, Trigger: "schedule", RequestedBy: "system", RequestedAt: at}
		if err := req.Normalize(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a.PUUID, err))
			continue
		}
		// Pending in the job log while it waits behind the backlog.
		if _, err := s.d.Store.QueueSync(ctx, syncjob.Queued(req, a.PUUID)); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a.PUUID, err))
			continue
		}
		if _, err := natsx.Publish(ctx, s.d.JS, s.d.Subjects.IngestFor(req.Priority), req, jetstream.WithMsgID(bus.IngestMsgID(req.RequestID))); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a.PUUID, err))
			_ = s.d.Store.FinishJob(ctx, req.RequestID, syncjob.Failed, "not queued: "+err.Error())
			continue
		}
		published++
	}
	return map[string]any{"accounts": len(accts), "published": published, "skipped_syncing": skipped, "failed": len(errs)},
		summarize(errs, len(accts))
}

// rankDaily stores today's league-v4 entries of every active account as
// league_entries snapshots dated at's UTC day.
func (s *Scheduler) rankDaily(ctx context.Context, at time.Time) (map[string]any, error) {
	if s.d.Riot == nil {
		return nil, errors.New("no Riot client")
	}
	accts, err := s.d.Store.ActiveAccounts(ctx)
	if err != nil {
		return nil, err
	}
	stored := 0
	var errs []error
	for _, a := range accts {
		p, err := riot.ParsePlatform(a.Platform)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a.PUUID, err))
			continue
		}
		entries, err := s.d.Riot.LeagueEntriesByPUUID(riot.WithBackground(ctx), p, a.PUUID)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a.PUUID, err))
			continue
		}
		rows := make([]store.LeagueEntry, 0, len(entries))
		for _, e := range entries {
			rows = append(rows, store.LeagueEntry{PUUID: a.PUUID, QueueType: e.QueueType, SnapshotDate: at.UTC(),
				Platform: string(p), LeagueID: e.LeagueID, Tier: e.Tier, Rank: e.Rank, LeaguePoints: int(e.LeaguePoints),
				Wins: int(e.Wins), Losses: int(e.Losses), HotStreak: e.HotStreak, Veteran: e.Veteran,
				FreshBlood: e.FreshBlood, Inactive: e.Inactive, FetchedAt: s.d.Now()})
		}
		if err := s.d.Store.UpsertLeagueEntries(ctx, rows); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a.PUUID, err))
			continue
		}
		stored += len(rows)
	}
	return map[string]any{"accounts": len(accts), "entries": stored, "failed": len(errs)}, summarize(errs, len(accts))
}

// WeekOf is the report period of a weekly run at at: the 7 UTC days before
// at's day.
func WeekOf(at time.Time) (from, to time.Time) {
	u := at.UTC()
	to = time.Date(u.Year(), u.Month(), u.Day(), 0, 0, 0, 0, time.UTC)
	return to.AddDate(0, 0, -7), to
}

// weeklyReport stores and announces every active account's report for the
// week before at: games started in [from, to), and the LP change between
// the first and last daily snapshots from `from` through at's day (the
// 03:00 snapshot of the report day closes the week).
func (s *Scheduler) weeklyReport(ctx context.Context, at time.Time) (map[string]any, error) {
	accts, err := s.d.Store.ActiveAccounts(ctx)
	if err != nil {
		return nil, err
	}
	from, to := WeekOf(at)
	saved := 0
	var errs []error
	for _, a := range accts {
		w, err := s.d.Store.WeeklyStats(ctx, a.PUUID, from, to)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var lp *int
		for _, q := range []string{"RANKED_SOLO_5x5", "RANKED_FLEX_SR"} {
			if lp, err = s.d.Store.LPChange(ctx, a.PUUID, q, from, to.AddDate(0, 0, 1)); err != nil || lp != nil {
				break
			}
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r := store.WeeklyReport{PUUID: a.PUUID, WeekStart: from, WeeklyStats: w, LPChange: lp}
		if err := s.d.Store.SaveWeeklyReport(ctx, r); err != nil {
			errs = append(errs, err)
			continue
		}
		n := WeeklyNotice{PUUID: a.PUUID, WeekStart: from.Format(time.DateOnly), Games: w.Games, Wins: w.Wins,
			Kills: w.Kills, Deaths: w.Deaths, Assists: w.Assists, KDA: w.KDA, TopChampions: w.TopChampions,
			LPChange: lp, At: s.d.Now()}
		if n.TopChampions == nil {
			n.TopChampions = []store.ChampionStat{}
		}
		msgID := bus.WeeklyReportMsgID(redact.ShortHash(a.PUUID), n.WeekStart)
		if _, err := natsx.Publish(ctx, s.d.JS, s.d.Subjects.WeeklyReport(), n, jetstream.WithMsgID(msgID)); err != nil {
			errs = append(errs, fmt.Errorf("%s: announce: %w", a.PUUID, err))
			continue
		}
		saved++
	}
	return map[string]any{"accounts": len(accts), "reports": saved, "week_start": from.Format(time.DateOnly),
		"failed": len(errs)}, summarize(errs, len(accts))
}

func summarize(errs []error, of int) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d accounts failed; first: %w", len(errs), of, errs[0])
}

// Process is the retry-sweeper process: the sweeper and, beside it, the
// scheduler. Run first makes a crash-recovery pass (design 001: syncs left in
// syncing with no live lock and no progress for StuckAfter are reset and
// queued again), whatever the sweeper's hourly tick lock says, then runs
// both until ctx ends.
type Process struct {
	*Service
	Scheduler *Scheduler
}

// RecoverNow resets and re-queues stuck syncs once, logging the pass in the
// jobs table (type recovery) when it recovered any. It returns how many.
func (p *Process) RecoverNow(ctx context.Context) (int, error) {
	now := p.d.Now()
	n, err := p.recover(ctx, now)
	if n > 0 || err != nil {
		j := store.Job{ID: fmt.Sprintf("recovery-%d-%s", now.UnixNano(), redact.ShortHash(fmt.Sprint(now.UnixNano(), n))),
			Type: JobRecovery, Status: syncjob.Completed, RequestedAt: now, StartedAt: now, FinishedAt: p.d.Now()}
		j.Detail, _ = json.Marshal(map[string]any{"recovered": n, "trigger": "startup"})
		if err != nil {
			j.Status, j.Error = syncjob.Failed, err.Error()
		}
		if p.Scheduler != nil {
			if jerr := p.Scheduler.d.Store.RecordJob(ctx, j); jerr != nil {
				p.d.Logger.WarnContext(ctx, "job log: recovery not recorded", "err", jerr)
			}
		}
	}
	return n, err
}

// Run makes the start-up recovery pass, then runs the sweeper and the
// scheduler until ctx ends.
func (p *Process) Run(ctx context.Context) error {
	if n, err := p.RecoverNow(ctx); err != nil && ctx.Err() == nil {
		p.d.Logger.WarnContext(ctx, "start-up recovery failed", "err", err)
	} else if n > 0 {
		p.d.Logger.InfoContext(ctx, "start-up recovery re-queued stuck syncs", "count", n)
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return p.Service.Run(ctx) })
	if p.Scheduler != nil {
		g.Go(func() error { return p.Scheduler.Run(ctx) })
	}
	return g.Wait()
}
