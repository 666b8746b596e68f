package retrysweeper_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/store"
	retrysweeper "github.com/riftflow/riftflow/services/retry-sweeper"
	"github.com/riftflow/riftflow/streams"
)

// A stale ledger row whose fetch command
// is still waiting in the FETCH queue (a long backlog) is not re-published,
// which would fetch it twice and spend the rate budget twice; a row the
// queue has moved past (its command was lost) is re-published even while
// newer commands wait; and once the queue is empty the first row is
// re-published too. The same holds on hosts whose clocks (the sweeper's,
// and the ledger writers' times) are an hour behind the NATS server's,
// which stamps the queued command: the queue's floor is an age on the
// server's clock, not the server's time compared with the hosts'.
func TestSweeperLeavesQueuedCommands(t *testing.T) {
	for _, skew := range []time.Duration{0, -time.Hour} {
		t.Run(fmt.Sprintf("hosts %v off the server", skew), func(t *testing.T) { leavesQueuedCommands(t, skew) })
	}
}

func leavesQueuedCommands(t *testing.T, skew time.Duration) {
	e := stagetest.New(t, stagetest.Options{DB: true})
	st, inf, ctx := e.Store, e.Process, t.Context()
	clk := func() time.Time { return time.Now().Add(skew) } // the hosts' clock
	now := clk()
	const queued, lost = "NA1_9500", "NA1_9501"
	// queued was last tried 20 min ago (stale), lost 3 h ago.
	if _, err := st.PersistBatch(ctx, store.Batch{Ledger: []store.LedgerUpdate{
		{MatchID: queued, Kind: "match", Status: "temporary_failure", Attempt: 1, HTTPStatus: 503, Error: "503", AttemptedAt: now.Add(-20 * time.Minute)},
		{MatchID: lost, Kind: "match", Status: "temporary_failure", Attempt: 1, HTTPStatus: 503, Error: "503", AttemptedAt: now.Add(-3 * time.Hour)},
	}}); err != nil {
		t.Fatal(err)
	}
	// Each row was written when its attempt was stored: as long ago, on
	// the database's clock.
	if _, err := e.DB.Exec(ctx, `UPDATE match_fetches SET updated_at = now() - ($1::timestamptz - last_attempt_at)`, now); err != nil {
		t.Fatal(err)
	}
	// queued's retry waits in the americas queue, behind a backlog,
	// published within QueueSlack of its attempt.
	e.Publish(inf.Subjects.Fetch("americas"), bus.FetchCommand{MatchID: queued, Kind: bus.KindMatch, Region: "americas", Attempt: 2},
		jetstream.WithMsgID(queued))
	s := newSweeper(e, retrysweeper.Config{StaleAfter: 10 * time.Minute, QueueSlack: 30 * time.Minute, FetchAttempts: config.FetchAttempts{MaxAttempts: 5}}, clk)
	rep, err := s.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Republished != 1 || rep.StillQueued != 1 {
		t.Fatalf("sweep with %s queued: %+v, want 1 republished (%s), 1 still queued", queued, rep, lost)
	}
	read := func() map[string]int {
		got := map[string]int{}
		for _, c := range fetchQueue(e) {
			got[c.MatchID]++
		}
		return got
	}
	if got := read(); got[queued] != 1 || got[lost] != 1 || len(got) != 2 {
		t.Fatalf("FETCH held %v, want %s once (its own retry) and %s once (re-published)", got, queued, lost)
	}
	// The queue is empty now and queued's row is still not final (say its
	// result was lost): the next sweep re-publishes it. lost was
	// re-published by the first sweep, which holds it for StaleAfter.
	rep, err = s.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.StillQueued != 0 || rep.Republished != 1 {
		t.Fatalf("sweep with an empty queue: %+v, want %s re-published, %s held by its re-publish", rep, queued, lost)
	}
	if got := read(); got[queued] != 1 {
		t.Fatalf("FETCH held %v after the second sweep", got)
	}
}

