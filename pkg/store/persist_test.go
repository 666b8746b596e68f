package store_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/riftflow/riftflow/pkg/store"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func fullBatch(tb testing.TB, fxs []fixture) store.Batch {
	var b store.Batch
	for i, fx := range fxs {
		b.Matches = append(b.Matches, fx.Match)
		b.Participants = append(b.Participants, fx.Participants...)
		b.Timelines = append(b.Timelines, store.TimelineRow{MatchID: fx.Match.MatchID, FrameIntervalMs: 60000,
			FrameCount: 30 + i, Raw: []byte(`{"frames":[` + fmt.Sprint(i) + `]}`), FetchedAt: t0})
		b.Ledger = append(b.Ledger,
			store.LedgerUpdate{MatchID: fx.Match.MatchID, Kind: "match", Status: "success", Attempt: 1,
				HTTPStatus: 200, GameCreation: fx.Match.GameCreation, AttemptedAt: t0},
			store.LedgerUpdate{MatchID: fx.Match.MatchID, Kind: "timeline", Status: "success", Attempt: 1,
				HTTPStatus: 200, AttemptedAt: t0})
	}
	return b
}

func TestPersistBatchReplayChangesNothing(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	fxs := loadFixtures(t)
	st := store.SyncStart{RequestID: "req-1", PUUID: fxs[0].Participants[0].PUUID, GameName: "A", TagLine: "EUW",
		Platform: "EUW1", Region: "europe", Mode: "full", Trigger: "api", RequestedAt: t0}
	if _, err := s.BeginSync(ctx, st); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, fx := range fxs {
		ids = append(ids, fx.Match.MatchID)
	}
	if _, err := s.ClaimMatches(ctx, st.RequestID, st.PUUID, ids); err != nil {
		t.Fatal(err)
	}
	b := fullBatch(t, fxs)
	res, err := s.PersistBatch(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Progress) != 1 || res.Progress[0].Status != "completed" || res.Progress[0].Progress != len(fxs) {
		t.Fatalf("first persist progress = %+v, want one completed %d/%d", res.Progress, len(fxs), len(fxs))
	}
	before := snapshot(t, s)
	var nm, np int
	if err := s.db.QueryRow(ctx, `SELECT (SELECT count(*) FROM matches), (SELECT count(*) FROM match_participants)`).
		Scan(&nm, &np); err != nil {
		t.Fatal(err)
	}
	wantP := 0
	for _, fx := range fxs {
		wantP += len(fx.Participants)
	}
	if nm != len(fxs) || np != wantP {
		t.Fatalf("got %d matches, %d participants; want %d, %d", nm, np, len(fxs), wantP)
	}

	// Replay the whole batch twice (a redelivery, then a persister restart).
	for i := 0; i < 2; i++ {
		res, err := s.PersistBatch(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Progress) != 0 {
			t.Errorf("replay %d progress = %+v, want none", i, res.Progress)
		}
		if after := snapshot(t, s); !maps.Equal(before, after) {
			t.Fatalf("replay %d changed tables:\nbefore %v\nafter  %v", i, before, after)
		}
	}

	// The raw payload is stored byte for byte in a json column compressed
	// with lz4, queryable, and read back as sent.
	var raw []byte
	var comp, queue string
	if err := s.db.QueryRow(ctx, `SELECT raw, pg_column_compression(raw), raw->'info'->>'queueId'
FROM matches WHERE match_id = $1`, fxs[0].Match.MatchID).Scan(&raw, &comp, &queue); err != nil {
		t.Fatal(err)
	}
	if string(raw) != string(fxs[0].Match.Raw) {
		t.Errorf("raw differs: got %d bytes, want %d", len(raw), len(fxs[0].Match.Raw))
	}
	if comp != "lz4" || queue != fmt.Sprint(fxs[0].Match.QueueID) {
		t.Errorf("compression %q, queueId %q; want lz4, %d", comp, queue, fxs[0].Match.QueueID)
	}
	if got, _, err := s.MatchRaw(ctx, fxs[0].Match.MatchID); err != nil || string(got) != string(fxs[0].Match.Raw) {
		t.Errorf("MatchRaw: %d bytes, %v; want the stored document", len(got), err)
	}
	// A changed match is rewritten (the guard is not "never update").
	b2 := store.Batch{Matches: []store.MatchRow{fxs[0].Match}}
	b2.Matches[0].QueueID = 9999
	if _, err := s.PersistBatch(ctx, b2); err != nil {
		t.Fatal(err)
	}
	var q int
	if err := s.db.QueryRow(ctx, `SELECT queue_id FROM matches WHERE match_id = $1`, fxs[0].Match.MatchID).
		Scan(&q); err != nil || q != 9999 {
		t.Errorf("queue_id after update = %d (%v), want 9999", q, err)
	}
}

