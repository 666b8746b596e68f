package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/riftflow/riftflow/pkg/store"
)

// near fails the test unless got is within 5 s of want (the test's own
// reads of the clocks and round trips to the database).
func near(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if d := got.Sub(want); d < -5*time.Second || d > 5*time.Second {
		t.Fatalf("%s = %v, want %v (off by %v)", what, got, want, d)
	}
}

// A sync's times, stamped by the database, are read on the caller's clock
// wherever that clock is set (2 h ahead of the database's, 2 h behind):
// a sync that progressed 20 minutes ago is 20 minutes old, so it is stuck
// for a caller that waits 10 minutes and not for one that waits 30. On
// the database's clock compared with the caller's, it looked 2 h 20 min
// old ahead (stuck after any wait) and not yet to have happened behind
// (never stuck).
func TestSyncTimesOnTheCallersClock(t *testing.T) {
	for _, skew := range []time.Duration{2 * time.Hour, -2 * time.Hour} {
		t.Run(fmt.Sprintf("caller %v off the database", skew), func(t *testing.T) {
			s := openStore(t)
			ctx := context.Background()
			begin(t, s, "req", "me")
			if _, err := s.ClaimMatches(ctx, "req", "me", []string{"NA1_1"}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.db.Exec(ctx, `UPDATE accounts SET last_progress_at = now() - interval '20 minutes' WHERE puuid = 'me'`); err != nil {
				t.Fatal(err)
			}
			now := time.Now().Add(skew)
			running, err := s.RunningSyncs(ctx, now)
			if err != nil || len(running) != 1 {
				t.Fatalf("running syncs: %+v, %v; want req", running, err)
			}
			near(t, "RunningSyncs' LastProgress", running[0].LastProgress, now.Add(-20*time.Minute))
			stuck, err := s.StuckSyncs(ctx, now, now.Add(-10*time.Minute))
			if err != nil || len(stuck) != 1 || stuck[0].PUUID != "me" {
				t.Fatalf("stuck for 10 minutes: %+v, %v; want me", stuck, err)
			}
			near(t, "StuckSyncs' LastProgressAt", stuck[0].LastProgressAt, now.Add(-20*time.Minute))
			if stuck, err := s.StuckSyncs(ctx, now, now.Add(-30*time.Minute)); err != nil || len(stuck) != 0 {
				t.Fatalf("stuck for 30 minutes: %+v, %v; want none", stuck, err)
			}
		})
	}
}

// A hold lasts as long as it was made for, read back by anyone: its end is
// kept on the database's clock, so the clocks of the fetcher that made it,
// of the fetcher that reads it and of the sweeper may each be set apart.
// A hold made for 0 (the sweeper's re-publish) never turns a command away,
// and a sweeper whose clock jumped 2 h after a 30-minute hold was made
// does not take the held fetch for due until 30 minutes after the hold
// began, on its own clock.
func TestHoldsOnTheDatabaseClock(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	if _, err := s.PersistBatch(ctx, store.Batch{Ledger: []store.LedgerUpdate{{MatchID: "NA1_1", Kind: "match",
		Status: "temporary_failure", Attempt: 1, HTTPStatus: 503, AttemptedAt: time.Now().Add(-3 * time.Hour)}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Hold(ctx, "NA1_1", "match", 30*time.Minute, "schedule-1"); err != nil {
		t.Fatal(err)
	}
	st, err := s.FetchState(ctx, "NA1_1", "match")
	if err != nil {
		t.Fatal(err)
	}
	if st.HeldBy != "schedule-1" || st.HeldFor < 30*time.Minute-5*time.Second || st.HeldFor > 30*time.Minute {
		t.Fatalf("held %q for %v, want schedule-1 for 30m", st.HeldBy, st.HeldFor)
	}
	// The services' clock jumps 2 h: the hold still has 30 minutes to go.
	jumped := time.Now().Add(2 * time.Hour)
	if due, err := s.DueRetriesAfter(ctx, jumped, jumped.Add(-10*time.Minute), nil, 10); err != nil || len(due) != 0 {
		t.Fatalf("due 10 minutes after a 30-minute hold began, on a clock that jumped since: %+v, %v; want none", due, err)
	}
	due, err := s.DueRetriesAfter(ctx, jumped, jumped.Add(31*time.Minute), nil, 10)
	if err != nil || len(due) != 1 {
		t.Fatalf("due after the hold: %+v, %v; want NA1_1", due, err)
	}
	near(t, "Since (the hold's end)", due[0].Since, jumped.Add(30*time.Minute))

	// The sweeper's re-publish holds the fetch from now, and no longer.
	if err := s.Hold(ctx, "NA1_1", "match", 0, "sweep/1"); err != nil {
		t.Fatal(err)
	}
	if st, err = s.FetchState(ctx, "NA1_1", "match"); err != nil {
		t.Fatal(err)
	}
	if st.HeldBy != "sweep/1" || st.HeldFor > 0 || st.HeldFor < -5*time.Second {
		t.Fatalf("held %q for %v, want sweep/1 for 0", st.HeldBy, st.HeldFor)
	}
}
