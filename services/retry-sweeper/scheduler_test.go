package retrysweeper_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/riotclient"
	"github.com/riftflow/riftflow/pkg/store"
	retrysweeper "github.com/riftflow/riftflow/services/retry-sweeper"
)

// schedulers is a test's scheduler world: a fresh database, the simulator
// with synthetic players (the rank job calls league-v4), and replicas
// built by OpenScheduler on one injected clock, logging to logs, sharing
// one Riot client.
type schedulers struct {
	*stagetest.Env
	logs stagetest.Logs
	now  func() time.Time
	riot *riot.Client
}

func newSchedulers(t *testing.T, players int, now func() time.Time, env map[string]string) *schedulers {
	t.Helper()
	e := stagetest.New(t, stagetest.Options{DB: true, Env: env,
		Riot: &sim.Options{Synthetic: sim.Synthetic{Players: players, MatchesPerPlayer: 2}}})
	rc, _, _, err := riotclient.Open(t.Context(), e.Process)
	if err != nil {
		t.Fatal(err)
	}
	return &schedulers{Env: e, now: now, riot: rc}
}

// replica builds one scheduler on the shared clock and logs.
func (s *schedulers) replica() *retrysweeper.Scheduler {
	s.T.Helper()
	inf := *s.Process
	inf.Now = s.now
	inf.Log = slog.New(slog.NewTextHandler(&s.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sc, err := retrysweeper.OpenScheduler(s.T.Context(), &inf, s.Store, s.riot)
	if err != nil {
		s.T.Fatal(err)
	}
	return sc
}

// run runs n replicas until every one has taken or skipped want runs
// between them.
func (s *schedulers) run(n, want int, started func()) {
	s.T.Helper()
	ctx, cancel := context.WithCancel(s.T.Context())
	var wg sync.WaitGroup
	for range n {
		sc := s.replica()
		wg.Go(func() { sc.Run(ctx) })
	}
	if started != nil {
		started()
	}
	s.Wait("every replica to take or skip each run", func() bool {
		return s.logs.Count("scheduled job ran")+s.logs.Count("owned by another replica") >= want
	})
	cancel()
	wg.Wait()
}

// Two replicas on one clock (gocron on the injected clock): when the clock
// jumps past Monday 04:00, each of the three jobs due runs once, for its
// latest scheduled time (the hourly latest sync for 04:00, not 03:00 as
// well), on one replica (one wins each cron-locks key,
// the other skips), the job log holds one completed row per job, the
// latest job requests a background latest sync per linked account and the
// weekly job publishes a notice per account, and the rank job stores a snapshot.
func TestSchedulerRunsOnceAcrossReplicas(t *testing.T) {
	monday := stagetest.NextMonday(time.Now())
	var clock atomic.Int64
	clock.Store(monday.Add(2*time.Hour + 59*time.Minute).UnixNano())
	s := newSchedulers(t, 2, func() time.Time { return time.Unix(0, clock.Load()).UTC() },
		map[string]string{"SCHEDULE_POLL": "20ms", "SCHEDULE_CATCH_UP": "false"})
	for i := 1; i <= 2; i++ {
		if err := s.Store.LinkAccount(t.Context(), store.Account{PUUID: sim.SyntheticPUUID("na1", i), Platform: "na1", Region: "americas"}); err != nil {
			t.Fatal(err)
		}
	}
	reqs, notices := s.Subscribe(s.Process.Subjects.IngestFor(bus.Background)), s.Subscribe(s.Process.Subjects.WeeklyReport())
	s.run(2, 6, func() {
		s.Wait("both replicas to start", func() bool { return s.logs.Count("msg=schedule ") == 8 })
		clock.Store(monday.Add(4*time.Hour + 30*time.Second).UnixNano())
	})
	if r, k := s.logs.Count("scheduled job ran"), s.logs.Count("owned by another replica"); r != 3 || k != 3 {
		t.Errorf("%d runs and %d skips, want 3 and 3", r, k)
	}
	for job, at := range map[string]time.Time{retrysweeper.JobLatestAll: monday.Add(4 * time.Hour),
		retrysweeper.JobRankDaily: monday.Add(3 * time.Hour), retrysweeper.JobWeeklyReport: monday.Add(4 * time.Hour)} {
		if n := s.Count(`SELECT count(*) FROM jobs WHERE id = $1 AND type = $2 AND status = 'completed'`, retrysweeper.JobID(job, at), job); n != 1 {
			t.Errorf("job %s at %v not completed in the job log", job, at)
		}
	}
	if n := s.Count(`SELECT count(*) FROM jobs WHERE type IN ('latest_all', 'rank_daily', 'weekly_report')`); n != 3 {
		t.Errorf("%d scheduled job rows, want 3", n)
	}
	for range 2 {
		var r bus.IngestRequest
		if err := json.Unmarshal(stagetest.Next(t, reqs, "a scheduled request"), &r); err != nil {
			t.Fatal(err)
		}
		if r.Trigger != "schedule" || r.Priority != bus.Background || r.Mode != bus.ModeLatest {
			t.Errorf("scheduled request %+v, want a background latest sync by the schedule", r)
		}
	}
	for range 2 {
		stagetest.Next(t, notices, "a weekly notice (one per account)")
	}
	select {
	case raw := <-reqs:
		t.Errorf("a third scheduled request: %s", raw)
	case raw := <-notices:
		t.Errorf("a third weekly notice: %s", raw)
	case <-time.After(200 * time.Millisecond):
	}
	if n := s.Count(`SELECT count(*) FROM league_entries WHERE snapshot_date = $1::date`, monday); n == 0 {
		t.Error("no league snapshot stored for the rank run")
	}
}

// Schedulers started after their jobs' scheduled times (nobody ran them)
// run each job's last missed time exactly once across two replicas, a
// scheduler started later runs none again, and the prune job deletes
// finished job rows older than JOB_HISTORY_RETENTION, keeping younger and
// unfinished ones, and of each type's failed rows keeps only the newest
// JOB_HISTORY_MAX_FAILED (design 002's removeOnFail).
func TestSchedulerCatchesUpOnceAndPrunes(t *testing.T) {
	monday := stagetest.NextMonday(time.Now())
	start := monday.Add(5*time.Hour + 10*time.Minute) // after every job's time that day
	s := newSchedulers(t, 1, func() time.Time { return start },
		map[string]string{"SCHEDULE_POLL": "20ms", "JOB_HISTORY_RETENTION": "720h", "JOB_HISTORY_MAX_FAILED": "2"})
	failed := func(id, typ string, hoursAgo int) store.Job {
		at := start.Add(-time.Duration(hoursAgo) * time.Hour)
		return store.Job{ID: id, Type: typ, Status: "failed", Error: "x", RequestedAt: at, FinishedAt: at}
	}
	for _, j := range []store.Job{
		{ID: "old-done", Type: "sync", Status: "completed", RequestedAt: start.Add(-100 * 24 * time.Hour), FinishedAt: start.Add(-100 * 24 * time.Hour)},
		{ID: "old-running", Type: "sync", Status: "running", RequestedAt: start.Add(-100 * 24 * time.Hour)},
		{ID: "young-done", Type: "sync", Status: "completed", RequestedAt: start.Add(-24 * time.Hour), FinishedAt: start.Add(-24 * time.Hour)},
		failed("failed-3", "sync", 3), failed("failed-2", "sync", 2), failed("failed-1", "sync", 1),
		failed("weekly-failed", "weekly_report", 30),
	} {
		if err := s.Store.RecordJob(t.Context(), j); err != nil {
			t.Fatal(err)
		}
	}
	s.run(2, 8, nil)
	if n := s.logs.Count("caught up a missed scheduled run"); n != 4 {
		t.Errorf("%d catch-up runs, want 4 (one per job)", n)
	}
	for job, at := range map[string]time.Time{retrysweeper.JobLatestAll: monday.Add(5 * time.Hour),
		retrysweeper.JobRankDaily: monday.Add(3 * time.Hour), retrysweeper.JobWeeklyReport: monday.Add(4 * time.Hour),
		retrysweeper.JobPruneJobs: monday.Add(4*time.Hour + 30*time.Minute)} {
		if n := s.Count(`SELECT count(*) FROM jobs WHERE id = $1 AND status = 'completed'`, retrysweeper.JobID(job, at)); n != 1 {
			t.Errorf("missed run %s at %v not caught up", job, at)
		}
	}
	for id, want := range map[string]int{"old-done": 0, "old-running": 1, "young-done": 1,
		"failed-3": 0, "failed-2": 1, "failed-1": 1, "weekly-failed": 1} {
		if n := s.Count(`SELECT count(*) FROM jobs WHERE id = $1`, id); n != want {
			t.Errorf("job %s: %d rows after pruning, want %d", id, n, want)
		}
	}
	s.logs.Reset()
	s.run(1, 4, nil)
	if n := s.logs.Count("caught up a missed scheduled run"); n != 0 {
		t.Errorf("a later scheduler caught up %d runs again", n)
	}
}

// A run whose process exited mid-run (its jobs row still running hours
// later) is recorded failed when the job next runs.
func TestSchedulerJobNeverLeftRunning(t *testing.T) {
	at := time.Now().UTC().Truncate(time.Hour)
	s := newSchedulers(t, 1, func() time.Time { return at }, map[string]string{"SCHEDULE_ENABLE": "false"})
	crashed := retrysweeper.JobID(retrysweeper.JobLatestAll, at.Add(-24*time.Hour))
	if err := s.Store.RecordJob(t.Context(), store.Job{ID: crashed, Type: retrysweeper.JobLatestAll, Status: "running",
		RequestedAt: at.Add(-24 * time.Hour), StartedAt: at.Add(-24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if ran, err := s.replica().RunJob(t.Context(), retrysweeper.JobLatestAll, at); !ran || err != nil {
		t.Fatalf("run: %v %v", ran, err)
	}
	status := func(id string) (st, msg string) {
		t.Helper()
		if err := s.DB.QueryRow(t.Context(), `SELECT status, coalesce(error, '') FROM jobs WHERE id = $1`, id).Scan(&st, &msg); err != nil {
			t.Fatal(err)
		}
		return st, msg
	}
	if st, msg := status(crashed); st != "failed" || !strings.Contains(msg, "abandoned") {
		t.Errorf("crashed run: %s %q, want failed (abandoned)", st, msg)
	}
	if st, _ := status(retrysweeper.JobID(retrysweeper.JobLatestAll, at)); st != "completed" {
		t.Errorf("this run: %s, want completed", st)
	}
}

// A failing scheduled job is visible to Prometheus, not only in the job
// log: riftflow_scheduled_job_runs_total counts each finished run by job
// type and result, every series starting at 0. The rank job of a replica
// without a Riot client (no RIOT_API_KEY) fails; the latest sync completes.
func TestScheduledJobRunsMetric(t *testing.T) {
	at := time.Now().UTC().Truncate(time.Hour)
	s := newSchedulers(t, 1, func() time.Time { return at }, map[string]string{"SCHEDULE_ENABLE": "false"})
	// After the test environment's telemetry set its own provider.
	reader := sdkmetric.NewManualReader()
	prev := otel.GetMeterProvider()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	t.Cleanup(func() { otel.SetMeterProvider(prev) })
	inf := *s.Process
	inf.Now = s.now
	sc, err := retrysweeper.OpenScheduler(t.Context(), &inf, s.Store, nil)
	if err != nil {
		t.Fatal(err)
	}
	runs := func() map[string]int64 {
		t.Helper()
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(t.Context(), &rm); err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != "riftflow.scheduled_job.runs" {
					continue
				}
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					job, _ := dp.Attributes.Value("job.type")
					result, _ := dp.Attributes.Value("result")
					got[job.AsString()+"/"+result.AsString()] = dp.Value
				}
			}
		}
		return got
	}
	if got := runs(); len(got) != 8 || got[retrysweeper.JobRankDaily+"/failed"] != 0 {
		t.Fatalf("before any run: %v, want 4 jobs x 2 results at 0", got)
	}
	if ran, err := sc.RunJob(t.Context(), retrysweeper.JobRankDaily, at); !ran || err == nil || !strings.Contains(err.Error(), "no Riot client") {
		t.Fatalf("rank job without a Riot client: ran %v, err %v; want a failure", ran, err)
	}
	if ran, err := sc.RunJob(t.Context(), retrysweeper.JobLatestAll, at); !ran || err != nil {
		t.Fatalf("latest sync: ran %v, err %v", ran, err)
	}
	got := runs()
	for key, want := range map[string]int64{retrysweeper.JobRankDaily + "/failed": 1, retrysweeper.JobRankDaily + "/completed": 0,
		retrysweeper.JobLatestAll + "/completed": 1, retrysweeper.JobLatestAll + "/failed": 0} {
		if got[key] != want {
			t.Errorf("runs %s = %d, want %d (all: %v)", key, got[key], want, got)
		}
	}
}
