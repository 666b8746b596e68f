package pgcluster_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/riftflow/riftflow/internal/pgcluster"
	"github.com/riftflow/riftflow/internal/pgtest"
)

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
		url, stop, err := pgcluster.Ensure(ctx, pgcluster.Options{DataDir: dir})
		if err != nil {
			if os.Getenv("CI") != "true" && err != nil && isNoPostgres(err) {
				t.Skip(err)
			}
			t.Fatal(err)
		}
		if got := pgtest.Query(t, url, "SELECT inet_server_addr()::text"); got != "127.0.0.1/32" {
			t.Errorf("listening on %s, want 127.0.0.1", got)
		}
		if got := pgtest.Query(t, url, "SHOW fsync"); got != "off" {
			t.Errorf("fsync = %s, want off for tests", got)
		}
		if i == 0 {
			queryExec(t, url, "CREATE TABLE keep_me (x int)")
		} else if got := pgtest.Query(t, url, "SELECT count(*)::text FROM keep_me"); got != "0" {
			t.Errorf("reused cluster lost its table: %s", got)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
}

func isNoPostgres(err error) bool { return errors.Is(err, pgcluster.ErrNoPostgres) }

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
