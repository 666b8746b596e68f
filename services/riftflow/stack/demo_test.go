package stack

import (
	"testing"
	"time"

	"github.com/riftflow/riftflow/pkg/bus"
)

// TestPlanDemo: matches more than a timeline retention apart go to separate
// syncs, each one day after its newest match; the first is a full backfill.
func TestPlanDemo(t *testing.T) {
	day := 24 * time.Hour
	t0 := time.Date(2022, 1, 28, 5, 0, 0, 0, time.UTC)
	ms := func(ts ...time.Time) []int64 {
		var out []int64
		for _, x := range ts {
			out = append(out, x.UnixMilli())
		}
		return out
	}
	plan := PlanDemo(ms(t0.Add(33*day), t0, t0.Add(750*day), t0.Add(880*day)))
	want := []Phase{
		{At: t0.Add(34 * day), Mode: bus.ModeFull, Matches: 2},
		{At: t0.Add(881 * day), Mode: bus.ModeLatest, Matches: 2},
	}
	if len(plan) != len(want) {
		t.Fatalf("plan %+v, want %+v", plan, want)
	}
	for i := range want {
		if !plan[i].At.Equal(want[i].At) || plan[i].Mode != want[i].Mode || plan[i].Matches != want[i].Matches {
			t.Errorf("phase %d: %+v, want %+v", i, plan[i], want[i])
		}
	}
}
