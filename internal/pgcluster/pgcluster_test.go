package pgcluster_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/riftflow/riftflow/internal/pgcluster"
	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/internal/testenv"
)

// TestEnsureStartsAndReusesLocalCluster exercises the no-DATABASE_URL path:
// initdb into a fresh dir, start on a free port, stop, then start again
// reusing the same dir.
func TestEnsureStartsAndReusesLocalCluster(t *testing.T) {
	testenv.SkipShort(t, "slow")
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

// TestEnsureOwnIgnoresDatabaseURL: with Own, Ensure starts a cluster of its
// own even though DATABASE_URL names a reachable server.
func TestEnsureOwnIgnoresDatabaseURL(t *testing.T) {
	testenv.SkipShort(t, "slow")
	t.Setenv("DATABASE_URL", "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=1")
	ctx := context.Background()
	first, stop, err := pgcluster.Ensure(ctx, pgcluster.Options{})
	if err != nil {
		if os.Getenv("CI") != "true" && isNoPostgres(err) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	defer stop()
	t.Setenv("DATABASE_URL", first)
	if u, stop2, err := pgcluster.Ensure(ctx, pgcluster.Options{}); err != nil || u != first {
		t.Fatalf("without Own: %s, %v; want DATABASE_URL %s", u, err, first)
	} else if err := stop2(); err != nil {
		t.Fatal(err)
	}
	own, stop3, err := pgcluster.Ensure(ctx, pgcluster.Options{Own: true})
	if err != nil {
		t.Fatal(err)
	}
	defer stop3()
	if own == first {
		t.Fatalf("Own: got DATABASE_URL %s, want a cluster of its own", own)
	}
	queryExec(t, own, "CREATE TABLE only_here (x int)")
	if got := pgtest.Query(t, first, "SELECT count(*)::text FROM pg_tables WHERE tablename = 'only_here'"); got != "0" {
		t.Errorf("the table made on the own cluster is on DATABASE_URL's server too")
	}
}
