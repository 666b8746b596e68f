package retrysweeper_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/pkg/store"
	retrysweeper "github.com/riftflow/riftflow/services/retry-sweeper"
)

// TestSweepCapsFailedJobs (issue 26's point 9): the cap on failed job
// rows (JOB_HISTORY_MAX_FAILED, design 002's removeOnFail) holds after
// every sweep, not only after the daily prune: of each type's failed rows
// the newest JobMaxFailed stay, and no pending, running, completed or
// rejected row is touched, however old. A JobMaxFailed of 0 keeps them all.
func TestSweepCapsFailedJobs(t *testing.T) {
	e := stagetest.New(t, stagetest.Options{DB: true})
	ctx, st := t.Context(), stageInfra(e).Store
	now := time.Now()
	ago := func(h int) time.Time { return now.Add(-time.Duration(h) * time.Hour) }
	jobs := []store.Job{
		{ID: "pending", Type: "sync", Status: "pending", RequestedAt: ago(50)},
		{ID: "running", Type: "sync", Status: "running", RequestedAt: ago(50), StartedAt: ago(50)},
		{ID: "completed", Type: "sync", Status: "completed", RequestedAt: ago(50), FinishedAt: ago(50)},
		{ID: "rejected", Type: "sync", Status: "rejected", RequestedAt: ago(50), FinishedAt: ago(50)},
		{ID: "weekly-failed", Type: "weekly_report", Status: "failed", RequestedAt: ago(60), FinishedAt: ago(60)},
	}
	for i := 1; i <= 5; i++ {
		jobs = append(jobs, store.Job{ID: "failed-" + strconv.Itoa(i), Type: "sync", Status: "failed", Error: "x",
			RequestedAt: ago(i), FinishedAt: ago(i)})
	}
	for _, j := range jobs {
		if err := st.RecordJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	remaining := func() map[string]bool {
		out := map[string]bool{}
		all, err := st.Jobs(ctx, store.JobFilter{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range all {
			out[j.ID] = true
		}
		return out
	}

	if rep, err := newSweeper(e, retrysweeper.Config{}, nil).Sweep(ctx); err != nil || rep.FailedJobsCapped != 0 || len(remaining()) != 10 {
		t.Fatalf("sweep without a cap: %+v %v, %d rows left, want all 10", rep, err, len(remaining()))
	}
	rep, err := newSweeper(e, retrysweeper.Config{JobMaxFailed: 2}, nil).Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	left := remaining()
	for _, id := range []string{"pending", "running", "completed", "rejected", "weekly-failed", "failed-1", "failed-2"} {
		if !left[id] {
			t.Errorf("job %s deleted by the sweep's cap", id)
		}
	}
	for _, id := range []string{"failed-3", "failed-4", "failed-5"} {
		if left[id] {
			t.Errorf("failed job %s kept beyond the newest 2 of its type", id)
		}
	}
	if rep.FailedJobsCapped != 3 {
		t.Errorf("sweep report: %d failed rows capped, want 3", rep.FailedJobsCapped)
	}
}
