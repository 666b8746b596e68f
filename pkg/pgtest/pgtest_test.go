package pgtest_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riftflow/riftflow/pkg/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func query(t *testing.T, url, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var s string
	if err := conn.QueryRow(ctx, sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

func TestNewDatabaseIsFreshMigratedAndDropped(t *testing.T) {
	var first, name string
	t.Run("create", func(t *testing.T) {
		first = pgtest.NewDatabase(t)
		name = query(t, first, "SELECT current_database()")
		if got := query(t, first, "SELECT count(*)::text FROM information_schema.tables WHERE table_name IN "+
			"('accounts','matches','match_participants','match_timelines','match_fetches','sync_matches','jobs',"+
			"'league_entries','weekly_reports','visible_matches')"); got != "10" {
			t.Errorf("migrated tables = %s, want 10", got)
		}
		second := pgtest.NewDatabase(t)
		if n2 := query(t, second, "SELECT current_database()"); n2 == name {
			t.Errorf("two NewDatabase calls returned the same database %s", name)
		}
	})
	admin, err := pgtest.DatabaseURL(first, "postgres")
	if err != nil {
		t.Fatal(err)
	}
	if got := query(t, admin, "SELECT count(*)::text FROM pg_database WHERE datname = '"+name+"'"); got != "0" {
		t.Errorf("database %s still exists after cleanup", name)
	}
}

// TestEnsureStartsAndReusesLocalCluster exercises the no-DATABASE_URL path:
// initdb into a fresh dir, start on a free port, stop, then start again
// reusing the same dir.
func TestEnsureStartsAndReusesLocalCluster(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=1")
	dir, err := os.MkdirTemp("", "rfpgt")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		url, stop, err := pgtest.Ensure(ctx, pgtest.Options{DataDir: dir})
		if err != nil {
			if os.Getenv("CI") != "true" && err != nil && isNoPostgres(err) {
				t.Skip(err)
			}
			t.Fatal(err)
		}
		if got := query(t, url, "SELECT inet_server_addr()::text"); got != "127.0.0.1/32" {
			t.Errorf("listening on %s, want 127.0.0.1", got)
		}
		if got := query(t, url, "SHOW fsync"); got != "off" {
			t.Errorf("fsync = %s, want off for tests", got)
		}
		if i == 0 {
			queryExec(t, url, "CREATE TABLE keep_me (x int)")
		} else if got := query(t, url, "SELECT count(*)::text FROM keep_me"); got != "0" {
			t.Errorf("reused cluster lost its table: %s", got)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
}

func isNoPostgres(err error) bool { return errors.Is(err, pgtest.ErrNoPostgres) }

func queryExec(t *testing.T, url, sql string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatal(err)
	}
}
