package pgcluster

// A local cluster's life (initdb, pg_ctl start and stop, run as the postgres
// OS user when we are root) and where its binaries are found.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
