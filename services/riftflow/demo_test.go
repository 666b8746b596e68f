package riftflow

import (
	"bytes"
	"strings"
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
	plan := planDemo(ms(t0.Add(33*day), t0, t0.Add(750*day), t0.Add(880*day)))
	want := []demoPhase{
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

// TestDemoStoresEveryRecordedMatch runs the demo as make run does and
// checks that every recorded match of the demo player is stored, with its
// participants and its timeline, and that the summary says so.
func TestDemoStoresEveryRecordedMatch(t *testing.T) {
	if testing.Short() {
		t.Skip("whole pipeline")
	}
	h := startHarness(t, harnessOptions{demo: true})
	p := h.demo()
	var out bytes.Buffer
	if err := runDemo(h.ctx, h.st, h.plan, &out, 3*time.Minute, time.Now()); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	stored := h.count(`SELECT count(*) FROM match_participants WHERE puuid = $1`, p.PUUID)
	participants := h.count(`SELECT count(*) FROM match_participants mp JOIN match_participants me
		ON me.match_id = mp.match_id AND me.puuid = $1`, p.PUUID)
	timelines := h.count(`SELECT count(*) FROM match_timelines t JOIN match_participants me
		ON me.match_id = t.match_id AND me.puuid = $1`, p.PUUID)
	if stored != p.Matches || p.Matches != 16 || timelines != 16 || participants != 160 {
		t.Fatalf("stored %d matches (recorded %d, want 16), %d participants (want 160), %d timelines (want 16)\n%s",
			stored, p.Matches, participants, timelines, out.String())
	}
	for _, w := range []string{"player", "LugnutsK#000", "psql", "jaeger", "sync 2/2"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("demo output lacks %q:\n%s", w, out.String())
		}
	}
}
