package e2e

// The chaos environment: the five services as separate OS processes built
// from their cmd mains, an embedded NATS server (or a 3-node cluster) on
// loopback TCP, a Postgres database, and the simulator on loopback. Faults
// are injected from the test: SIGKILL, NATS restart, node loss, pg_ctl
// stop/start, simulator faults.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/natsembed"
	"github.com/riftflow/riftflow/internal/pgcluster"
	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/internal/tcpproxy"
	"github.com/riftflow/riftflow/internal/testenv"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/services/riftflow/stack"
	"github.com/riftflow/riftflow/streams"
)

// chaosServices are the five binaries, in pipeline order.
var chaosServices = []string{"resolver", "matchid-lister", "match-fetcher", "persister", "retry-sweeper"}

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// chaosBinaries builds the five services once per test binary into
// $TMPDIR/riftflow-chaos-bin/<pid> and removes the directories of test
// binaries that are no longer running.
func chaosBinaries(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		root := filepath.Join(os.TempDir(), "riftflow-chaos-bin")
		if ents, err := os.ReadDir(root); err == nil {
			for _, e := range ents {
				if pid, err := strconv.Atoi(e.Name()); err == nil && syscall.Kill(pid, 0) == syscall.ESRCH {
					os.RemoveAll(filepath.Join(root, e.Name()))
				}
			}
		}
		binDir = filepath.Join(root, strconv.Itoa(os.Getpid()))
		if binErr = os.MkdirAll(binDir, 0o755); binErr != nil {
			return
		}
		// -tags chaosclock compiles in the test-only clock skew
		// (RIFTFLOW_TEST_CLOCK_SKEW, pkg/app/clock_skew.go); nats-node runs
		// a NATS cluster node as its own process.
		args := []string{"build", "-tags", "chaosclock", "-o", binDir + string(filepath.Separator)}
		for _, s := range chaosServices {
			args = append(args, "github.com/riftflow/riftflow/services/"+s+"/cmd/"+s)
		}
		args = append(args, "github.com/riftflow/riftflow/internal/cmd/nats-node")
		cmd := exec.Command("go", args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binDir
}

// chaosProc is one service process. Its stderr goes to a log file that survives
// restarts (appended).
type chaosProc struct {
	name    string
	bin     string
	env     []string
	logPath string
	ops     string // HTTP_ADDR, host:port

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	// exits records every exit: "signal: killed" for our SIGKILLs,
	// "terminated: …" for our SIGTERMs, else the error.
	exits []string
	// terminating is set while stop waits for a SIGTERMed process.
	terminating bool
}

func (p *chaosProc) start(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(p.bin)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		x := "exit 0"
		if err != nil {
			x = err.Error()
		}
		if p.terminating && x != "signal: killed" {
			x = "terminated: " + x
		}
		p.exits = append(p.exits, x)
		p.mu.Unlock()
		close(done)
	}()
}

// kill sends SIGKILL (kill -9) and waits for the process to be gone.
func (p *chaosProc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// stop sends SIGTERM and waits up to d, then SIGKILLs. It reports whether
// the process exited within d (drained).
func (p *chaosProc) stop(d time.Duration) bool {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.terminating = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.terminating = false
		p.mu.Unlock()
	}()
	if cmd == nil {
		return true
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return true
	case <-time.After(d):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
		return false
	}
}

