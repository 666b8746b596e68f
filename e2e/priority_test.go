package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/natstest"
	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/control"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/services/riftflow/stack/stacktest"
	"github.com/riftflow/riftflow/streams"
)

// TestInteractiveBeatsBackfill: with a background backlog that needs the
// whole americas budget for a minute, a user's interactive request for a
// player on the same route completes while most of the backlog is still
// waiting. Interactive fetches have their own queue per region
// (lol.match.fetch.<region>.interactive), and the rate limiter serves
// interactive calls first.
func TestInteractiveBeatsBackfill(t *testing.T) {
	const backlog = 400
	h := stacktest.Start(t, stacktest.Options{Sim: sim.Options{
		Limits:    sim.RateLimits{App: "10:1,600:60"},
		Synthetic: sim.Synthetic{Players: 1, MatchesPerPlayer: backlog},
	}})
	js := h.St.Infra.JS
	for i := range backlog {
		id := fmt.Sprintf("NA1_%d", sim.SyntheticGameIDBase+i)
		cmd := bus.FetchCommand{MatchID: id, Kind: bus.KindMatch, Region: "americas", Attempt: 1,
			Priority: bus.Background, RequestID: "backfill"}
		if _, err := js.PublishAsync(h.St.Infra.Subjects.FetchFor("americas", bus.Background), mustJSON(cmd), jetstream.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("backlog publish did not complete")
	}
	backfill := func() int {
		return h.Count(`SELECT count(*) FROM matches WHERE match_id LIKE $1`, fmt.Sprintf("NA1_%d%%", sim.SyntheticGameIDBase/1_000_000_000))
	}
	// The backlog is being worked before the user arrives.
	deadline := time.Now().Add(20 * time.Second)
	for backfill() < 5 {
		if time.Now().After(deadline) {
			t.Fatal("the backlog is not being worked")
		}
		time.Sleep(100 * time.Millisecond)
	}

	p := h.Demo() // on na1: the same americas budget as the backlog
	ev, err := h.Ingest(bus.IngestRequest{RiotID: p.GameName + "#" + p.TagLine, Platform: p.Platform,
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

// TestInteractiveFirstAtEveryStage: a backfill floods all four stages at
// once (ingest requests, sync commands, fetch commands and fetch results,
// all background), then a user's interactive sync runs. It completes while
// every stage's background queue still holds most of its backlog: at no
// stage did the user's work wait for it. The resolver, lister and fetcher
// backlogs are slow because they share a small Riot budget (which serves
// interactive calls first); the persister's is stopped outright by a
// transaction the test holds open on the backlog's ledger rows, so there
// the assertion is exact (none of it stored), and once released the whole
// backlog is stored: it was real work in the same process.
func TestInteractiveFirstAtEveryStage(t *testing.T) {
	const players, matchesEach, results = 120, 2, 200
	h := stacktest.Start(t, stacktest.Options{Sim: sim.Options{
		Limits: sim.RateLimits{App: "10:1,600:60"},
		// One more synthetic player: the user, whose matches all exist.
		Synthetic: sim.Synthetic{Players: players + 1, MatchesPerPlayer: matchesEach},
	}})
	ctx := h.Ctx
	js := h.St.Infra.JS
	subj := h.St.Infra.Subjects
	ctl, err := h.St.Infra.KV(ctx, streams.BucketControl)
	if err != nil {
		t.Fatal(err)
	}
	// Pause, so the whole backlog is queued before anything runs: once
	// the stages' switch (one for all, watched on the control bucket)
	// shows it, a pull opened before then ends within PERSIST_MAX_WAIT
	// (200 ms) for the persister, whose batch would be handled; the other
	// stages hold what such a pull delivers, unhandled. (A fixed sleep
	// after the write was too short on a loaded machine: the persister
	// stored 7 results before it saw the switch.)
	if err := control.Set(ctx, ctl, control.State{Paused: true, By: "test"}); err != nil {
		t.Fatal(err)
	}
	stacktest.WaitFor(t, "the stages to see the pause switch", 30*time.Second, h.St.Infra.Pause.Paused)
	time.Sleep(2 * natsx.HoldPoll)

	// Resolver: background requests by Riot ID (one account lookup each)
	// for the first half of the synthetic players.
	for i := 1; i <= players/2; i++ {
		req := bus.IngestRequest{RequestID: fmt.Sprintf("bg-ingest-%d", i), RiotID: sim.SyntheticRiotID(i).String(),
			Platform: "na1", Mode: bus.ModeLatest, Priority: bus.Background, Trigger: "test"}
		publishPrio(t, js, subj.IngestFor(bus.Background), req, "ingest:"+req.RequestID)
	}
	// Lister: background sync commands for the other half.
	for i := players/2 + 1; i <= players; i++ {
		cmd := bus.SyncCommand{RequestID: fmt.Sprintf("bg-sync-%d", i), PUUID: sim.SyntheticPUUID("na1", i), Platform: "na1",
			Region: "americas", Mode: bus.ModeLatest, Count: matchesEach, Lookback: 730, Priority: bus.Background,
			Trigger: "test", Requested: time.Now()}
		publishPrio(t, js, subj.SyncFor("na1", bus.Background), cmd, "sync:"+cmd.RequestID)
	}
	// Fetcher: background fetch commands for every synthetic match.
	for i := range players * matchesEach {
		id := fmt.Sprintf("NA1_%d", sim.SyntheticGameIDBase+i)
		cmd := bus.FetchCommand{MatchID: id, Kind: bus.KindMatch, Region: "americas", Attempt: 1, Priority: bus.Background, RequestID: "backfill"}
		publishPrio(t, js, subj.FetchFor("americas", bus.Background), cmd, id)
	}
	// Persister: background fetch results whose ledger rows a transaction
	// of the test holds (an uncommitted insert of the same keys).
	tx, err := h.DB.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	for i := range results {
		id := fmt.Sprintf("NA1_%d", 8_000_000_000+i)
		if _, err := tx.Exec(ctx, `INSERT INTO match_fetches (match_id, kind) VALUES ($1, 'match')`, id); err != nil {
			t.Fatal(err)
		}
		res := bus.FetchResult{MatchID: id, Kind: bus.KindMatch, Region: "americas", Outcome: bus.TemporaryFailure,
			Attempt: 1, Status: 503, Error: "backfill", AttemptedAt: time.Now()}
		publishPrio(t, js, subj.FailedFor("americas", bus.Background), res, id+"/failed")
	}
	stages := []struct {
		stream, consumer string
		backlog          int
	}{
		{streams.StreamIngest, streams.ConsumerResolverBackground, players / 2},
		{streams.StreamSync, streams.ConsumerMatchIDLister, players / 2},
		{streams.StreamFetch, streams.FetcherConsumer("americas"), players * matchesEach},
		{streams.StreamFetched, streams.ConsumerPersister, results},
	}
	for _, s := range stages {
		if n := natstest.Remaining(t, h.St.Infra.JS, s.stream, s.consumer); n != s.backlog {
			t.Fatalf("%s: %d queued before the run, want %d", s.consumer, n, s.backlog)
		}
	}

	if err := control.Set(ctx, ctl, control.State{Paused: false, By: "test"}); err != nil {
		t.Fatal(err)
	}
	// The user: on na1, the same americas budget as the backlog.
	ev, err := h.Ingest(bus.IngestRequest{RiotID: sim.SyntheticRiotID(players + 1).String(), Platform: "na1",
		Mode: bus.ModeLatest, Count: matchesEach, Priority: bus.Interactive}, 2*time.Minute)
	if err != nil || ev.Status != "completed" || ev.Total == 0 {
		t.Fatalf("interactive sync: %+v %v", ev, err)
	}
	for _, s := range stages {
		n := natstest.Remaining(t, h.St.Infra.JS, s.stream, s.consumer)
		t.Logf("%s: the interactive sync (%d matches) completed with %d of %d backfill messages still queued", s.consumer, ev.Total, n, s.backlog)
		want := s.backlog / 2
		if s.consumer == streams.ConsumerPersister {
			want = s.backlog // held by the test's transaction: none can be stored
		}
		if n < want {
			t.Errorf("%s: only %d of %d backfill messages left (want ≥ %d): the interactive sync waited behind the backfill", s.consumer, n, s.backlog, want)
		}
	}
	if n := h.Count(`SELECT count(*) FROM match_fetches WHERE match_id LIKE 'NA1_8%'`); n != 0 {
		t.Errorf("%d backfill results stored while their rows were held", n)
	}
	// Released, the persister's backlog is stored.
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for h.Count(`SELECT count(*) FROM match_fetches WHERE match_id LIKE 'NA1_8%'`) < results {
		if time.Now().After(deadline) {
			t.Fatal("the persister's backlog was not stored after the hold ended")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func publishPrio(t *testing.T, js jetstream.JetStream, subject string, v any, msgID string) {
	t.Helper()
	if _, err := js.Publish(t.Context(), subject, mustJSON(v), jetstream.WithMsgID(msgID)); err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
}