// A pending fetch's sweep retries are spaced by its failures other than
// 404: a timeline Riot answered 404 four times, then 503 five times in a
// row, is tried again StaleAfter after its last attempt (one more 404
// makes it final), not StaleAfter·2^4 as if its 404s had been failed
// sweep retries (160 min; the cap is 6 h). Nine 503s still wait the
// doubled delay.
func TestSweeperSpacesPendingByFailuresOtherThan404(t *testing.T) {
	e := stagetest.New(t, stagetest.Options{DB: true})
	now := time.Now()
	const notFound, failing = "NA1_9600", "NA1_9601"
	for a := 1; a <= 9; a++ {
		status := 503
		if a <= 4 {
			status = 404
		}
		if _, err := e.Store.PersistBatch(t.Context(), store.Batch{Ledger: []store.LedgerUpdate{
			{MatchID: notFound, Kind: "timeline", Status: "temporary_failure", Attempt: a, HTTPStatus: status,
				Error: fmt.Sprint(status), AttemptedAt: now},
			{MatchID: failing, Kind: "timeline", Status: "temporary_failure", Attempt: a, HTTPStatus: 503,
				Error: "503", AttemptedAt: now},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	s := newSweeper(e, retrysweeper.Config{StaleAfter: 10 * time.Minute, QueueSlack: time.Second, FetchAttempts: config.FetchAttempts{MaxAttempts: 5}, RetryMax: 6 * time.Hour},
		func() time.Time { return now.Add(25 * time.Minute) })
	rep, err := s.Sweep(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Republished != 1 || rep.Waiting != 1 {
		t.Fatalf("sweep 25 min after the last attempt: %+v, want %s re-published, %s waiting", rep, notFound, failing)
	}
	if got := fetchQueue(e); len(got) != 1 || got[0].MatchID != notFound || got[0].Attempt != 10 || got[0].NotFound != 4 {
		t.Fatalf("re-published %+v, want %s attempt 10 with 4 404s", got, notFound)
	}
}

// One sweep re-publishes at most MaxPerRun (100) fetches, the oldest
// first; the rest wait for the next sweep (seed 000), which does not
// re-publish the first ones again: their re-publish holds them.
func TestSweeperRepublishesAtMost100PerRun(t *testing.T) {
	e := stagetest.New(t, stagetest.Options{DB: true})
	now := time.Now()
	var ledger []store.LedgerUpdate
	for i := range 150 {
		ledger = append(ledger, store.LedgerUpdate{MatchID: fmt.Sprintf("NA1_%d", 7000+i), Kind: "match", Status: "temporary_failure",
			Attempt: 1, HTTPStatus: 503, Error: "503", AttemptedAt: now.Add(-2*time.Hour + time.Duration(i)*time.Second)})
	}
	if _, err := e.Store.PersistBatch(t.Context(), store.Batch{Ledger: ledger}); err != nil {
		t.Fatal(err)
	}
	s := newSweeper(e, retrysweeper.Config{StaleAfter: 10 * time.Minute, QueueSlack: time.Second, FetchAttempts: config.FetchAttempts{MaxAttempts: 5}, BatchSize: 40},
		func() time.Time { return now })
	rep, err := s.Sweep(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := drainFetchQueue(e)
	if rep.Republished != 100 || !rep.Capped || len(got) != 100 {
		t.Fatalf("first sweep: %+v, %d commands queued; want 100 re-published and capped", rep, len(got))
	}
	for i, c := range got {
		if want := fmt.Sprintf("NA1_%d", 7000+i); c.MatchID != want {
			t.Fatalf("command %d is %s, want %s (oldest first)", i, c.MatchID, want)
		}
	}
	rep, err = s.Sweep(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got = drainFetchQueue(e)
	if rep.Republished != 50 || rep.Capped || len(got) != 50 || got[0].MatchID != "NA1_7100" {
		t.Fatalf("second sweep: %+v, %d commands queued; want the other 50", rep, len(got))
	}
}

// A fetch held by a message schedule (a rate-limit wait the fetcher
// recorded with store.Hold) is not due while the hold lasts, however old
// its last attempt or listing: it is re-published only StaleAfter after
// the schedule should have fired.
func TestSweeperLeavesHeldFetch(t *testing.T) {
	e := stagetest.New(t, stagetest.Options{DB: true})
	st, ctx := e.Store, t.Context()
	const id = "NA1_9700"
	if _, err := st.PersistBatch(ctx, store.Batch{Ledger: []store.LedgerUpdate{
		{MatchID: id, Kind: "match", Status: "temporary_failure", Attempt: 1, HTTPStatus: 503, Error: "503", AttemptedAt: time.Now().Add(-3 * time.Hour)},
	}}); err != nil {
		t.Fatal(err)
	}
	s := newSweeper(e, retrysweeper.Config{StaleAfter: 10 * time.Minute, QueueSlack: time.Second, FetchAttempts: config.FetchAttempts{MaxAttempts: 5}},
		time.Now)
	// The hold as the sweep finds it: its schedule fires in an hour, fired
	// 5 minutes ago, fired 11 minutes ago.
	for _, tc := range []struct {
		fires time.Duration
		want  int
	}{{time.Hour, 0}, {-5 * time.Minute, 0}, {-11 * time.Minute, 1}} {
		if err := st.Hold(ctx, id, "match", tc.fires, "token-1"); err != nil {
			t.Fatal(err)
		}
		rep, err := s.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Republished != tc.want {
			t.Fatalf("sweep with the hold's schedule firing in %v: %+v, want %d re-published", tc.fires, rep, tc.want)
		}
	}
}

// drainFetchQueue takes (acks) every fetch command waiting in the
// americas queue, in stream order.
func drainFetchQueue(e *stagetest.Env) []bus.FetchCommand {
	var all []bus.FetchCommand
	for {
		got := fetchQueue(e)
		if len(got) == 0 {
			return all
		}
		all = append(all, got...)
	}
}

// runningSync begins sync req of puuid (NA1) in e's database with one
// claimed match, matchID, that last progressed progressAgo (a Postgres
// interval, e.g. "20 minutes"; "" leaves it now). An error fails the test.
func runningSync(e *stagetest.Env, puuid, req, matchID, progressAgo string) {
	t, ctx := e.T, e.T.Context()
	t.Helper()
	if _, err := e.Store.BeginSync(ctx, store.SyncStart{RequestID: req, PUUID: puuid, Platform: "NA1", Region: "americas", Mode: "latest"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Store.ClaimMatches(ctx, req, puuid, []string{matchID}); err != nil {
		t.Fatal(err)
	}
	if progressAgo == "" {
		return
	}
	if _, err := e.DB.Exec(ctx, `UPDATE accounts SET last_progress_at = now() - $1::interval WHERE puuid = $2`, progressAgo, puuid); err != nil {
		t.Fatal(err)
	}
}

// syncHealthConfig is a sweeper's Config for the sync-health tests: a sync
// is stuck after 10 minutes without progress, a fetch stale after 10.
var syncHealthConfig = retrysweeper.Config{StaleAfter: 10 * time.Minute, QueueSlack: 10 * time.Minute, StuckAfter: 10 * time.Minute,
	SyncLock: config.SyncLock{LockTTL: time.Minute}, FetchAttempts: config.FetchAttempts{MaxAttempts: 5}}

// newSweeper is a sweeper on e's NATS and database, with cfg and the clock now.
func newSweeper(e *stagetest.Env, cfg retrysweeper.Config, now func() time.Time) *retrysweeper.Service {
	return sweeperWith(e, cfg, retrysweeper.Deps{Base: app.Base{Now: now}})
}

// sweeperWith is a sweeper (retrysweeper.New) with cfg and d on e: its
// subjects and cron-locks bucket are e's, its JetStream, sync-locks bucket
// and Store e's unless d sets them; d's consumers, Dead and clock are
// kept. An error fails the test.
func sweeperWith(e *stagetest.Env, cfg retrysweeper.Config, d retrysweeper.Deps) *retrysweeper.Service {
	t, inf := e.T, e.Process
	t.Helper()
	locks, err := inf.Lock(t.Context(), streams.BucketSyncLocks)
	if err != nil {
		t.Fatal(err)
	}
	cron, err := inf.KV(t.Context(), streams.BucketCronLocks)
	if err != nil {
		t.Fatal(err)
	}
	d.CronLocks, d.Subjects = cron, inf.Subjects
	if d.JS == nil {
		d.JS = inf.JS
	}
	if d.Locks.KV == nil {
		d.Locks = locks
	}
	if d.Store == nil {
		d.Store = e.Store
	}
	s, err := retrysweeper.New(cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fetchQueue takes (acks) the fetch commands waiting in the americas queue.
func fetchQueue(e *stagetest.Env) []bus.FetchCommand { return takeFetches(e, 100) }

// takeFetches takes (acks) up to n fetch commands waiting in the americas
// queue, in stream order.
func takeFetches(e *stagetest.Env, n int) []bus.FetchCommand {
	t := e.T
	cons, err := e.Process.JS.Consumer(t.Context(), streams.StreamFetch, streams.FetcherConsumer("americas"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := cons.Fetch(n, jetstream.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var got []bus.FetchCommand
	for m := range b.Messages() {
		var c bus.FetchCommand
		if err := json.Unmarshal(m.Data(), &c); err != nil {
			t.Fatal(err)
		}
		got = append(got, c)
		if err := m.DoubleAck(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	return got
}

// A sweeper whose clock jumped 2 h ahead of the database's and the NATS
// server's (a clock jump on the services' hosts) does not re-publish a
// fetch whose command still waits in FETCH: a listed match (its listing
// stamped by the database) and the timeline of a match the fetcher
// fetched just before the jump (its fetched_at on the services' clock
// before the jump). Each row's last event is compared with the queue's
// floor on one clock: the database's stamp of the row moved onto the
// sweeper's clock, not the services' time from before the jump, so the
// commands, queued as the rows were written, are seen as queued. Once the
// commands have left the queue, the rows, stale by then, are re-published.
func TestSweeperClockJumpedAheadOfLedger(t *testing.T) {
	e := stagetest.New(t, stagetest.Options{DB: true})
	inf, ctx := e.Process, t.Context()
	const listed, stored = "NA1_9970", "NA1_9971"
	// listed a minute ago (the database's clock), its command queued then.
	if _, err := e.DB.Exec(ctx, `INSERT INTO match_fetches (match_id, kind, status, updated_at)
VALUES ($1, 'match', 'unfetched', now() - interval '1 minute')`, listed); err != nil {
		t.Fatal(err)
	}
	e.Publish(inf.Subjects.Fetch("americas"), bus.FetchCommand{MatchID: listed, Kind: bus.KindMatch, Region: "americas", Attempt: 1},
		jetstream.WithMsgID(listed))
	// stored's match fetched and stored a moment ago, its timeline queued.
	if _, err := e.Store.PersistBatch(ctx, store.Batch{Ledger: []store.LedgerUpdate{
		{MatchID: stored, Kind: "match", Status: "success", Attempt: 1, HTTPStatus: 200, AttemptedAt: time.Now()}}}); err != nil {
		t.Fatal(err)
	}
	timeline := bus.FetchCommand{MatchID: stored, Kind: bus.KindTimeline, Region: "americas", Attempt: 1}
	e.Publish(inf.Subjects.Fetch("americas"), timeline, jetstream.WithMsgID(bus.FetchMsgID(timeline)))
	// Then the services' clock jumps 2 h.
	s := newSweeper(e, retrysweeper.Config{StaleAfter: 5 * time.Second, QueueSlack: 10 * time.Minute,
		FetchAttempts: config.FetchAttempts{MaxAttempts: 5}}, func() time.Time { return time.Now().Add(2 * time.Hour) })
	rep, err := s.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := fetchQueue(e); len(got) != 2 || rep.Republished != 0 || rep.StillQueued != 2 {
		t.Fatalf("sweep 2 h ahead with both commands queued: FETCH held %+v (report %+v), want the 2 commands, 2 still queued",
			got, rep)
	}
	// fetchQueue took the commands: the rows are re-published.
	if rep, err = s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[string]bus.Kind{}
	for _, c := range drainFetchQueue(e) {
		got[c.MatchID] = c.Kind
	}
	if len(got) != 2 || got[listed] != bus.KindMatch || got[stored] != bus.KindTimeline || rep.Republished != 2 {
		t.Fatalf("sweep with the queue empty: re-published %v (report %+v), want %s and %s's timeline", got, rep, listed, stored)
	}
}

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
