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
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
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
}

// ErrNoPostgres is returned (wrapped) by Ensure when DATABASE_URL is unset or
// unreachable and no PostgreSQL binaries were found.
var ErrNoPostgres = errors.New("pgcluster: no PostgreSQL available: set DATABASE_URL to a reachable server, " +
	"or install the PostgreSQL server binaries (initdb, pg_ctl), e.g. `apt install postgresql` " +
	"or `brew install postgresql@16`")

// Ensure returns the URL of a reachable PostgreSQL server, in this order:
//  1. DATABASE_URL when set and reachable within 3 s;
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
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	noop := func() error { return nil }

	if env := os.Getenv("DATABASE_URL"); env != "" {
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

	c := &cluster{bins: bins, log: log, fsync: opts.Fsync}
	if os.Geteuid() == 0 {
		if c.runAs, err = user.Lookup("postgres"); err != nil {
			return "", nil, fmt.Errorf("pgcluster: initdb refuses to run as root and there is no `postgres` OS user "+
				"(create one with `useradd -r postgres`, run as a normal user, or set DATABASE_URL): %w", err)
		}
	}

	temp := opts.DataDir == ""
	if temp {
		// Short path: the unix socket lives in here (max ~107 bytes).
		if c.dir, err = os.MkdirTemp("", "rfpg"); err != nil {
			return "", nil, fmt.Errorf("pgcluster: %w", err)
		}
	} else {
		if c.dir, err = filepath.Abs(opts.DataDir); err != nil {
			return "", nil, fmt.Errorf("pgcluster: %w", err)
		}
		if err := os.MkdirAll(c.dir, 0o700); err != nil {
			return "", nil, fmt.Errorf("pgcluster: %w", err)
		}
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
	if err := c.chown(); errors.Is(err, errNotTraversable) && !temp {
		// Running as root from a directory the postgres user cannot enter
		// (e.g. under /root): keep the cluster in a stable directory of its
		// own under the system temp dir instead, reused on the next run.
		sum := sha256.Sum256([]byte(c.dir))
		alt := filepath.Join(os.TempDir(), "riftflow-pg-"+hex.EncodeToString(sum[:6]))
		log.Warn("postgres: the postgres OS user cannot reach the data dir; using another", "wanted", c.dir, "using", alt)
		if err := os.MkdirAll(alt, 0o700); err != nil {
			return "", nil, fmt.Errorf("pgcluster: %w", err)
		}
		c.dir = alt
		if port, ok := c.running(); ok {
			log.Info("postgres: reusing running cluster", "dir", c.dir, "port", port)
			return c.url(port), noop, nil
		}
		if err := c.chown(); err != nil {
			return "", nil, err
		}
	} else if err != nil {
		cleanup()
		return "", nil, err
	}
	if _, statErr := os.Stat(filepath.Join(c.dir, "PG_VERSION")); statErr != nil {
		if err := c.initdb(ctx); err != nil {
			cleanup()
			return "", nil, err
		}
	} else {
		log.Info("postgres: reusing cluster", "dir", c.dir)
	}

	var port int
	for try := 0; ; try++ {
		port, err = freePort()
		if err == nil {
			err = c.start(ctx, port)
		}
		if err == nil || try == 2 {
			break
		}
		log.Warn("postgres: start failed, retrying on another port", "err", err)
	}
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

// errNotTraversable: the postgres OS user cannot reach the data directory.
var errNotTraversable = errors.New("data directory not reachable by the postgres user")

type cluster struct {
	bins  string // directory holding initdb, pg_ctl
	dir   string
	runAs *user.User // nil: run as ourselves
	log   *slog.Logger
	fsync bool
}

func (c *cluster) url(port int) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
}

// command builds cmd, run as the postgres OS user when we are root (from /,
// since the caller's working directory may be closed to that user).
func (c *cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := c.command0(ctx, name, args...)
	if c.runAs != nil {
		cmd.Dir = "/"
	}
	return cmd
}

func (c *cluster) command0(ctx context.Context, name string, args ...string) *exec.Cmd {
	bin := filepath.Join(c.bins, name)
	if c.runAs == nil {
		return exec.CommandContext(ctx, bin, args...)
	}
	if p, err := exec.LookPath("runuser"); err == nil {
		return exec.CommandContext(ctx, p, append([]string{"-u", c.runAs.Username, "--", bin}, args...)...)
	}
	if p, err := exec.LookPath("setpriv"); err == nil {
		return exec.CommandContext(ctx, p, append([]string{"--reuid", c.runAs.Uid, "--regid", c.runAs.Gid,
			"--init-groups", "--", bin}, args...)...)
	}
	// Fall back to the kernel: drop to the user's uid/gid directly.
	cmd := exec.CommandContext(ctx, bin, args...)
	uid, _ := strconv.Atoi(c.runAs.Uid)
	gid, _ := strconv.Atoi(c.runAs.Gid)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	return cmd
}

func (c *cluster) run(ctx context.Context, name string, args ...string) error {
	cmd := c.command(ctx, name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgcluster: %s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// chown hands the data dir to the postgres user and checks that user can
// reach it (a root-only parent directory would stop it).
func (c *cluster) chown() error {
	if c.runAs == nil {
		return nil
	}
	uid, _ := strconv.Atoi(c.runAs.Uid)
	gid, _ := strconv.Atoi(c.runAs.Gid)
	err := filepath.Walk(c.dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		return fmt.Errorf("pgcluster: chown %s to postgres: %w", c.dir, err)
	}
	if err := c.run(context.Background(), "pg_ctl", "--version"); err != nil {
		return err
	}
	cmd := c.command(context.Background(), "pg_ctl", "status", "-D", c.dir)
	if out, _ := cmd.CombinedOutput(); strings.Contains(string(out), "ermission denied") {
		return fmt.Errorf("pgcluster: the postgres OS user cannot reach %s (a parent directory is not "+
			"traversable); use a DataDir under /tmp or chmod o+x its parents: %w", c.dir, errNotTraversable)
	}
	return nil
}

func (c *cluster) initdb(ctx context.Context) error {
	args := []string{"-D", c.dir, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C"}
	if !c.fsync {
		args = append(args, "--no-sync")
	}
	if err := c.run(ctx, "initdb", args...); err != nil {
		return err
	}
	conf := []string{
		"# riftflow pgcluster",
		"listen_addresses = '127.0.0.1'",
		"shared_buffers = 128MB",
		"max_connections = 200",
		"max_wal_size = 2GB",
		"log_min_messages = warning",
	}
	if !c.fsync {
		conf = append(conf, "fsync = off", "full_page_writes = off", "synchronous_commit = off")
	}
	f, err := os.OpenFile(filepath.Join(c.dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	_, err = f.WriteString("\n" + strings.Join(conf, "\n") + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pgcluster: write postgresql.conf: %w", err)
	}
	return nil
}

func (c *cluster) start(ctx context.Context, port int) error {
	sock := c.dir
	if len(sock)+len("/.s.PGSQL.65535") > 100 {
		sock = "" // too long for a unix socket path: TCP only
	}
	o := fmt.Sprintf("-p %d -c unix_socket_directories='%s'", port, sock)
	return c.run(ctx, "pg_ctl", "start", "-w", "-t", "60", "-D", c.dir,
		"-l", filepath.Join(c.dir, "server.log"), "-o", o)
}

func (c *cluster) stop() error {
	return c.run(context.Background(), "pg_ctl", "stop", "-w", "-m", "fast", "-D", c.dir)
}

// tune enables lz4 TOAST compression when the server was built with it
// (ALTER SYSTEM fails otherwise, which we ignore).
func (c *cluster) tune(ctx context.Context, dbURL string) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET default_toast_compression = 'lz4'"); err != nil {
		c.log.Info("postgres: lz4 TOAST compression not available", "err", err)
		return
	}
	_, _ = conn.Exec(ctx, "SELECT pg_reload_conf()")
}

// running reports the port of a server already running on c.dir, from
// postmaster.pid (line 4 is the port).
func (c *cluster) running() (int, bool) {
	b, err := os.ReadFile(filepath.Join(c.dir, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		return 0, false
	}
	pid, err1 := strconv.Atoi(strings.TrimSpace(lines[0]))
	port, err2 := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err1 != nil || err2 != nil || syscall.Kill(pid, 0) != nil {
		return 0, false
	}
	if ping(context.Background(), c.url(port), 2*time.Second) != nil {
		return 0, false
	}
	return port, true
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

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgcluster: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// findBinaries returns the directory holding initdb and pg_ctl: PATH first,
// then the newest /usr/lib/postgresql/*/bin, /usr/local/pgsql/bin,
// /opt/homebrew/opt/postgresql*/bin.
func findBinaries() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "pg_ctl")); err == nil {
			return dir, nil
		}
	}
	var cands []string
	for _, g := range []string{"/usr/lib/postgresql/*/bin", "/usr/local/pgsql/bin", "/opt/homebrew/opt/postgresql*/bin",
		"/usr/local/opt/postgresql*/bin", "/usr/pgsql-*/bin"} {
		m, _ := filepath.Glob(g)
		cands = append(cands, m...)
	}
	sort.Slice(cands, func(i, j int) bool { return versionOf(cands[i]) > versionOf(cands[j]) })
	for _, d := range cands {
		_, e1 := os.Stat(filepath.Join(d, "initdb"))
		_, e2 := os.Stat(filepath.Join(d, "pg_ctl"))
		if e1 == nil && e2 == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w (searched PATH, /usr/lib/postgresql/*/bin and Homebrew)", ErrNoPostgres)
}

// versionOf extracts the major version from a path such as
// /usr/lib/postgresql/15/bin; 0 when there is none.
func versionOf(p string) int {
	for _, part := range strings.Split(p, string(filepath.Separator)) {
		part = strings.TrimLeft(part, "postgreql@-") // the letters of "postgresql", "pgsql", "@" and "-"
		if n, err := strconv.Atoi(part); err == nil {
			return n
		}
	}
	return 0
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