func (p *chaosProc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// chaosOptions configures a chaos environment.
type chaosOptions struct {
	players, perPlayer int
	// nodes is 1 (single server with a TCP port) or 3 (R3 cluster of
	// nats-node OS processes, natsembed.ProcCluster).
	nodes int
	// replicas is the number of processes per service (default 1); the
	// second is named "<service>-2" in chaosEnv.procs.
	replicas int
	// natsProxy names the processes whose NATS connection goes through a
	// TCP proxy (chaosEnv.natsProxy) that the test can black-hole.
	natsProxy []string
	// riotProxy routes the fetchers' Riot traffic through a TCP proxy
	// (chaosEnv.riotProxy).
	riotProxy bool
	// skew is each process's clock skew (RIFTFLOW_TEST_CLOCK_SKEW).
	skew map[string]time.Duration
	// lostCalls is how many calls per match and method may go unseen as
	// failures: a call Riot answered whose answer died with a killed
	// process, or on a connection the test cut. checkCalls fails the case
	// when a match took more getMatch (or getTimeline) calls than its Riot
	// failures + 1 + lostCalls. Default 0: the bound is failures + 1.
	lostCalls int64
	// beforeServices runs after the schema migration, before the services
	// start (tablespaces, …).
	beforeServices func(e *chaosEnv)
	// beforeNATS runs before the NATS server or cluster starts in
	// e.dir/nats (mounts under a node's store, …).
	beforeNATS func(e *chaosEnv)
	// ownPostgres starts a private Postgres cluster the test can stop and
	// start (pg_ctl); otherwise a database of the shared test server.
	ownPostgres bool
	faults      sim.Faults
	fixtures    string            // sim FixturesDir; default sim.FindFixtures()
	env         map[string]string // extra service environment
	apiKey      string            // default a random RGAPI-chaos-… key
	// simHandler wraps the simulator's handler (request capture).
	simHandler func(http.Handler) http.Handler
	// otlp is an OTLP/HTTP endpoint the services export spans to.
	otlp string
	// dbPassword is added to DATABASE_URL (trust auth ignores it): the
	// secrets test checks it never leaks either.
	dbPassword string
	// fetchers, if > 0, is the number of match-fetcher processes
	// (instead of replicas); sim edits the simulator's options (limits,
	// blacklist) before it starts.
	fetchers int
	sim      func(*sim.Options)
}

// chaosEnv is a running environment.
type chaosEnv struct {
	t    testing.TB
	o    chaosOptions
	ctx  context.Context
	dir  string
	log  *slog.Logger
	sim  *sim.Sim
	base string
	key  string

	// NATS: one server, or a cluster.
	natsOpts natsembed.Options
	natsSrv  *server.Server
	cluster  *natsembed.ProcCluster
	natsURL  string
	// natsProxy and riotProxy are the partition points (nil unless asked).
	natsProxy, riotProxy *tcpproxy.Proxy
	nc                   *nats.Conn
	js                   jetstream.JetStream
	subj                 bus.Subjects

	dbURL  string
	pgDir  string
	pgPort int
	pool   *pgxpool.Pool

	procs map[string]*chaosProc
	order []string // process names, pipeline order, replicas after their first
	// figures for the report
	kills, natsRestarts, nodeLosses, pgRestarts, terms, undrained int
}

// chaosFastEnv compresses retry schedules, as stacktest.FastEnv does for stacktest.Start,
// and makes recovery paths (sweeper, lock TTL) run within a test.
var chaosFastEnv = map[string]string{
	"FETCH_BACKOFF":           "1s,2s,2s,2s",
	"SWEEP_INTERVAL":          "5s",
	"SWEEP_STALE_AFTER":       "20s",
	"SWEEP_QUEUE_SLACK":       "10s", // > the longest FETCH_BACKOFF step
	"SWEEP_RETRY_MAX":         "40s", // pending fetches (5xx streaks) retried within the run
	"SYNC_STUCK_AFTER":        "60s",
	"SYNC_LOCK_TTL":           "60s",
	"PERSIST_MAX_WAIT":        "50ms",
	"SHUTDOWN_TIMEOUT":        "10s",
	"LOG_LEVEL":               "info",
	"RIOT_RATELIMIT_MAX_WAIT": "10s",
	"RIOT_HTTP_TIMEOUT_MS":    "3000",
	// Riot's 1 s / 60 s service-429 backoff and 30 s breaker are kept in
	// shape but compressed, as the retry schedule is.
	"RIOT_BACKOFF_START":   "250ms",
	"RIOT_BACKOFF_MAX":     "5s",
	"RIOT_BREAKER_TIMEOUT": "3s",
}

// chaosAckWait replaces the consumers' AckWait (30–60 s in production) so a
// SIGKILLed process's in-flight messages come back within a test.
const chaosAckWait = 10 * time.Second

func startChaos(t testing.TB, o chaosOptions) *chaosEnv {
	t.Helper()
	testenv.SkipShort(t, "chaos environment (separate service processes)")
	bins := chaosBinaries(t)
	if o.nodes == 0 {
		o.nodes = 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e := &chaosEnv{t: t, o: o, ctx: ctx, dir: t.TempDir(), procs: map[string]*chaosProc{}, subj: bus.Subjects{Prefix: "lol"}}
	e.log = slog.New(slog.NewTextHandler(stagetest.Writer(t), &slog.HandlerOptions{Level: slog.LevelWarn}))

	// Simulator.
	e.key = o.apiKey
	if e.key == "" {
		e.key = "RGAPI-chaos-" + stack.RandHex(12)
	}
	fix := o.fixtures
	if fix == "" {
		fix = sim.FindFixtures()
	}
	so := sim.Options{APIKey: e.key, FixturesDir: fix, Logger: e.log,
		Limits:    sim.RateLimits{App: "1000:10,60000:600"},
		Synthetic: sim.Synthetic{Players: o.players, MatchesPerPlayer: o.perPlayer, Platform: "na1"},
		Faults:    o.faults}
	if o.sim != nil {
		o.sim(&so)
	}
	s, err := sim.New(so)
	if err != nil {
		t.Fatal(err)
	}
	e.sim = s
	if o.simHandler != nil {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: o.simHandler(s.Handler())}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		e.base = "http://" + ln.Addr().String() + "/{route}"
	} else {
		if e.base, err = s.Start("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
	}

	// NATS.
	if o.beforeNATS != nil {
		o.beforeNATS(e)
	}
	if o.nodes == 3 {
		c, err := natsembed.StartProcCluster(filepath.Join(bins, "nats-node"), 3, filepath.Join(e.dir, "nats"))
		if err != nil {
			t.Fatal(err)
		}
		e.cluster = c
		t.Cleanup(c.Shutdown)
		e.natsURL = strings.Join(c.URLs(), ",")
	} else {
		e.natsOpts = natsembed.Options{Name: "chaos", StoreDir: filepath.Join(e.dir, "nats"), Port: 0, NoLog: true}
		srv, err := natsembed.StartServer(e.natsOpts)
		if err != nil {
			t.Fatal(err)
		}
		e.natsSrv = srv
		e.natsURL = srv.ClientURL()
		port, _ := strconv.Atoi(e.natsURL[strings.LastIndex(e.natsURL, ":")+1:])
		e.natsOpts.Port = port // a restart comes back on the same port
		t.Cleanup(func() {
			if e.natsSrv != nil {
				e.natsSrv.Shutdown()
				e.natsSrv.WaitForShutdown()
			}
		})
	}
	nc, err := nats.Connect(e.natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond), nats.Name("chaos-test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	e.nc = nc
	if e.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	// A node's store may be a 64 MiB tmpfs (the soak's full disk): keep
	// DEAD's byte cap, reserved on every replica, well under it.
	set, err := streams.Load(streams.Options{Replicas: o.nodes, AckWait: chaosAckWait, MaxStreamBytes: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	actx, acancel := context.WithTimeout(ctx, 2*time.Minute)
	err = streams.Apply(actx, e.js, set, e.log)
	acancel()
	if err != nil {
		t.Fatal(err)
	}

	// Postgres.
	if o.ownPostgres {
		e.startOwnPostgres()
	} else {
		e.dbURL = pgtest.NewDatabase(t)
	}
	if err := store.Migrate(ctx, e.dbURL, e.log); err != nil {
		t.Fatal(err)
	}
	if e.pool, err = pgxpool.New(ctx, e.dbURL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.pool.Close)
	if o.beforeServices != nil {
		o.beforeServices(e)
	}

	// Services.
	svcDB := e.dbURL
	if o.dbPassword != "" {
		svcDB = strings.Replace(svcDB, "postgres://postgres@", "postgres://postgres:"+o.dbPassword+"@", 1)
	}
	base := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"NATS_URL=" + e.natsURL, "DATABASE_URL=" + svcDB, "RIOT_API_KEY=" + e.key, "RIOT_API_BASE_URL=" + e.base,
		"STREAM_REPLICAS=" + strconv.Itoa(o.nodes), "LOG_FORMAT=text"}
	vars := map[string]string{}
	for k, v := range chaosFastEnv {
		vars[k] = v
	}
	for k, v := range o.env {
		vars[k] = v
	}
	for k, v := range vars {
		base = append(base, k+"="+v)
	}
	if err := os.MkdirAll(filepath.Join(e.dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if len(o.natsProxy) > 0 {
		// One node (or the single server): the partition cuts that link.
		target := strings.TrimPrefix(strings.Split(e.natsURL, ",")[0], "nats://")
		if e.natsProxy, err = tcpproxy.Start(target); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.natsProxy.Close() })
	}
	riotBase := e.base
	if o.riotProxy {
		u := strings.TrimPrefix(e.base, "http://")
		hostport := u[:strings.Index(u, "/")]
		if e.riotProxy, err = tcpproxy.Start(hostport); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.riotProxy.Close() })
		riotBase = strings.Replace(e.base, hostport, e.riotProxy.Addr(), 1)
	}
	if o.replicas == 0 {
		o.replicas = 1
		e.o.replicas = 1
	}
	for _, svc := range chaosServices {
		n := o.replicas
		if svc == "match-fetcher" && o.fetchers > 0 {
			n = o.fetchers
		}
		for r := 1; r <= n; r++ {
			name := svc
			if r > 1 {
				name = fmt.Sprintf("%s-%d", svc, r)
			}
			ops := "127.0.0.1:" + strconv.Itoa(freeTCPPort(t))
			p := &chaosProc{name: name, bin: filepath.Join(bins, svc), logPath: filepath.Join(e.dir, "logs", name+".log"), ops: ops,
				env: append(append([]string(nil), base...), "HTTP_ADDR="+ops, "OTEL_SERVICE_NAME="+svc)}
			if o.otlp != "" {
				p.env = append(p.env, "OTEL_EXPORTER_OTLP_ENDPOINT="+o.otlp, "OTEL_TRACES_SAMPLER=always_on")
			}
			if slices.Contains(o.natsProxy, name) {
				p.env = append(p.env, "NATS_URL=nats://"+e.natsProxy.Addr())
			}
			if o.riotProxy && svc == "match-fetcher" {
				p.env = append(p.env, "RIOT_API_BASE_URL="+riotBase)
			}
			if d, ok := o.skew[name]; ok {
				p.env = append(p.env, "RIFTFLOW_TEST_CLOCK_SKEW="+d.String())
			}
			e.procs[name] = p
			e.order = append(e.order, name)
		}
	}
	t.Cleanup(e.stopAll)
	t.Cleanup(func() {
		if t.Failed() {
			e.dumpLogs(60)
			e.keepLogs()
		}
	})
	for _, name := range e.order {
		e.procs[name].start(t)
	}
	return e
}

func (e *chaosEnv) stopAll() {
	var wg sync.WaitGroup
	for _, p := range e.procs {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop(20 * time.Second) }()

	}
	wg.Wait()
}

// dumpLogs prints the last n lines of every service log.
func (e *chaosEnv) dumpLogs(n int) {
	for _, name := range e.order {
		b, _ := os.ReadFile(e.procs[name].logPath)
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		e.t.Logf("---- %s (last %d lines)\n%s", name, len(lines), strings.Join(lines, "\n"))
	}
}

// keepLogs copies every service log to $CHAOS_LOG_DIR/<test>/ when set, so a
// failed run can be studied after the test's temporary directory is gone.
func (e *chaosEnv) keepLogs() {
	root := os.Getenv("CHAOS_LOG_DIR")
	if root == "" {
		return
	}
	dir := filepath.Join(root, strings.ReplaceAll(e.t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	for _, name := range e.order {
		if b, err := os.ReadFile(e.procs[name].logPath); err == nil {
			_ = os.WriteFile(filepath.Join(dir, name+".log"), b, 0o644)
		}
	}
	e.t.Logf("service logs kept in %s", dir)
}

// allLogs returns every service's stderr.
func (e *chaosEnv) allLogs() []byte {
	var all []byte
	for _, name := range e.order {
		b, _ := os.ReadFile(e.procs[name].logPath)
		all = append(all, b...)
	}
	return all
}

// killRestart SIGKILLs a service, waits pause and starts it again.
func (e *chaosEnv) killRestart(name string, pause time.Duration) {
	e.t.Helper()
	p := e.procs[name]
	p.kill()
	e.kills++
	e.t.Logf("kill -9 %s (stored %d)", name, e.stored())
	time.Sleep(pause)
	p.start(e.t)
}

// restartNATS shuts the single server down, waits pause and starts it
// again on the same port and store directory.
func (e *chaosEnv) restartNATS(pause time.Duration) {
	e.t.Helper()
	e.natsSrv.Shutdown()
	e.natsSrv.WaitForShutdown()
	e.natsSrv = nil
	e.natsRestarts++
	e.t.Logf("NATS server down (stored %d)", e.stored())
	time.Sleep(pause)
	srv, err := natsembed.StartServer(e.natsOpts)
	if err != nil {
		e.t.Fatal(err)
	}
	e.natsSrv = srv
	e.t.Log("NATS server back on", srv.ClientURL())
}

// startOwnPostgres starts a private cluster in a directory the postgres OS
// user can reach (pgcluster.Ensure initdb's it and starts it on a free port).
func (e *chaosEnv) startOwnPostgres() {
	t := e.t
	dir, err := os.MkdirTemp("", "rfchaospg")
	if err != nil {
		t.Fatal(err)
	}
	e.pgDir = dir
	// Production durability (fsync, synchronous_commit on): with
	// synchronous_commit off, pg_ctl stop -m immediate loses commits
	// Postgres had already reported, after the persister acked their
	// FetchResults; no service can tell (TestLedgerRecoversLostCommits
	// covers the sweeper catching up after such a loss).
	url, stop, err := pgcluster.Ensure(e.ctx, pgcluster.Options{DataDir: dir, Logger: e.log, Fsync: true, Own: true})
	if err != nil {
		os.RemoveAll(dir)
		if os.Getenv("CI") != "true" && strings.Contains(err.Error(), "no PostgreSQL") {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	e.dbURL = url
	u := url[strings.Index(url, "@127.0.0.1:")+len("@127.0.0.1:"):]
	e.pgPort, _ = strconv.Atoi(u[:strings.Index(u, "/")])
	t.Cleanup(func() {
		if err := stop(); err != nil {
			// the cluster may be down if the test failed mid-restart
			e.pgctl("stop", "-w", "-m", "immediate", "-D", dir)
		}
		os.RemoveAll(dir)
	})
}

// pgctl runs pg_ctl as the postgres OS user when we are root, as pgcluster does.
func (e *chaosEnv) pgctl(args ...string) error {
	bin, err := exec.LookPath("pg_ctl")
	if err != nil {
		matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
		if len(matches) == 0 {
			return err
		}
		bin = matches[len(matches)-1]
	}
	cmd := exec.Command(bin, args...)
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err == nil {
			cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", bin}, args...)...)
		}
	}
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// restartPostgres stops the private cluster (pg_ctl stop -m fast: every
// session is terminated), waits pause, and starts it on the same port.
func (e *chaosEnv) restartPostgres(pause time.Duration) { e.bouncePostgres("fast", pause) }

// bouncePostgres stops the private cluster with pg_ctl stop -m mode
// ("fast", or "immediate": a crash, with recovery at the next start), waits
// pause, and starts it on the same port.
func (e *chaosEnv) bouncePostgres(mode string, pause time.Duration) {
	e.t.Helper()
	if err := e.pgctl("stop", "-w", "-m", mode, "-D", e.pgDir); err != nil {
		e.t.Fatal(err)
	}
	e.pgRestarts++
	e.t.Logf("Postgres stopped (pg_ctl stop -m %s) for %s", mode, pause)
	time.Sleep(pause)
	o := fmt.Sprintf("-p %d -c unix_socket_directories=''", e.pgPort)
	if err := e.pgctl("start", "-w", "-t", "60", "-D", e.pgDir, "-l", filepath.Join(e.pgDir, "server.log"), "-o", o); err != nil {
		e.t.Fatal(err)
	}
	e.t.Logf("Postgres started again on port %d (stored %d)", e.pgPort, e.stored())
}

// ---- driving and observing -------------------------------------------------

// ingestAll publishes one full ingest request per synthetic player.
func (e *chaosEnv) ingestAll(from, to int) {
	e.t.Helper()
	for i := from; i <= to; i++ {
		rid := sim.SyntheticRiotID(i)
		req := bus.IngestRequest{RequestID: fmt.Sprintf("chaos-%04d", i), RiotID: rid.GameName + "#" + rid.TagLine,
			Platform: "na1", Mode: bus.ModeFull, LookbackDays: 60, Count: e.o.perPlayer, Trigger: "test"}
		for {
			ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
			err := stack.PublishIngest(ctx, e.nc, e.subj, req)
			cancel()
			if err == nil {
				break
			}
			if e.ctx.Err() != nil {
				e.t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// query runs a one-value query; errors (Postgres down) give -1.
func (e *chaosEnv) query(sql string, args ...any) int {
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	var n int
	if err := e.pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		return -1
	}
	return n
}

// stored is the number of matches stored so far.
func (e *chaosEnv) stored() int { return e.query(`SELECT count(*) FROM matches`) }

// waitStored polls until at least n matches are stored.
func (e *chaosEnv) waitStored(n int, timeout time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for e.stored() < n {
		if time.Now().After(deadline) {
			e.t.Fatalf("only %d matches stored after %s, want ≥ %d", e.stored(), timeout, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitSettled polls until every synthetic player's account has left
// pending/syncing and every ledger row is final, then until every consumer
// is drained. The timeout bounds liveness only; the checks come after.
func (e *chaosEnv) waitSettled(timeout time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	want := e.o.players
	for {
		done := e.query(`SELECT count(*) FROM accounts WHERE puuid LIKE 'synth-%' AND sync_status IN ('completed','failed')`)
		open := e.query(`SELECT count(*) FROM match_fetches WHERE status IN ('unfetched','temporary_failure')`)
		if done == want && open == 0 {
			break
		}
		if time.Now().After(deadline) {
			e.logOpenRows()
			e.t.Fatalf("not settled after %s: %d/%d accounts done, %d ledger rows open, %d stored", timeout, done, want, open, e.stored())
		}
		time.Sleep(250 * time.Millisecond)
	}
	for {
		busy, err := e.consumersBusy()
		if err == nil && busy == "" {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("consumers not drained after %s: %s %v", timeout, busy, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// logOpenRows logs the ledger rows still open (at most 30).
func (e *chaosEnv) logOpenRows() {
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	rows, err := e.pool.Query(ctx, `SELECT match_id, kind, status, attempt, retry_count, not_found,
  coalesce(last_error, ''), coalesce(last_attempt_at::text, '') FROM match_fetches
WHERE status IN ('unfetched','temporary_failure') ORDER BY match_id, kind LIMIT 30`)
	if err != nil {
		e.t.Logf("open rows: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var id, kind, status, reason, at string
		var attempt, retries, nf int
		if rows.Scan(&id, &kind, &status, &attempt, &retries, &nf, &reason, &at) == nil {
			e.t.Logf("OPEN %s/%s %s attempt %d retries %d not_found %d at %s: %s", id, kind, status, attempt, retries, nf, at, reason)
		}
	}
}

func (e *chaosEnv) consumersBusy() (string, error) {
	for _, c := range []struct{ stream, name string }{
		{streams.StreamIngest, streams.ConsumerResolver}, {streams.StreamSync, streams.ConsumerMatchIDLister},
		{streams.StreamFetched, streams.ConsumerPersister},
		{streams.StreamFetch, streams.FetcherConsumer("americas")},
		// The other priority queue of each stage (the chaos requests are
		// interactive).
		{streams.StreamIngest, streams.ConsumerResolverBackground}, {streams.StreamSync, streams.ConsumerMatchIDListerInteractive},
		{streams.StreamFetched, streams.ConsumerPersisterInteractive},
		{streams.StreamFetch, streams.InteractiveFetcherConsumer("americas")},
	} {
		ctx, cancel := context.WithTimeout(e.ctx, 3*time.Second)
		cons, err := e.js.Consumer(ctx, c.stream, c.name)
		if err != nil {
			cancel()
			return "", err
		}
		info, err := cons.Info(ctx)
		cancel()
		if err != nil {
			return "", err
		}
		if info.NumPending > 0 || info.NumAckPending > 0 {
			return fmt.Sprintf("%s pending %d ack-pending %d", c.name, info.NumPending, info.NumAckPending), nil
		}
	}
	return "", nil
}

// ---- the end-state check ----------------------------------------------------

// chaosResult are the figures of one run, checked against the sim's truth.
type chaosResult struct {
	Case         string `json:"case"`
	Listed       int    `json:"matches_checked"`
	Stored       int    `json:"stored"`
	FinalFailed  int    `json:"final_with_reason"`
	Timelines    int    `json:"timelines_stored"`
	Participants int    `json:"participant_rows"`
	Losses       int    `json:"losses"`
	WronglyGone  int    `json:"wrongly_gone"`
	Duplicates   int    `json:"duplicates"`
	Wrong        int    `json:"content_mismatches"`
	Syncing      int    `json:"accounts_left_syncing"`
	Requests     int64  `json:"riot_requests"`
	MatchFetches int64  `json:"getmatch_200"`
	MaxCalls     int64  `json:"max_getmatch_calls_per_match"`
	MaxCallsID   string `json:"max_calls_match,omitempty"`
	// ExtraCalls is the calls (getMatch and getTimeline) beyond each
	// match's Riot failures + 1, summed over the listed matches: calls the
	// pipeline spent twice. OverBound counts the matches past
	// failures + 1 + LostCalls (the case fails when it is not 0).
	ExtraCalls    int64            `json:"extra_calls"`
	OverBound     int              `json:"matches_over_call_bound"`
	LostCalls     int64            `json:"lost_calls_allowed"`
	Faults        map[string]int64 `json:"sim_faults,omitempty"`
	Injected      []string         `json:"injected"`
	Violations    int64            `json:"rate_limit_violations"`
	BucketsOver   int              `json:"buckets_over_limit"`
	Reasons       map[string]int   `json:"final_reasons,omitempty"`
	ServiceExits  int              `json:"unexpected_exits"`
	ElapsedSecond float64          `json:"elapsed_s"`
}

// ledgerRow is one match_fetches row.
type ledgerRow struct {
	status, reason string
	attempt        int64
}

// readLedger reads the match_fetches rows that satisfy the SQL condition
// where, keyed by the SQL expression key.
func readLedger(t testing.TB, ctx context.Context, pool *pgxpool.Pool, key, where string) map[string]ledgerRow {
	t.Helper()
	ledger := map[string]ledgerRow{}
	rows, err := pool.Query(ctx, `SELECT `+key+`, status, coalesce(last_error, ''), attempt FROM match_fetches WHERE `+where)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var l ledgerRow
		if err := rows.Scan(&k, &l.status, &l.reason, &l.attempt); err != nil {
			t.Fatal(err)
		}
		ledger[k] = l
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	return ledger
}

// checkEnd is the Jepsen-style check: it reads the whole end state and
// compares it with the simulator's truth for the synthetic players. It
// returns the figures and the ledger it read, keyed "<match ID>/<kind>".
func checkEnd(t testing.TB, ctx context.Context, pool *pgxpool.Pool, s *sim.Sim, players int) (chaosResult, map[string]ledgerRow) {
	t.Helper()
	truth := s.Truth()
	listed := map[string]sim.MatchTruth{}
	for i := 1; i <= players; i++ {
		p, ok := truth.Players[sim.SyntheticPUUID("na1", i)]
		if !ok {
			t.Fatalf("synthetic player %d missing from truth", i)
		}
		for _, m := range p.Matches {
			listed[m.ID] = m
		}
	}
	r := chaosResult{Listed: len(listed), Reasons: map[string]int{}}

	ledger := readLedger(t, ctx, pool, `match_id || '/' || kind`, "true")
	stored := map[string]int{}    // match_id → participant_count column
	created := map[string]int64{} // match_id → game_creation, epoch ms
	rows, err := pool.Query(ctx, `SELECT match_id, participant_count,
  coalesce((extract(epoch FROM game_creation) * 1000)::bigint, 0) FROM matches`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var n int
		var c int64
		if err := rows.Scan(&id, &n, &c); err != nil {
			t.Fatal(err)
		}
		stored[id], created[id] = n, c
	}
	parts := map[string]int{}
	rows, err = pool.Query(ctx, `SELECT match_id, count(*), count(DISTINCT puuid) FROM match_participants GROUP BY match_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var n, d int
		if err := rows.Scan(&id, &n, &d); err != nil {
			t.Fatal(err)
		}
		parts[id] = n
		r.Participants += n
		if d != n {
			r.Duplicates++
			t.Errorf("%s: %d participant rows but %d distinct players", id, n, d)
		}
	}
	timelines := map[string]bool{}
	rows, err = pool.Query(ctx, `SELECT match_id FROM match_timelines`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		timelines[id] = true
	}

	final := func(l ledgerRow) bool {
		switch l.status {
		case "success":
			return true
		case "permanently_unfetchable", "outside_retention_window":
			return strings.TrimSpace(l.reason) != ""
		}
		return false
	}
	// Payloads the simulator corrupts on purpose are rightly refused; any
	// other match Riot serves must end stored.
	refused := map[string]bool{}
	for id, mf := range s.Faults().Match {
		switch mf.Kind {
		case sim.FaultPoison, sim.FaultGzipBomb, sim.FaultDeepJSON:
			refused[id] = true
		case sim.FaultOversized:
			refused[id] = mf.N <= 0 || mf.N >= 16<<20 // over the client's body limit
		}
	}
	for id, m := range listed {
		l, ok := ledger[id+"/match"]
		switch {
		case !ok:
			r.Losses++
			t.Errorf("LOST %s: listed by the sim, no ledger row", id)
			continue
		case !final(l):
			r.Losses++
			t.Errorf("LOST %s: ledger %q (%s) is not final", id, l.status, l.reason)
			continue
		}
		if l.status != "success" {
			r.FinalFailed++
			r.Reasons[reasonClass(l.reason)]++
			if m.MatchOK && (!refused[id] || transientReason(l.reason)) {
				// Riot serves this match and its payload is sound (or the
				// reason is one retrying fixes: a 5xx, a timeout, the
				// database): a loss, even with a reason.
				r.WronglyGone++
				t.Errorf("WRONGLY GONE %s: ledger %s (%s), but Riot serves it", id, l.status, l.reason)
			}
			if _, ok := stored[id]; ok {
				t.Errorf("%s: ledger %s but a matches row exists", id, l.status)
			}
			continue
		}
		r.Stored++
		if _, ok := stored[id]; !ok {
			r.Losses++
			t.Errorf("LOST %s: ledger success but no matches row", id)
			continue
		}
		switch n := parts[id]; {
		case n > m.Participants:
			r.Duplicates++
			t.Errorf("DUPLICATE %s: %d participant rows, truth has %d", id, n, m.Participants)
		case n < m.Participants:
			r.Losses++
			t.Errorf("LOST %s: %d participant rows, truth has %d", id, n, m.Participants)
		}
		if stored[id] != m.Participants {
			r.Wrong++
			t.Errorf("%s: participant_count %d, truth %d", id, stored[id], m.Participants)
		}
		if created[id] != m.GameCreation {
			r.Wrong++
			t.Errorf("%s: game_creation %d, truth %d", id, created[id], m.GameCreation)
		}
		// The timeline: stored, or final with a reason.
		tl, ok := ledger[id+"/timeline"]
		switch {
		case !ok:
			r.Losses++
			t.Errorf("LOST %s timeline: no ledger row", id)
		case !final(tl):
			r.Losses++
			t.Errorf("LOST %s timeline: ledger %q (%s) not final", id, tl.status, tl.reason)
		case tl.status == "success":
			r.Timelines++
			if !timelines[id] {
				r.Losses++
				t.Errorf("LOST %s timeline: ledger success, no row", id)
			}
			if !m.TimelineOK {
				t.Errorf("%s timeline stored but the sim has none", id)
			}
		default:
			r.Reasons["timeline: "+reasonClass(tl.reason)]++
			if m.TimelineOK && (!refused[id] || transientReason(tl.reason)) {
				r.WronglyGone++
				t.Errorf("WRONGLY GONE %s timeline: ledger %s (%s), but Riot serves it", id, tl.status, tl.reason)
			}
		}
	}
	for id := range stored {
		if _, ok := listed[id]; !ok {
			r.Duplicates++
			t.Errorf("UNEXPECTED %s stored but never listed by the sim", id)
		}
	}
	r.Syncing = countQ(t, ctx, pool, `SELECT count(*) FROM accounts WHERE sync_status IN ('syncing','pending')`)
	if r.Syncing != 0 {
		t.Errorf("%d accounts left syncing", r.Syncing)
	}
	if n := countQ(t, ctx, pool, `SELECT count(*) FROM accounts WHERE puuid LIKE 'synth-%' AND sync_status = 'completed'`); n != players {
		t.Errorf("%d of %d synthetic accounts completed", n, players)
	}

	st := s.Stats()
	for id := range listed {
		if n := st.MatchCalls[id]; n > r.MaxCalls {
			r.MaxCalls, r.MaxCallsID = n, id
		}
	}
	for id := range listed {
		c := st.PerMatch[id]
		r.ExtraCalls += max(c.Match-c.MatchFailed-1, 0) + max(c.Timeline-c.TimelineFailed-1, 0)
	}
	r.Requests, r.MatchFetches, r.Violations, r.Faults = st.Total, st.MethodCount(sim.MethodMatch, 200), st.Violations, st.Faults
	if st.Violations != 0 {
		t.Errorf("%d rate-limit violations (application/method 429s)", st.Violations)
	}
	for _, b := range st.Buckets {
		if b.MaxCount > b.Limit {
			r.BucketsOver++
			t.Errorf("bucket %s %s %ds: max %d > limit %d", b.Route, b.Method, b.WindowSeconds, b.MaxCount, b.Limit)
		}
	}
	if r.Listed == 0 {
		t.Fatal("the sim listed nothing: test premise broken")
	}
	return r, ledger
}

// transientRe matches ledger reasons that retrying later would fix.
var transientRe = regexp.MustCompile(`(?i)\b50[0-9]\b|timeout|deadline exceeded|connection|\bEOF\b|SQLSTATE|circuit breaker|unavailable`)

// transientReason reports whether a final ledger reason is one that
// retrying later would fix: such a match was wrongly marked gone.
func transientReason(reason string) bool { return transientRe.MatchString(reason) }

// reasonClass shortens a ledger reason for the report.
func reasonClass(s string) string {
	if i := strings.IndexAny(s, ":("); i > 0 && i < 40 {
		return strings.TrimSpace(s[:i])
	}
	if len(s) > 60 {
		return s[:60]
	}
	return s
}

func countQ(t testing.TB, ctx context.Context, pool *pgxpool.Pool, sql string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(ctx, sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// check runs checkEnd on the environment and records the figures.
func (e *chaosEnv) check(name string, started time.Time, injected ...string) chaosResult {
	e.t.Helper()
	r, ledger := checkEnd(e.t, e.ctx, e.pool, e.sim, e.o.players)
	r.Case, r.Injected, r.ElapsedSecond = name, injected, time.Since(started).Round(time.Second).Seconds()
	checkCalls(e.t, ledger, e.sim, e.o.players, e.o.lostCalls, &r)
	r.ServiceExits = e.checkProcs()
	recordResult(e.t, r)
	return r
}

// checkProcs fails the test for every service process that exited on its
// own (not by our SIGKILL or SIGTERM) or is not running now; it returns
// the number of such exits.
func (e *chaosEnv) checkProcs() (exits int) {
	e.t.Helper()
	for _, p := range e.procs {
		p.mu.Lock()
		for _, x := range p.exits {
			if x != "signal: killed" && x != "terminated: exit 0" {
				exits++
				e.t.Errorf("%s exited on its own: %s", p.name, x)
			}
		}
		p.mu.Unlock()
	}
	for _, p := range e.procs {
		if !p.running() {
			e.t.Errorf("%s is not running at the end", p.name)
		}
	}
	return exits
}

// checkCalls fails the case for every synthetic match that took more
// getMatch or getTimeline calls than it had failed attempts + 1 + lost,
// and records the count and lost in r. A failed attempt is one the
// simulator saw fail (any answer but 200, a truncated body, a timeout
// while it was still answering) or, whichever is more, one the fetcher
// saw fail: its ledger row's attempt − 1 (a 200 the fetcher gave up on
// while reading it, on a loaded machine, is a failure only it sees). Two
// copies of one attempt both answered stay over the bound: they carry
// one attempt number. ledger is checkEnd's.
func checkCalls(t testing.TB, ledger map[string]ledgerRow, s *sim.Sim, players int, lost int64, r *chaosResult) {
	t.Helper()
	r.LostCalls = lost
	truth, st := s.Truth(), s.Stats()
	for i := 1; i <= players; i++ {
		for _, m := range truth.Players[sim.SyntheticPUUID("na1", i)].Matches {
			c := st.PerMatch[m.ID]
			for _, x := range []struct {
				method, kind string
				calls, fails int64
			}{{sim.MethodMatch, "match", c.Match, c.MatchFailed}, {sim.MethodTimeline, "timeline", c.Timeline, c.TimelineFailed}} {
				attempt := ledger[m.ID+"/"+x.kind].attempt
				fails := max(x.fails, attempt-1)
				if x.calls > fails+1+lost {
					r.OverBound++
					if r.OverBound <= 10 {
						t.Errorf("%s: %d %s calls, %d of them failed (%d by the simulator's count, ledger attempt %d): bound failures + 1 + %d",
							m.ID, x.calls, x.method, fails, x.fails, attempt, lost)
					}
				}
			}
		}
	}
	if r.OverBound > 10 {
		t.Errorf("%d matches over the call bound in all", r.OverBound)
	}
}

// chaosResults collects every case's figures in this test binary, for the
// table printChaosTable prints at the end (TestMain).
var chaosResults struct {
	sync.Mutex
	list []chaosResult
}

// recordResult logs the figures and appends them to CHAOS_REPORT (a JSON
// lines file) when set, for docs/chaos.md.
func recordResult(t testing.TB, r chaosResult) {
	chaosResults.Lock()
	chaosResults.list = append(chaosResults.list, r)
	chaosResults.Unlock()
	b, _ := json.Marshal(r)
	t.Logf("CHAOS RESULT %s", b)
	if path := os.Getenv("CHAOS_REPORT"); path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err == nil {
			f.Write(append(b, '\n'))
			f.Close()
		}
	}
}

func freeTCPPort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// chaosScrape GETs url and returns the body ("" on error).
func chaosScrape(url string) string {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	io.Copy(&buf, resp.Body)
	return buf.String()
}
