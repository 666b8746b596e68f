package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/pkg/fault"
	"github.com/riftflow/riftflow/pkg/store"
)

func timelineRaw(tb testing.TB, s *testStore, id string) (raw, rawGz []byte, frames int) {
	tb.Helper()
	if err := s.db.QueryRow(context.Background(), `SELECT raw::text::bytea, raw_gzip, frame_count
FROM match_timelines WHERE match_id = $1`, id).Scan(&raw, &rawGz, &frames); err != nil {
		tb.Fatalf("timeline %s: %v", id, err)
	}
	return raw, rawGz, frames
}

// TestPersistBatchCompressedTimelines: a TimelineRow.Compressed document is
// inflated while copied and stored byte-equal, on the fresh-row path (COPY
// into match_timelines) and the upsert path (a stored row replaced) alike;
// one a json column cannot hold stays gzip; a corrupt or oversized one
// fails the batch as Invalid and writes nothing.
func TestPersistBatchCompressedTimelines(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	doc := `{"metadata":{"matchId":"NA1_1"},"info":{"frameInterval":60000,"frames":[{"a":"é"},{"b":2}]}}`
	nul := "{\"metadata\":{\"matchId\":\"NA1_2\"},\"x\":\"\x00\"}"
	b := store.Batch{Timelines: []store.TimelineRow{
		{MatchID: "NA1_1", FrameIntervalMs: 60000, FrameCount: 2, Compressed: gz(t, doc), FetchedAt: t0},
		{MatchID: "NA1_2", FrameIntervalMs: 60000, FrameCount: 0, Compressed: gz(t, nul), FetchedAt: t0},
		{MatchID: "NA1_3", FrameIntervalMs: 60000, FrameCount: 1, Raw: []byte(`{"old":true}`), FetchedAt: t0},
	}}
	if _, err := s.PersistBatch(ctx, b); err != nil {
		t.Fatal(err)
	}
	if raw, rawGz, n := timelineRaw(t, s, "NA1_1"); string(raw) != doc || rawGz != nil || n != 2 {
		t.Errorf("NA1_1: raw %q gzip %d bytes frames %d", raw, len(rawGz), n)
	}
	if raw, rawGz, _ := timelineRaw(t, s, "NA1_2"); raw != nil || string(rawGz) != string(b.Timelines[1].Compressed) {
		t.Errorf("NA1_2 (NUL byte): raw %q, gzip %d bytes; want the gzip kept", raw, len(rawGz))
	}

	// NA1_3 is stored: its compressed replacement takes the upsert path,
	// beside a fresh NA1_4 in the same batch.
	newer := `{"metadata":{"matchId":"NA1_3"},"info":{"frames":[1,2,3]}}`
	b2 := store.Batch{Timelines: []store.TimelineRow{
		{MatchID: "NA1_3", FrameIntervalMs: 60000, FrameCount: 3, Compressed: gz(t, newer), FetchedAt: t0},
		{MatchID: "NA1_4", FrameIntervalMs: 60000, FrameCount: 1, Compressed: gz(t, `{"n":4}`), FetchedAt: t0},
	}}
	if _, err := s.PersistBatch(ctx, b2); err != nil {
		t.Fatal(err)
	}
	if raw, _, n := timelineRaw(t, s, "NA1_3"); string(raw) != newer || n != 3 {
		t.Errorf("NA1_3 after upsert: %q frames %d", raw, n)
	}
	if raw, _, _ := timelineRaw(t, s, "NA1_4"); string(raw) != `{"n":4}` {
		t.Errorf("NA1_4: %q", raw)
	}

	before := snapshot(t, s)
	corrupt := gz(t, `{"metadata":{"matchId":"NA1_5"}}`)
	corrupt[len(corrupt)-6] ^= 0xff // the CRC-32
	for name, c := range map[string]struct {
		row store.TimelineRow
		max int64
	}{
		"corrupt gzip": {store.TimelineRow{MatchID: "NA1_5", Compressed: corrupt, FetchedAt: t0}, 0},
		"not gzip":     {store.TimelineRow{MatchID: "NA1_5", Compressed: []byte("{}"), FetchedAt: t0}, 0},
		"too large":    {store.TimelineRow{MatchID: "NA1_5", Compressed: gz(t, doc), FetchedAt: t0}, 16},
	} {
		s.SetMaxDocumentBytes(c.max)
		bad := store.Batch{Timelines: []store.TimelineRow{
			{MatchID: "NA1_6", Compressed: gz(t, `{"ok":1}`), FetchedAt: t0}, c.row}}
		_, err := s.PersistBatch(ctx, bad)
		if err == nil || fault.KindOf(err) != fault.Invalid {
			t.Errorf("%s: err %v (kind %v), want Invalid", name, err, fault.KindOf(err))
		}
	}
	s.SetMaxDocumentBytes(0)
	if after := snapshot(t, s); after["match_timelines"] != before["match_timelines"] {
		t.Errorf("a failed batch wrote rows")
	}
}

