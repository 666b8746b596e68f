package retrysweeper_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/store"
	retrysweeper "github.com/riftflow/riftflow/services/retry-sweeper"
	"github.com/riftflow/riftflow/streams"
)

// A stale ledger row whose fetch already has a FetchResult waiting in
// FETCHED (the persister cut off from NATS, or failing on a full disk,
// for less than QueueSlack) is not re-published: its fetch is done, and
// a re-publish would call Riot for it a second time. This holds for both
// wire forms of a result (inline payload with the result in a header, or
// JSON), on the background and the interactive subjects, for a claimed
// match never tried, and for the timeline of a stored match that has no
// timeline row yet. A row with no result waiting (its fetch was lost) is
// re-published in the same sweep; and once the results are gone from
// FETCHED without reaching the ledger (lost), the next sweep re-publishes
// their rows too: nothing is lost.
func TestSweeperLeavesFetchesWhoseResultWaits(t *testing.T) {
	e := stagetest.New(t, stagetest.Options{DB: true})
	st, inf, ctx := e.Store, e.Process, t.Context()
	now := time.Now()
	const (
		claimed     = "NA1_9900" // listed, never tried; its match result waits (inline payload)
		stored      = "NA1_9901" // stored; its timeline result waits (JSON, payload in the object store)
		lost        = "NA1_9902" // tried once (503); nothing waits for it
		interactive = "NA1_9903" // listed, never tried; its result waits on the interactive subject
	)
	for _, id := range []string{claimed, interactive} {
		if _, err := e.DB.Exec(ctx, `INSERT INTO match_fetches (match_id, kind, status) VALUES ($1, 'match', 'unfetched')`, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.PersistBatch(ctx, store.Batch{Ledger: []store.LedgerUpdate{
		{MatchID: stored, Kind: "match", Status: "success", Attempt: 1, HTTPStatus: 200, AttemptedAt: now},
		{MatchID: lost, Kind: "match", Status: "temporary_failure", Attempt: 1, HTTPStatus: 503, Error: "503", AttemptedAt: now},
	}}); err != nil {
		t.Fatal(err)
	}
	publish := func(r bus.FetchResult, p bus.Priority) {
		t.Helper()
		data, hdr, err := bus.EncodeFetchResult(r)
		if err != nil {
			t.Fatal(err)
		}
		msg := nats.NewMsg(inf.Subjects.FetchedFor("americas", p))
		msg.Data = data
		for k, v := range hdr {
			msg.Header.Set(k, v)
		}
		if _, err := inf.JS.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	publish(bus.FetchResult{MatchID: claimed, Kind: bus.KindMatch, Region: "americas", Outcome: bus.Success, Attempt: 1, Status: 200,
		Payload: []byte{0x1f, 0x8b, 1, 2, 3}, AttemptedAt: now}, bus.Background)
	publish(bus.FetchResult{MatchID: stored, Kind: bus.KindTimeline, Region: "americas", Outcome: bus.Success, Attempt: 1, Status: 200,
		PayloadRef: stored + "/timeline/a1", AttemptedAt: now}, bus.Background)
	publish(bus.FetchResult{MatchID: interactive, Kind: bus.KindMatch, Region: "americas", Outcome: bus.Success, Attempt: 1, Status: 200,
		Payload: []byte{0x1f, 0x8b, 4, 5, 6}, AttemptedAt: now}, bus.Interactive)

	// 30 min on: every row is stale, FETCH is empty, and FETCHED's oldest
	// result is seconds old on the server's clock (under QueueSlack).
	s := newSweeper(e, retrysweeper.Config{StaleAfter: 10 * time.Minute, QueueSlack: 10 * time.Minute, FetchAttempts: config.FetchAttempts{MaxAttempts: 5}},
		func() time.Time { return now.Add(30 * time.Minute) })
	rep, err := s.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := drainFetchQueue(e); len(got) != 1 || got[0].MatchID != lost {
		t.Fatalf("sweep re-published %+v (report %+v), want only %s: the others' results wait in FETCHED", got, rep, lost)
	}
	if rep.Republished != 1 || rep.ResultsBehind {
		t.Fatalf("sweep: %+v, want 1 re-published, 3 with results waiting", rep)
	}

	// The results leave FETCHED without reaching the ledger: their fetches
	// are re-published by the next sweep (lost's re-publish holds it).
	fetched, err := inf.JS.Stream(ctx, streams.StreamFetched)
	if err != nil {
		t.Fatal(err)
	}
	if err := fetched.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if rep, err = s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[string]bus.Kind{}
	for _, c := range drainFetchQueue(e) {
		got[c.MatchID] = c.Kind
	}
	if len(got) != 3 || got[claimed] != bus.KindMatch || got[stored] != bus.KindTimeline || got[interactive] != bus.KindMatch ||
		rep.Republished != 3 || rep.ResultsWaiting != 0 {
		t.Fatalf("sweep after the results were lost: re-published %v (report %+v), want %s, %s's timeline and %s",
			got, rep, claimed, stored, interactive)
	}
}
