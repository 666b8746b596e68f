package sweeper_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/store"
	sweeper "github.com/riftflow/riftflow/services/retry-sweeper"
	"github.com/riftflow/riftflow/streams"
)

// A stale ledger row whose fetch command
// is still waiting in the FETCH queue (a long backlog) is not re-published,
// which would fetch it twice and spend the rate budget twice; a row the
// queue has moved past (its command was lost) is re-published even while
// newer commands wait; and once the queue is empty the first row is
// re-published too.
func TestSweeperLeavesQueuedCommands(t *testing.T) {
	e := stagetest.New(t, stagetest.Options{DB: true})
	st, inf, ctx := e.Infra.Store, e.Infra, t.Context()
	now := time.Now()
	const queued, lost = "NA1_9500", "NA1_9501"
	if _, err := st.PersistBatch(ctx, store.Batch{Ledger: []store.LedgerUpdate{
		{MatchID: queued, Kind: "match", Status: "temporary_failure", Attempt: 1, HTTPStatus: 503, Error: "503", AttemptedAt: now},
		{MatchID: lost, Kind: "match", Status: "temporary_failure", Attempt: 1, HTTPStatus: 503, Error: "503", AttemptedAt: now.Add(-time.Hour)},
	}}); err != nil {
		t.Fatal(err)
	}
	// queued's retry waits in the americas queue, behind a backlog.
	e.Publish(inf.Subjects.Fetch("americas"), bus.FetchCommand{MatchID: queued, Kind: bus.KindMatch, Region: "americas", Attempt: 2},
		jetstream.WithMsgID(queued))
	locks, err := inf.Lock(ctx, streams.BucketSyncLocks)
	if err != nil {
		t.Fatal(err)
	}
	cron, err := inf.KV(ctx, streams.BucketCronLocks)
	if err != nil {
		t.Fatal(err)
	}
	clk := func() time.Time { return now.Add(2 * time.Hour) } // everything is stale
	s, err := sweeper.New(sweeper.Config{StaleAfter: 10 * time.Minute, QueueSlack: time.Second, MaxAttempts: 5},
		sweeper.Deps{JS: inf.JS, Store: st, Locks: locks, CronLocks: cron, Base: app.Base{Subjects: inf.Subjects, Now: clk}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Republished != 1 || rep.StillQueued != 1 {
		t.Fatalf("sweep with %s queued: %+v, want 1 republished (%s), 1 still queued", queued, rep, lost)
	}
	cons, err := inf.JS.Consumer(ctx, streams.StreamFetch, streams.FetcherConsumer("americas"))
	if err != nil {
		t.Fatal(err)
	}
	read := func() map[string]int {
		got := map[string]int{}
		b, err := cons.Fetch(10, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range b.Messages() {
			var c bus.FetchCommand
			if err := json.Unmarshal(m.Data(), &c); err != nil {
				t.Fatal(err)
			}
			got[c.MatchID]++
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return got
	}
	if got := read(); got[queued] != 1 || got[lost] != 1 || len(got) != 2 {
		t.Fatalf("FETCH held %v, want %s once (its own retry) and %s once (re-published)", got, queued, lost)
	}
	// The queue is empty now and queued's row is still not final (say its
	// result was lost): the next sweep re-publishes it.
	rep, err = s.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.StillQueued != 0 || rep.Republished != 2 {
		t.Fatalf("sweep with an empty queue: %+v, want both rows re-published", rep)
	}
	if got := read(); got[queued] != 1 {
		t.Fatalf("FETCH held %v after the second sweep", got)
	}
}
