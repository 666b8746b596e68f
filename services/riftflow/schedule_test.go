package riftflow

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/store"
	sweeper "github.com/riftflow/riftflow/services/retry-sweeper"
)

// TestSchedulerCatchesUpOnceAndPrunes: schedulers started after their
// jobs' scheduled times (nobody ran them) run each job's last missed time
// exactly once across two replicas, a scheduler started later runs none
// again, and the prune job deletes finished job rows older than
// JOB_HISTORY_RETENTION, keeping younger and unfinished ones.
func TestSchedulerCatchesUpOnceAndPrunes(t *testing.T) {
	h := startHarness(t, harnessOptions{env: map[string]string{"SCHEDULE_ENABLE": "false"},
		sim: sim.Options{Synthetic: sim.Synthetic{Players: 1, MatchesPerPlayer: 2}}})
	monday := nextMonday(time.Now())
	start := monday.Add(5*time.Hour + 10*time.Minute) // after every job's time that day
	now := func() time.Time { return start }
	for _, j := range []store.Job{
		{ID: "old-done", Type: "sync", Status: "completed", RequestedAt: start.Add(-100 * 24 * time.Hour), FinishedAt: start.Add(-100 * 24 * time.Hour)},
		{ID: "old-running", Type: "sync", Status: "running", RequestedAt: start.Add(-100 * 24 * time.Hour)},
		{ID: "young-done", Type: "sync", Status: "completed", RequestedAt: start.Add(-24 * time.Hour), FinishedAt: start.Add(-24 * time.Hour)},
	} {
		if err := h.st.Infra.Store.RecordJob(h.ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("SCHEDULE_ENABLE", "true")
	t.Setenv("SCHEDULE_POLL", "20ms")
	t.Setenv("JOB_HISTORY_RETENTION", "720h")
	logs := &syncBuffer{}
	run := func(replicas int) {
		ctx, cancel := context.WithCancel(h.ctx)
		var wg sync.WaitGroup
		for range replicas {
			inf := *h.st.Infra
			inf.Now = now
			inf.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			sc, err := sweeper.SchedulerFromInfra(h.ctx, &inf)
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() { defer wg.Done(); sc.Run(ctx) }()
		}
		want := 4 * replicas
		waitFor(t, "every replica to take or skip each missed run", time.Minute, func() bool {
			s := logs.String()
			return strings.Count(s, "scheduled job ran")+strings.Count(s, "owned by another replica") >= want
		})
		cancel()
		wg.Wait()
	}
	run(2)
	if n := strings.Count(logs.String(), "caught up a missed scheduled run"); n != 4 {
		t.Errorf("%d catch-up runs, want 4 (one per job)", n)
	}
	for job, at := range map[string]time.Time{sweeper.JobLatestAll: monday.Add(5 * time.Hour),
		sweeper.JobRankDaily: monday.Add(3 * time.Hour), sweeper.JobWeeklyReport: monday.Add(4 * time.Hour),
		sweeper.JobPruneJobs: monday.Add(4*time.Hour + 30*time.Minute)} {
		if n := h.count(`SELECT count(*) FROM jobs WHERE id = $1 AND status = 'completed'`, sweeper.JobID(job, at)); n != 1 {
			t.Errorf("missed run %s at %v not caught up", job, at)
		}
	}
	for id, want := range map[string]int{"old-done": 0, "old-running": 1, "young-done": 1} {
		if n := h.count(`SELECT count(*) FROM jobs WHERE id = $1`, id); n != want {
			t.Errorf("job %s: %d rows after pruning, want %d", id, n, want)
		}
	}
	// A scheduler started later finds every missed run done.
	*logs = syncBuffer{}
	run(1)
	if n := strings.Count(logs.String(), "caught up a missed scheduled run"); n != 0 {
		t.Errorf("a later scheduler caught up %d runs again", n)
	}
}
