package retrysweeper_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
	// Listed 30 min before the sweep: the database stamps a listing on its
	// own clock, which a sweeper clock set 30 min on does not age.
	for _, id := range []string{claimed, interactive} {
		if _, err := e.DB.Exec(ctx, `INSERT INTO match_fetches (match_id, kind, status, updated_at)
VALUES ($1, 'match', 'unfetched', now() - interval '30 minutes')`, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.PersistBatch(ctx, store.Batch{Ledger: []store.LedgerUpdate{
		{MatchID: stored, Kind: "match", Status: "success", Attempt: 1, HTTPStatus: 200, AttemptedAt: now},
		{MatchID: lost, Kind: "match", Status: "temporary_failure", Attempt: 1, HTTPStatus: 503, Error: "503", AttemptedAt: now},
	}}); err != nil {
		t.Fatal(err)
	}
	publish := func(r bus.FetchResult, p bus.Priority) { publishResult(e, r, p) }
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

// A fetch that moves on while a sweep reads is seen in one of the places
// it moves through, and not re-published: the sweep reads FETCH, then
// FETCHED, then the ledger rows it checks against them. Two ways to move
// on between the sweep's first ledger read and its next one: the fetcher
// takes the command and publishes the result (then the persister stores
// it), or the persister stores a result that was waiting. Read the other
// way round (the ledger row, then the queues), the fetch is in none of
// them and is fetched again.
func TestSweeperSeesAFetchMovingOnBetweenItsReads(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fetched bool // the result is in FETCHED already, the command gone
	}{{"fetched after the ledger read", false}, {"stored after the ledger read", true}} {
		t.Run(tc.name, func(t *testing.T) { movingOn(t, tc.fetched) })
	}
}

func movingOn(t *testing.T, fetched bool) {
	e := stagetest.New(t, stagetest.Options{DB: true})
	inf, ctx := e.Process, t.Context()
	const id = "NA1_9950"
	// The row is listed and its command queued at once; 3 s later it is
	// stale (StaleAfter 1 s), and the queue has moved past its command
	// (QueueSlack 2 s) once it holds only newer ones: the timeline command
	// the fetcher queues when it has fetched the match.
	if _, err := e.DB.Exec(ctx, `INSERT INTO match_fetches (match_id, kind, status) VALUES ($1, 'match', 'unfetched')`, id); err != nil {
		t.Fatal(err)
	}
	e.Publish(inf.Subjects.Fetch("americas"), bus.FetchCommand{MatchID: id, Kind: bus.KindMatch, Region: "americas", Attempt: 1},
		jetstream.WithMsgID(id))
	time.Sleep(3 * time.Second)
	results, err := inf.JS.Stream(ctx, streams.StreamFetched)
	if err != nil {
		t.Fatal(err)
	}
	timeline := bus.FetchCommand{MatchID: id, Kind: bus.KindTimeline, Region: "americas", Attempt: 1}
	var fetchedAt time.Time
	fetch := func() { // the fetcher: the result published, the timeline queued, then the command acked
		fetchedAt = time.Now()
		publishResult(e, bus.FetchResult{MatchID: id, Kind: bus.KindMatch, Region: "americas", Outcome: bus.Success, Attempt: 1,
			Status: 200, Payload: []byte{0x1f, 0x8b, 7}, AttemptedAt: fetchedAt}, bus.Background)
		e.Publish(inf.Subjects.Fetch("americas"), timeline, jetstream.WithMsgID(bus.FetchMsgID(timeline)))
		if got := takeFetches(e, 1); len(got) != 1 || got[0].MatchID != id || got[0].Kind != bus.KindMatch {
			t.Errorf("the fetcher took %+v, want %s's match command", got, id)
		}
	}
	persist := func() { // the persister: the ledger row written, then the result acked
		if _, err := e.Store.PersistBatch(ctx, store.Batch{Ledger: []store.LedgerUpdate{
			{MatchID: id, Kind: "match", Status: "success", Attempt: 1, HTTPStatus: 200, AttemptedAt: fetchedAt}}}); err != nil {
			t.Error(err)
		}
		if err := results.Purge(ctx); err != nil {
			t.Error(err)
		}
	}
	steps := []func(){fetch, persist}
	if fetched {
		fetch()
		steps = steps[1:]
	}
	// The pipeline moves one step after each ledger read of the sweep.
	ms := &movingStore{Store: e.Store, after: func(call int) {
		if call <= len(steps) {
			steps[call-1]()
		}
	}}
	s := sweeperWith(e, retrysweeper.Config{StaleAfter: time.Second, QueueSlack: 2 * time.Second, FetchAttempts: config.FetchAttempts{MaxAttempts: 5}},
		retrysweeper.Deps{Store: ms})
	rep, err := s.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := fetchQueue(e); len(got) != 1 || got[0] != timeline || rep.Republished != 0 {
		t.Fatalf("FETCH holds %+v after the sweep (report %+v), want only the timeline command the fetcher queued: %s was fetched once and stored",
			got, rep, id)
	}
}

// movingStore is a Store whose DueRetriesAfter calls after(n) once its
// n-th read has returned, before the sweeper sees the rows.
type movingStore struct {
	*store.Store
	after func(call int)
	calls int
}

func (m *movingStore) DueRetriesAfter(ctx context.Context, now, olderThan time.Time, after *store.DueFetch, limit int) ([]store.DueFetch, error) {
	due, err := m.Store.DueRetriesAfter(ctx, now, olderThan, after, limit)
	m.calls++
	m.after(m.calls)
	return due, err
}

// publishResult publishes r on e's FETCHED subject of americas with
// priority p, in its wire form (bus.EncodeFetchResult).
func publishResult(e *stagetest.Env, r bus.FetchResult, p bus.Priority) {
	t, inf := e.T, e.Process
	t.Helper()
	data, hdr, err := bus.EncodeFetchResult(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inf.JS.PublishMsg(t.Context(), natsMsg(inf.Subjects.FetchedFor("americas", p), data, hdr)); err != nil {
		t.Fatal(err)
	}
}
