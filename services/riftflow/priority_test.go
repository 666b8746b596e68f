package riftflow

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/bus"
)

// TestInteractiveBeatsBackfill: with a background backlog that needs the
// whole americas budget for a minute, a user's interactive request for a
// player on the same route completes while most of the backlog is still
// waiting. Interactive fetches have their own queue per region
// (lol.match.fetch.<region>.interactive), and the rate limiter serves
// interactive calls first.
func TestInteractiveBeatsBackfill(t *testing.T) {
	const backlog = 400
	h := startHarness(t, harnessOptions{sim: sim.Options{
		Limits:    sim.RateLimits{App: "10:1,600:60"},
		Synthetic: sim.Synthetic{Players: 1, MatchesPerPlayer: backlog},
	}})
	js := h.st.Infra.JS
	for i := range backlog {
		id := fmt.Sprintf("NA1_%d", sim.SyntheticGameIDBase+i)
		cmd := bus.FetchCommand{MatchID: id, Kind: bus.KindMatch, Region: "americas", Attempt: 1,
			Priority: bus.Background, RequestID: "backfill"}
		if _, err := js.PublishAsync(h.st.Infra.Subjects.FetchFor("americas", bus.Background), mustJSON(cmd), jetstream.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("backlog publish did not complete")
	}
	backfill := func() int {
		return h.count(`SELECT count(*) FROM matches WHERE match_id LIKE $1`, fmt.Sprintf("NA1_%d%%", sim.SyntheticGameIDBase/1_000_000_000))
	}
	// The backlog is being worked before the user arrives.
	deadline := time.Now().Add(20 * time.Second)
	for backfill() < 5 {
		if time.Now().After(deadline) {
			t.Fatal("the backlog is not being worked")
		}
		time.Sleep(100 * time.Millisecond)
	}

	p := h.demo() // on na1: the same americas budget as the backlog
	ev, err := h.ingest(bus.IngestRequest{RiotID: p.GameName + "#" + p.TagLine, Platform: p.Platform,
		Mode: bus.ModeFull, LookbackDays: 730, Count: 1000}, time.Minute)
	if err != nil || ev.Status != "completed" || ev.Total == 0 {
		t.Fatalf("interactive sync: %+v %v", ev, err)
	}
	done := backfill()
	t.Logf("interactive sync of %d matches completed with %d of %d backfill matches stored", ev.Total, done, backlog)
	// In one queue the user's fetches would wait for the whole backlog
	// (≥ 400 matches at 10 requests/s); here they overtake it.
	if done > backlog/2 {
		t.Errorf("%d of %d backfill matches were stored before the interactive sync completed: it waited behind the backlog", done, backlog)
	}
}
