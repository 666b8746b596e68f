package riftflow

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/services/riftflow/stack/stacktest"
)

// TestDemoStoresEveryRecordedMatch runs the demo as make run does and
// checks that every recorded match of the demo player is stored, with its
// participants and its timeline, and that the summary says so.
func TestDemoStoresEveryRecordedMatch(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{Demo: true})
	p := h.Demo()
	var out bytes.Buffer
	if err := runDemo(h.Ctx, h.St, h.Plan, &out, 3*time.Minute, time.Now()); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	stored := h.Count(`SELECT count(*) FROM match_participants WHERE puuid = $1`, p.PUUID)
	participants := h.Count(`SELECT count(*) FROM match_participants mp JOIN match_participants me
		ON me.match_id = mp.match_id AND me.puuid = $1`, p.PUUID)
	timelines := h.Count(`SELECT count(*) FROM match_timelines t JOIN match_participants me
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
