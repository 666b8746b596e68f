package retrysweeper_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/synclock"
	retrysweeper "github.com/riftflow/riftflow/services/retry-sweeper"
	"github.com/riftflow/riftflow/streams"
)

// A sweeper whose clock is set apart from the database's (which stamps a
// sync's start and progress) judges a sync's health on one clock: 2 h
// ahead, a sync that progressed a minute ago is healthy (its lock is
// renewed, and once the lock is gone it is not recovered); 2 h behind, a
// sync that has not progressed for 20 minutes, with no work queued, is
// stuck (its lock is not renewed, and once the lock is gone it is
// recovered). On two clocks the first looked stuck for 2 h (a live sync
// listed again, its Riot calls spent twice) and the second healthy for
// another 1 h 40 min.
func TestSweeperSyncHealthOnOneClock(t *testing.T) {
	for _, tc := range []struct {
		skew     time.Duration
		progress string // when the sync last progressed, on the database's clock
		healthy  bool
	}{
		{2 * time.Hour, "1 minute", true},
		{-2 * time.Hour, "20 minutes", false},
	} {
		t.Run(fmt.Sprintf("sweeper %v off the database, progress %s ago", tc.skew, tc.progress), func(t *testing.T) {
			e := stagetest.New(t, stagetest.Options{DB: true})
			ctx, inf := t.Context(), e.Process
			const puuid, req = "puuid-clock", "sync-clock"
			runningSync(e, puuid, req, "NA1_9800", tc.progress)
			locks, err := inf.Lock(ctx, streams.BucketSyncLocks)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := synclock.Claim(ctx, locks, puuid, req, time.Minute, time.Now()); err != nil {
				t.Fatal(err)
			}
			s := newSweeper(e, syncHealthConfig,
				func() time.Time { return time.Now().Add(tc.skew) })
			renewed, err := s.RenewLocks(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{true: 1, false: 0}[tc.healthy]; renewed != want {
				t.Fatalf("locks renewed: %d, want %d", renewed, want)
			}
			synclock.Release(ctx, locks, puuid, req, slog.Default())
			rep, err := s.Sweep(ctx)
			if err != nil {
				t.Fatal(err)
			}
			st, err := e.Store.AccountStatus(ctx, puuid)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{true: 0, false: 1}[tc.healthy]; rep.Recovered != want ||
				(tc.healthy != (st.SyncStatus == "syncing")) {
				t.Fatalf("sweep without the lock: %d recovered, account %s; want %d recovered", rep.Recovered, st.SyncStatus, want)
			}
		})
	}
}

// A fetch held by the fetcher's schedule for 30 minutes is left alone by
// a sweeper whose clock jumped 2 h after the hold was made (the hold is
// kept on the database's clock), until the schedule should have fired
// StaleAfter ago; on the fetcher's clock from before the jump, the hold
// looked long over and the fetch was re-published beside its schedule,
// two Riot calls for one fetch.
func TestSweeperClockJumpedDuringHold(t *testing.T) {
	e := stagetest.New(t, stagetest.Options{DB: true})
	st, ctx := e.Store, t.Context()
	const id = "NA1_9810"
	if _, err := st.PersistBatch(ctx, store.Batch{Ledger: []store.LedgerUpdate{
		{MatchID: id, Kind: "match", Status: "temporary_failure", Attempt: 1, HTTPStatus: 429, Error: "429", AttemptedAt: time.Now()},
	}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Hold(ctx, id, "match", 30*time.Minute, "token-1"); err != nil {
		t.Fatal(err)
	}
	s := newSweeper(e, retrysweeper.Config{StaleAfter: 10 * time.Minute, QueueSlack: time.Second, FetchAttempts: config.FetchAttempts{MaxAttempts: 5}},
		func() time.Time { return time.Now().Add(2 * time.Hour) })
	rep, err := s.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := drainFetchQueue(e); rep.Republished != 0 || len(got) != 0 {
		t.Fatalf("sweep 2 h after a jump, the hold 30 minutes long: %+v, FETCH held %+v; want nothing re-published", rep, got)
	}
	// 41 minutes later, for the database and the sweeper alike (the
	// database's stamps moved back): the schedule should have fired 11
	// minutes ago.
	if _, err := e.DB.Exec(ctx, `UPDATE match_fetches SET held_until = held_until - interval '41 minutes',
  updated_at = updated_at - interval '41 minutes'`); err != nil {
		t.Fatal(err)
	}
	if rep, err = s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := drainFetchQueue(e); rep.Republished != 1 || len(got) != 1 || got[0].MatchID != id {
		t.Fatalf("sweep 11 minutes past the hold: %+v, FETCH held %+v; want %s re-published", rep, got, id)
	}
}
