// Package pgtest gives tests a fresh, migrated PostgreSQL database each:
// Main from TestMain ensures one server per test binary (internal/pgcluster:
// DATABASE_URL or a throwaway local cluster with fsync off) and NewDatabase
// clones a migrated template per test. With CI=true a missing server is a
// failure, never a skip. Only _test.go files import this package.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riftflow/riftflow/internal/pgcluster"
	"github.com/riftflow/riftflow/pkg/store"
)

var (
	adminURL   string // set by Main; empty when unavailable
	unavailErr error  // why there is no server
	mainCalled bool

	tmplOnce sync.Once
	tmplName string
	tmplErr  error
)

// Main is a TestMain helper: it ensures one PostgreSQL server per test
// binary (see Ensure; a temporary cluster with fsync off), runs the tests and
// stops the cluster. When no server can be had and CI=true it exits with
// status 1 before running anything; otherwise tests calling NewDatabase skip
// with the reason. Each after func runs once the tests have run (reports
// over every test of the binary).
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
func Main(m *testing.M, after ...func()) {
	mainCalled = true
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	u, stop, err := pgcluster.Ensure(ctx, pgcluster.Options{Logger: logger})
	cancel()
	if err != nil {
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "pgtest: CI=true and no PostgreSQL:", err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "pgtest: Postgres tests will be skipped:", err)
		unavailErr = err
	}
	adminURL = u
	code := m.Run()
	for _, f := range after {
		f()
	}
	if tmplName != "" {
		dropDatabase(adminURL, tmplName)
	}
	if stop != nil {
		if err := stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: stop:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

// NewDatabase creates a fresh database with a random name (rf_test_<hex>),
// migrated by store.Migrate, and returns its URL; the database is dropped
// (WITH FORCE) on t's cleanup. It needs Main in TestMain. Without a server it
// fails the test when CI=true and skips it otherwise.
func NewDatabase(t testing.TB) string {
	t.Helper()
	requireServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Migrate once into a template database, then clone it per test: a
	// CREATE DATABASE … TEMPLATE is much faster than re-running migrations.
	tmplOnce.Do(func() {
		name := "rf_tmpl_" + randomHex()
		if tmplErr = createDatabase(ctx, adminURL, name, ""); tmplErr != nil {
			return
		}
		tmplName = name
		u, err := pgcluster.DatabaseURL(adminURL, name)
		if err != nil {
			tmplErr = err
			return
		}
		tmplErr = store.Migrate(ctx, u, slog.New(slog.DiscardHandler))
	})
	if tmplErr != nil {
		t.Fatalf("pgtest: template database: %v", tmplErr)
	}
	u := newDatabase(ctx, t, tmplName)
	// Exercise store.Migrate on the clone as well: it must be a no-op there.
	if err := store.Migrate(ctx, u, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("pgtest: migrate %s: %v", u, err)
	}
	return u
}

// NewEmptyDatabase is NewDatabase without the migrations, for tests of
// the migration itself (the migrate Job of the Kubernetes overlays).
func NewEmptyDatabase(t testing.TB) string {
	t.Helper()
	requireServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return newDatabase(ctx, t, "")
}

// requireServer fails t without Main, and without a server fails it under
// CI=true or skips it otherwise.
func requireServer(t testing.TB) {
	t.Helper()
	if !mainCalled {
		t.Fatal("pgtest: call pgtest.Main(m) from TestMain")
	}
	if adminURL == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("pgtest: no PostgreSQL under CI=true: %v", unavailErr)
		}
		t.Skipf("pgtest: no PostgreSQL: %v", unavailErr)
	}
}

// newDatabase creates rf_test_<hex> from template ("" for none), dropped on
// t's cleanup, and returns its URL.
func newDatabase(ctx context.Context, t testing.TB, template string) string {
	t.Helper()
	name := "rf_test_" + randomHex()
	if err := createDatabase(ctx, adminURL, name, template); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { dropDatabase(adminURL, name) })
	u, err := pgcluster.DatabaseURL(adminURL, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return u
}

func createDatabase(ctx context.Context, admin, name, template string) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		sql += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

func dropDatabase(admin, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return
	}
	defer conn.Close(context.Background())
	_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

func randomHex() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Pool opens a pool on the database at url (a NewDatabase URL) for a
// test's own SQL: to set up rows or faults and to read back what a store
// wrote, beside the store under test. It is closed on t's cleanup; any
// error fails the test.
func Pool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	return pool
}

// Query runs sql (one row, one column) on the database at url and returns
// the value as text; it fails the test on any error.
func Query(t testing.TB, url, sql string) string {
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

// Querier is what Count runs its query on: a *pgx.Conn, a *pgxpool.Pool or
// a pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Count runs sql (one row, one integer column) on db under t's context
// and returns the number; any error fails the test.
func Count(t testing.TB, db Querier, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(t.Context(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}