func TestPersistBatchDuplicatesInOneBatch(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	fxs := loadFixtures(t)[:2]
	b := fullBatch(t, fxs)
	// A redelivery inside the same batch; the later copy carries a change.
	dup := fxs[0]
	dup.Match.GameMode = "LATER"
	b.Matches = append(b.Matches, dup.Match)
	p := dup.Participants[0]
	p.Kills = 99
	b.Participants = append(b.Participants, dup.Participants...)
	b.Participants = append(b.Participants, p)
	b.Timelines = append(b.Timelines, b.Timelines...)
	b.Ledger = append(b.Ledger, b.Ledger...)
	if _, err := s.PersistBatch(ctx, b); err != nil {
		t.Fatalf("batch with duplicates: %v", err)
	}
	var nm, np, nt int
	var mode string
	var kills int
	err := s.db.QueryRow(ctx, `SELECT (SELECT count(*) FROM matches), (SELECT count(*) FROM match_participants),
(SELECT count(*) FROM match_timelines), (SELECT game_mode FROM matches WHERE match_id = $1),
(SELECT kills FROM match_participants WHERE match_id = $1 AND participant_id = $2)`,
		dup.Match.MatchID, p.ParticipantID).Scan(&nm, &np, &nt, &mode, &kills)
	if err != nil {
		t.Fatal(err)
	}
	wantP := len(fxs[0].Participants) + len(fxs[1].Participants)
	if nm != 2 || np != wantP || nt != 2 {
		t.Errorf("rows = %d/%d/%d, want 2/%d/2", nm, np, nt, wantP)
	}
	if mode != "LATER" || kills != 99 {
		t.Errorf("last duplicate should win: game_mode %q kills %d", mode, kills)
	}
	if r := ledger(t, s, dup.Match.MatchID, "match"); r.Status != "success" || r.RetryCount != 0 {
		t.Errorf("ledger = %+v, want success, 0 retries", r)
	}
}

func lu(id, status string, attempt, http int) store.LedgerUpdate {
	return store.LedgerUpdate{MatchID: id, Kind: "match", Status: status, Attempt: attempt, HTTPStatus: http,
		Error: fmt.Sprintf("%s#%d", status, attempt), AttemptedAt: t0.Add(time.Duration(attempt) * time.Minute)}
}

