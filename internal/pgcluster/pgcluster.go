// Package pgcluster provides a real PostgreSQL server for development: the
// one at DATABASE_URL when it is reachable, otherwise a throwaway cluster
// started from the local PostgreSQL binaries (initdb, pg_ctl) on a free
// loopback port. `riftflow up --ephemeral-db` (make run) and the test
// helpers in internal/pgtest use it; it does not import package testing.
package pgcluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riftflow/riftflow/internal/freeport"
)

// Options configures Ensure.
type Options struct {
	// DataDir is the cluster directory. Empty means a fresh temporary
	// directory, removed by stop. A directory that already holds a cluster
	// (PG_VERSION present) is reused.
	DataDir string
	// Logger receives progress messages; nil discards them.
	Logger *slog.Logger
	// Fsync keeps fsync, full_page_writes and synchronous_commit on. Tests
	// leave it false (a crash loses the throwaway data, which is fine);
	// `make run` sets it.
	Fsync bool
	// Own starts a cluster even when DATABASE_URL is set and reachable,
	// for callers that stop, crash or fill their server.
	Own bool
}

// ErrNoPostgres is returned (wrapped) by Ensure when DATABASE_URL is unset or
// unreachable and no PostgreSQL binaries were found.
var ErrNoPostgres = errors.New("pgcluster: no PostgreSQL available: set DATABASE_URL to a reachable server, " +
	"or install the PostgreSQL server binaries (initdb, pg_ctl), e.g. `apt install postgresql` " +
	"or `brew install postgresql@16`")

// Ensure returns the URL of a reachable PostgreSQL server, in this order:
//  1. DATABASE_URL when set and reachable within 3 s (unless opts.Own);
//  2. a cluster in opts.DataDir started from local binaries (initdb, pg_ctl
//     on PATH or under /usr/lib/postgresql/*/bin), trust auth, listening on
//     127.0.0.1 at a free port, user postgres, database postgres.
//
// stop shuts down what Ensure started (pg_ctl stop -m fast) and removes a
// temporary DataDir; it is a no-op for DATABASE_URL or a cluster that was
// already running. Running as root, initdb and pg_ctl are run as the
// `postgres` OS user (runuser or setpriv) and DataDir is chowned to it.
// Errors wrap ErrNoPostgres when nothing could be found.
func Ensure(ctx context.Context, opts Options) (dbURL string, stop func() error, err error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	noop := func() error { return nil }

	if env := os.Getenv("DATABASE_URL"); env != "" && !opts.Own {
		if perr := ping(ctx, env, 3*time.Second); perr == nil {
			log.Info("postgres: using DATABASE_URL")
			return env, noop, nil
		} else {
			log.Warn("postgres: DATABASE_URL unreachable, starting a local cluster", "err", perr)
		}
	}

	bins, err := findBinaries()
	if err != nil {
		return "", nil, err
	}

	c, temp, err := newCluster(bins, log, opts)
	if err != nil {
		return "", nil, err
	}
	cleanup := func() {
		if temp {
			_ = os.RemoveAll(c.dir)
		}
	}
	if port, ok := c.running(); ok {
		log.Info("postgres: reusing running cluster", "dir", c.dir, "port", port)
		return c.url(port), noop, nil
	}
	if port, ok, err := c.reachableDir(temp); err != nil {
		cleanup()
		return "", nil, err
	} else if ok {
		log.Info("postgres: reusing running cluster", "dir", c.dir, "port", port)
		return c.url(port), noop, nil
	}
	if _, statErr := os.Stat(filepath.Join(c.dir, "PG_VERSION")); statErr != nil {
		if err := c.initdb(ctx); err != nil {
			cleanup()
			return "", nil, err
		}
	} else {
		log.Info("postgres: reusing cluster", "dir", c.dir)
	}
	port, err := c.startOnFreePort(ctx)
	if err != nil {
		cleanup()
		return "", nil, err
	}
	dbURL = c.url(port)
	c.tune(ctx, dbURL)
	log.Info("postgres: started local cluster", "dir", c.dir, "port", port, "bin", bins)
	stop = func() error {
		err := c.stop()
		cleanup()
		return err
	}
	return dbURL, stop, nil
}

// newCluster prepares a cluster of the binaries in directory bins, in opts.DataDir, or in a new
// temporary directory (temp is then true: stop removes it). As root it
// runs the server as the `postgres` OS user, and fails clearly without one.
func newCluster(bins string, log *slog.Logger, opts Options) (c *cluster, temp bool, err error) {
	c = &cluster{bins: bins, log: log, fsync: opts.Fsync}
	if os.Geteuid() == 0 {
		if c.runAs, err = user.Lookup("postgres"); err != nil {
			return nil, false, fmt.Errorf("pgcluster: initdb refuses to run as root and there is no `postgres` OS user "+
				"(create one with `useradd -r postgres`, run as a normal user, or set DATABASE_URL): %w", err)
		}
	}
	if opts.DataDir == "" {
		// Short path: the unix socket lives in here (max ~107 bytes).
		if c.dir, err = os.MkdirTemp("", "rfpg"); err != nil {
			return nil, false, fmt.Errorf("pgcluster: %w", err)
		}
		return c, true, nil
	}
	if c.dir, err = filepath.Abs(opts.DataDir); err != nil {
		return nil, false, fmt.Errorf("pgcluster: %w", err)
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("pgcluster: %w", err)
	}
	return c, false, nil
}

// reachableDir gives the data directory to the server's OS user. Run as
// root from a directory that user cannot enter (e.g. under /root), the
// cluster moves to a stable directory of its own under the system temp
// dir, reused on the next run: if a cluster already runs there, ok is true
// and port is its port.
func (c *cluster) reachableDir(temp bool) (port int, ok bool, err error) {
	err = c.chown()
	if !errors.Is(err, errNotTraversable) || temp {
		return 0, false, err
	}
	sum := sha256.Sum256([]byte(c.dir))
	alt := filepath.Join(os.TempDir(), "riftflow-pg-"+hex.EncodeToString(sum[:6]))
	c.log.Warn("postgres: the postgres OS user cannot reach the data dir; using another", "wanted", c.dir, "using", alt)
	if err := os.MkdirAll(alt, 0o700); err != nil {
		return 0, false, fmt.Errorf("pgcluster: %w", err)
	}
	c.dir = alt
	if port, ok := c.running(); ok {
		return port, true, nil
	}
	return 0, false, c.chown()
}

// startOnFreePort starts the server on a free port, trying another port
// twice if the start fails (a port taken between the check and the bind).
func (c *cluster) startOnFreePort(ctx context.Context) (int, error) {
	var err error
	for try := 0; ; try++ {
		var port int
		if port, err = freeport.Get(); err != nil {
			err = fmt.Errorf("pgcluster: free port: %w", err)
		} else if err = c.start(ctx, port); err == nil {
			return port, nil
		}
		if try == 2 {
			return 0, err
		}
		c.log.Warn("postgres: start failed, retrying on another port", "err", err)
	}
}

func ping(ctx context.Context, dbURL string, timeout time.Duration) error {
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	cfg.ConnectTimeout = timeout
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}

// DatabaseURL returns u with its database name replaced by name.
func DatabaseURL(u, name string) (string, error) {
	p, err := url.Parse(u)
	if err != nil || p.Scheme == "" {
		// key=value DSN
		return u + " dbname=" + name, nil
	}
	p.Path = "/" + name
	return p.String(), nil
}
