package store_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/pkg/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testStore is a Store on a fresh migrated database, with the test's own
// pool on the same database for SQL of its own (pgtest.Pool).
type testStore struct {
	*store.Store
	db  *pgxpool.Pool
	url string
}

func openStore(tb testing.TB) *testStore {
	tb.Helper()
	url := pgtest.NewDatabase(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := store.Open(ctx, url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return &testStore{Store: s, db: pgtest.Pool(tb, url), url: url}
}

// snapshot returns, per table, its row count and an md5 over every row
// including xmin, so any rewrite of a row (even to identical values) shows.
func snapshot(tb testing.TB, s *testStore) map[string]string {
	tb.Helper()
	out := map[string]string{}
	for _, tbl := range []string{"accounts", "matches", "match_participants", "match_timelines", "match_fetches",
		"sync_matches", "jobs"} {
		var n int
		var sum *string
		err := s.db.QueryRow(context.Background(),
			`SELECT count(*), md5(string_agg(t.xmin::text || t::text, '|' ORDER BY t::text)) FROM `+tbl+` t`).
			Scan(&n, &sum)
		if err != nil {
			tb.Fatalf("snapshot %s: %v", tbl, err)
		}
		v := ""
		if sum != nil {
			v = *sum
		}
		out[tbl] = strconv.Itoa(n) + " " + v
	}
	return out
}

type ledgerRow struct {
	Status                        string
	Attempt, RetryCount, NotFound int
	LastError                     string
	HTTPStatus                    int
}

func ledger(tb testing.TB, s *testStore, matchID, kind string) ledgerRow {
	tb.Helper()
	var r ledgerRow
	err := s.db.QueryRow(context.Background(), `SELECT status, attempt, retry_count, not_found,
coalesce(last_error, ''), coalesce(http_status, 0) FROM match_fetches WHERE match_id = $1 AND kind = $2`,
		matchID, kind).Scan(&r.Status, &r.Attempt, &r.RetryCount, &r.NotFound, &r.LastError, &r.HTTPStatus)
	if err != nil {
		tb.Fatalf("ledger %s/%s: %v", matchID, kind, err)
	}
	return r
}
