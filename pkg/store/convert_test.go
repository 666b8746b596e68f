package store_test

import (
	"context"
	"testing"

	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/pkg/store"
)

// Documents stored before migration 004 (gzip in raw_gzip) move to the json
// column when Migrate runs again; one a json column cannot hold (not UTF-8)
// stays gzip. Both read back byte-equal.
func TestConvertRawDocuments(t *testing.T) {
	url := pgtest.NewDatabase(t)
	ctx := context.Background()
	s, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := pgtest.Pool(t, url)
	docs := map[string]string{
		"EUW1_1": `{"metadata":{"matchId":"EUW1_1"},"info":{"gameCreation":1}}`,
		"EUW1_2": "{\"metadata\":{\"matchId\":\"EUW1_2\"},\"x\":\"\xff\"}",
	}
	for id, doc := range docs {
		if _, err := db.Exec(ctx, `INSERT INTO matches (match_id, raw_gzip) VALUES ($1, $2)`, id, gz(t, doc)); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(ctx, `INSERT INTO match_timelines (match_id, raw_gzip) VALUES ($1, $2)`, id, gz(t, doc)); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.Migrate(ctx, url, nil); err != nil {
		t.Fatal(err)
	}
	for _, tbl := range []string{"matches", "match_timelines"} {
		var moved, kept int
		if err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE raw IS NOT NULL AND raw_gzip IS NULL),
count(*) FILTER (WHERE raw IS NULL AND raw_gzip IS NOT NULL) FROM `+tbl).Scan(&moved, &kept); err != nil {
			t.Fatal(err)
		}
		if moved != 1 || kept != 1 {
			t.Errorf("%s: %d moved, %d kept; want 1, 1", tbl, moved, kept)
		}
	}
	for id, doc := range docs {
		m, _, err := s.MatchRaw(ctx, id)
		if err != nil || string(m) != doc {
			t.Errorf("MatchRaw(%s) = %q, %v; want %q", id, m, err, doc)
		}
		tl, _, err := s.TimelineRaw(ctx, id)
		if err != nil || string(tl) != doc {
			t.Errorf("TimelineRaw(%s) = %q, %v; want %q", id, tl, err, doc)
		}
	}
	if store.JSONStorable([]byte(docs["EUW1_2"])) || store.JSONStorable([]byte("{\"a\":\"\x00\"}")) || !store.JSONStorable([]byte(docs["EUW1_1"])) {
		t.Error("JSONStorable disagrees")
	}
}