// TestPersistBatchFreshAndStoredRowsTogether: one batch with a stored match
// (changed: upsert path) and a fresh one (COPY path), each with its
// participants; both land, and a participant of a match neither stored nor
// in the batch fails the batch as Invalid (foreign key).
func TestPersistBatchFreshAndStoredRowsTogether(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	fxs := loadFixtures(t)[:2]
	first := store.Batch{Matches: []store.MatchRow{fxs[0].Match}, Participants: fxs[0].Participants}
	if _, err := s.PersistBatch(ctx, first); err != nil {
		t.Fatal(err)
	}
	changed := fxs[0]
	changed.Match.GameMode = "CHANGED"
	parts := append([]store.ParticipantRow(nil), changed.Participants...)
	parts[0].Kills = 77
	b := store.Batch{Matches: []store.MatchRow{changed.Match, fxs[1].Match}, Participants: append(parts, fxs[1].Participants...)}
	if _, err := s.PersistBatch(ctx, b); err != nil {
		t.Fatal(err)
	}
	var mode string
	var kills, n int
	if err := s.db.QueryRow(ctx, `SELECT (SELECT game_mode FROM matches WHERE match_id = $1),
(SELECT kills FROM match_participants WHERE match_id = $1 AND participant_id = $2),
(SELECT count(*) FROM match_participants WHERE match_id = $3)`,
		changed.Match.MatchID, parts[0].ParticipantID, fxs[1].Match.MatchID).Scan(&mode, &kills, &n); err != nil {
		t.Fatal(err)
	}
	if mode != "CHANGED" || kills != 77 || n != len(fxs[1].Participants) {
		t.Errorf("game_mode %q kills %d fresh participants %d; want CHANGED 77 %d", mode, kills, n, len(fxs[1].Participants))
	}
	orphan := withID(fxs[1], "NA1_404404")
	if _, err := s.PersistBatch(ctx, store.Batch{Participants: orphan.Participants}); fault.KindOf(err) != fault.Invalid {
		t.Errorf("participants of an unknown match: %v, want Invalid", err)
	}
}

// TestPersistBatchCompressedMatches: a MatchRow.Compressed document is
// stored byte-equal on the fresh and the upsert path; a corrupt one fails
// the batch as Invalid.
func TestPersistBatchCompressedMatches(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	fx := loadFixtures(t)[0]
	m := fx.Match
	m.Compressed, m.Raw, m.RawGzip = gz(t, string(fx.Match.Raw)), nil, nil
	if _, err := s.PersistBatch(ctx, store.Batch{Matches: []store.MatchRow{m}, Participants: fx.Participants}); err != nil {
		t.Fatal(err)
	}
	check := func(want string) {
		t.Helper()
		got, _, err := s.MatchRaw(ctx, m.MatchID)
		if err != nil || string(got) != want {
			t.Fatalf("MatchRaw: %d bytes, %v; want %d bytes as sent", len(got), err, len(want))
		}
	}
	check(string(fx.Match.Raw))
	changed := `{"metadata":{"matchId":"` + m.MatchID + `"},"info":{"changed":true}}`
	m.Compressed = gz(t, changed)
	if _, err := s.PersistBatch(ctx, store.Batch{Matches: []store.MatchRow{m}}); err != nil {
		t.Fatal(err)
	}
	check(changed)
	m.Compressed = m.Compressed[:len(m.Compressed)-3]
	if _, err := s.PersistBatch(ctx, store.Batch{Matches: []store.MatchRow{m}}); fault.KindOf(err) != fault.Invalid {
		t.Errorf("truncated gzip: %v, want Invalid", err)
	}
	check(changed)
}

// TestCompressedTimelineFaultsAreTransient: the timeline COPY stream that
// riftflow writes itself tells a server-side failure (a statement timeout
// while the table is locked against writes: 57014, the code a refused
// stream also gets;
// a read-only database: 25006) from a bad document: both are Transient, so
// the persister retries them, and nothing is written until the database
// takes the batch whole.
func TestCompressedTimelineFaultsAreTransient(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	url := s.url
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	short, err := store.Open(ctx, url+sep+"statement_timeout=300")
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	doc := `{"metadata":{"matchId":"NA1_7"},"info":{"frames":[1]}}`
	b := store.Batch{Timelines: []store.TimelineRow{
		{MatchID: "NA1_7", FrameIntervalMs: 60000, FrameCount: 1, Compressed: gz(t, doc), FetchedAt: t0}}}

	tx, err := s.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE match_timelines IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	_, err = short.PersistBatch(ctx, b)
	if err == nil || fault.KindOf(err) != fault.Transient {
		t.Errorf("statement timeout on a locked table: %v (kind %v), want Transient", err, fault.KindOf(err))
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// One connection, its session made read-only after it has set up its
	// staging tables (as a failover to a standby would leave it).
	ro, err := store.Open(ctx, url+sep+"pool_max_conns=1")
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := store.PoolOf(ro).Exec(ctx, `SET default_transaction_read_only = on`); err != nil {
		t.Fatal(err)
	}
	_, err = ro.PersistBatch(ctx, b)
	if err == nil || fault.KindOf(err) != fault.Transient {
		t.Errorf("read-only database: %v (kind %v), want Transient", err, fault.KindOf(err))
	}
	if n := pgtest.Count(t, s.db, "SELECT count(*) FROM match_timelines"); n != 0 {
		t.Fatalf("%d timelines written by failed batches", n)
	}
	if _, err := s.PersistBatch(ctx, b); err != nil {
		t.Fatal(err)
	}
	if raw, _, _ := timelineRaw(t, s, "NA1_7"); string(raw) != doc {
		t.Errorf("after the faults: %q", raw)
	}
}