func TestLedgerRules(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	const (
		tf = "temporary_failure"
		pu = "permanently_unfetchable"
		or = "outside_retention_window"
		ok = "success"
	)
	tests := []struct {
		name    string
		batches [][]store.LedgerUpdate // each applied in its own PersistBatch
		claim   bool                   // listed (unfetched row) first
		want    ledgerRow
	}{
		{"failures in order", [][]store.LedgerUpdate{{lu("", tf, 1, 503)}, {lu("", tf, 2, 503)}}, false,
			ledgerRow{tf, 2, 2, 0, "temporary_failure#2", 503}},
		{"out of order attempt ignored", [][]store.LedgerUpdate{{lu("", tf, 2, 500)}, {lu("", tf, 1, 503)}}, false,
			ledgerRow{tf, 2, 1, 0, "temporary_failure#2", 500}},
		{"replayed failure counted once", [][]store.LedgerUpdate{{lu("", tf, 1, 503)}, {lu("", tf, 1, 503)}}, false,
			ledgerRow{tf, 1, 1, 0, "temporary_failure#1", 503}},
		{"success after failure", [][]store.LedgerUpdate{{lu("", tf, 1, 503)}, {lu("", ok, 2, 200)}}, false,
			ledgerRow{ok, 2, 1, 0, "", 200}},
		{"late success after permanent", [][]store.LedgerUpdate{{lu("", pu, 3, 404)}, {lu("", ok, 2, 200)}}, false,
			ledgerRow{ok, 3, 1, 1, "", 200}},
		{"success is final", [][]store.LedgerUpdate{{lu("", ok, 1, 200)}, {lu("", tf, 2, 503)}, {lu("", pu, 3, 404)}},
			false, ledgerRow{ok, 1, 0, 0, "", 200}},
		{"permanent is final", [][]store.LedgerUpdate{{lu("", pu, 1, 404)}, {lu("", tf, 2, 503)}}, false,
			ledgerRow{pu, 1, 1, 1, "permanently_unfetchable#1", 404}},
		{"outside retention is final", [][]store.LedgerUpdate{{lu("", or, 1, 0)}, {lu("", tf, 2, 503)}}, false,
			ledgerRow{or, 1, 0, 0, "outside_retention_window#1", 0}},
		// Two commands for one fetch (a sweeper re-publish beside a retry
		// still waiting) number their attempts alike: the final outcome of
		// one is not lost to the other's later-numbered failure.
		{"final after a higher failed attempt", [][]store.LedgerUpdate{{lu("", tf, 9, 503)}, {lu("", pu, 7, 404)}}, false,
			ledgerRow{pu, 9, 1, 0, "permanently_unfetchable#7", 404}},
		{"final beside a higher failed attempt in one batch", [][]store.LedgerUpdate{{lu("", tf, 9, 503), lu("", pu, 7, 404)}}, false,
			ledgerRow{pu, 7, 2, 1, "permanently_unfetchable#7", 404}},
		{"listed then failed", [][]store.LedgerUpdate{{lu("", tf, 1, 429)}}, true,
			ledgerRow{tf, 1, 1, 0, "temporary_failure#1", 429}},
		{"several attempts in one batch", [][]store.LedgerUpdate{{lu("", tf, 2, 500), lu("", tf, 1, 404)}}, false,
			ledgerRow{tf, 2, 2, 1, "temporary_failure#2", 500}},
		{"failure then success in one batch", [][]store.LedgerUpdate{{lu("", tf, 1, 503), lu("", ok, 2, 200)}}, false,
			ledgerRow{ok, 2, 1, 0, "", 200}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("EUW1_%d", 1000+i)
			if tc.claim {
				if _, err := s.BeginSync(ctx, store.SyncStart{RequestID: "r" + id, PUUID: "p" + id}); err != nil {
					t.Fatal(err)
				}
				if _, err := s.ClaimMatches(ctx, "r"+id, "p"+id, []string{id}); err != nil {
					t.Fatal(err)
				}
			}
			for _, ups := range tc.batches {
				for j := range ups {
					ups[j].MatchID = id
				}
				if _, err := s.PersistBatch(ctx, store.Batch{Ledger: ups}); err != nil {
					t.Fatal(err)
				}
			}
			if got := ledger(t, s, id, "match"); got != tc.want {
				t.Errorf("ledger got %+v, want %+v", got, tc.want)
			}
			// Replaying every batch again changes nothing.
			before := snapshot(t, s)
			for _, ups := range tc.batches {
				if _, err := s.PersistBatch(ctx, store.Batch{Ledger: ups}); err != nil {
					t.Fatal(err)
				}
			}
			if after := snapshot(t, s); !maps.Equal(before, after) {
				t.Errorf("replay changed the ledger: %v -> %v", before["match_fetches"], after["match_fetches"])
			}
		})
	}
}

func TestVisibleMatchesHidesPermanentlyUnfetchable(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	fxs := loadFixtures(t)[:2]
	b := store.Batch{
		Matches: []store.MatchRow{fxs[0].Match, fxs[1].Match},
		Ledger:  []store.LedgerUpdate{lu(fxs[0].Match.MatchID, "success", 1, 200), lu(fxs[1].Match.MatchID, "permanently_unfetchable", 1, 404)},
	}
	if _, err := s.PersistBatch(ctx, b); err != nil {
		t.Fatal(err)
	}
	var all, visible int
	var failed string
	err := s.db.QueryRow(ctx, `SELECT (SELECT count(*) FROM matches), (SELECT count(*) FROM visible_matches),
(SELECT string_agg(match_id, ',') FROM match_fetch_failures)`).Scan(&all, &visible, &failed)
	if err != nil {
		t.Fatal(err)
	}
	if all != 2 || visible != 1 || failed != fxs[1].Match.MatchID {
		t.Errorf("matches %d, visible %d, failures %q; want 2, 1, %q", all, visible, failed, fxs[1].Match.MatchID)
	}
	var id string
	if err := s.db.QueryRow(ctx, `SELECT match_id FROM visible_matches`).Scan(&id); err != nil || id != fxs[0].Match.MatchID {
		t.Errorf("visible match = %q (%v), want %q", id, err, fxs[0].Match.MatchID)
	}
}
