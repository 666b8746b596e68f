package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/services/riftflow/stack/stacktest"
	"github.com/riftflow/riftflow/streams"
)

// TestFetchedPayloadNotRefetchedWhileResultsUnpublishable: while FETCHED
// cannot take results (here its subjects are withdrawn for 3 s, as when
// the stream has lost its quorum), a fetcher holding a payload keeps it and
// publishes it again instead of giving the command back, so Riot is asked
// once per match: a failed publish never gives the command back for a
// delivery that would call Riot again.
func TestFetchedPayloadNotRefetchedWhileResultsUnpublishable(t *testing.T) {
	// FETCHED refuses results; then FETCH refuses the timeline command a
	// fetched match queues (the match must not be fetched again).
	for _, stream := range []string{streams.StreamFetched, streams.StreamFetch} {
		t.Run(stream, func(t *testing.T) { unpublishableFor(t, stream) })
	}
}

func unpublishableFor(t *testing.T, stream string) {
	h := stacktest.Start(t, stacktest.Options{Sim: sim.Options{
		Synthetic: sim.Synthetic{Players: 1, MatchesPerPlayer: 6, Platform: "na1"}}})
	ctx, cancel := context.WithTimeout(h.Ctx, 30*time.Second)
	defer cancel()
	js := h.St.Infra.JS
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	off := cfg
	off.Subjects = []string{"riftflow-test.withdrawn.>"}
	withdraw := func() {
		if _, err := js.UpdateStream(h.Ctx, off); err != nil {
			t.Error(err)
		}
	}
	if stream == streams.StreamFetched {
		withdraw()
	}
	go func() {
		// FETCH goes when Riot has answered a first getMatch (the fetch
		// commands are queued by then); both come back 3 s later.
		for h.St.Sim.Stats().MethodCount(sim.MethodMatch, 200) == 0 && h.Ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		if stream == streams.StreamFetch {
			withdraw()
		}
		time.Sleep(3 * time.Second)
		if _, err := js.UpdateStream(h.Ctx, cfg); err != nil {
			t.Error(err)
		}
	}()
	p := h.St.Sim.Truth().Players[sim.SyntheticPUUID("na1", 1)]
	ev, err := h.Ingest(bus.IngestRequest{PUUID: p.PUUID, Platform: "na1", Mode: bus.ModeFull, LookbackDays: 60, Count: 6}, time.Minute)
	if err != nil || ev.Status != "completed" {
		t.Fatalf("sync: %+v %v", ev, err)
	}
	h.WaitIdle(30 * time.Second)
	calls := h.St.Sim.Stats().MatchCalls
	for _, m := range p.Matches {
		if calls[m.ID] != 1 {
			t.Errorf("%s: %d getMatch calls, want 1", m.ID, calls[m.ID])
		}
		if n := h.Count(`SELECT count(*) FROM matches WHERE match_id = $1`, m.ID); n != 1 {
			t.Errorf("%s: %d rows stored", m.ID, n)
		}
	}
}
