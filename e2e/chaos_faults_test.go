package e2e

// More chaos scenarios on separate processes: two replicas of every
// service with kill -9 of each process and a rolling restart, a full disk
// under Postgres, network partitions (service ↔ NATS, fetchers ↔ Riot),
// clock skew between processes, and hostile payloads. Each runs short in
// make test and long in make chaos (RIFTFLOW_CHAOS=full); the end state is
// judged against the simulator's truth by checkEnd.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/internal/tcpproxy"
)

// short or full picks a duration by suite.
func shortFull(short, full time.Duration) time.Duration {
	if chaosFull() {
		return full
	}
	return short
}

// TestChaosReplicas runs two processes of every service. It SIGKILLs one
// process of each service in turn (both, in the full suite) while the
// backlog is worked, then rolls every process: SIGTERM, drain
// (SHUTDOWN_TIMEOUT), a new process, one at a time.
func TestChaosReplicas(t *testing.T) {
	t.Parallel()
	players, per := chaosSize()
	// lostCalls 1: a fetch in flight in a killed process is called again.
	e := startChaos(t, chaosOptions{players: players, perPlayer: per, replicas: 2, lostCalls: 1})
	total := players * per
	start := time.Now()
	e.ingestAll(1, players)
	victims := []string{}
	for _, svc := range chaosServices {
		victims = append(victims, svc)
		if chaosFull() {
			victims = append(victims, svc+"-2")
		}
	}
	for i, name := range victims {
		e.waitStored(fraction(total, 0.05+0.25*float64(i)/float64(len(victims))), settleTimeout())
		e.killRestart(name, 300*time.Millisecond)
	}
	e.waitStored(fraction(total, 0.35), settleTimeout())
	e.rollingRestart()
	e.waitSettled(settleTimeout())
	e.check("2 replicas: kill -9 each + rolling restart", start,
		fmt.Sprintf("%d SIGKILLs, %d SIGTERM restarts (%d not drained in time)", e.kills, e.terms, e.undrained))
	if e.undrained > 0 {
		t.Errorf("%d processes did not drain within SHUTDOWN_TIMEOUT + 5 s", e.undrained)
	}
}

// rollingRestart stops every process with SIGTERM in pipeline order, waits
// for it to drain, and starts a new one in its place.
func (e *chaosEnv) rollingRestart() {
	e.t.Helper()
	for _, name := range e.order {
		p := e.procs[name]
		if !p.stop(15 * time.Second) {
			e.undrained++
		}
		e.terms++
		p.start(e.t)
		e.t.Logf("rolled %s (stored %d)", name, e.stored())
		time.Sleep(time.Second)
	}
}

// TestChaosDiskFull puts the ledger and participant tables of a private
// Postgres cluster on a 64 MiB tmpfs tablespace, then fills the
// filesystem while the backlog is worked (every write that needs a new
// page fails with SQLSTATE 53100), for 10 s (1 min full), and frees it.
func TestChaosDiskFull(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI: the full-disk case mounts a tmpfs and needs root")
		}
		t.Skip("the full-disk case mounts a tmpfs: needs root")
	}
	players, per := chaosSize()
	full := shortFull(10*time.Second, time.Minute)
	var mnt string
	// While the tablespace is full nothing reaches the ledger (no outcome,
	// no hold) and the fetched results wait in FETCHED: the retry-sweeper
	// must not take those fetches for lost (it leaves a row alone while a
	// result of its fetch waits there), so the bound is failures + 1.
	// SWEEP_STALE_AFTER 2 s makes every listed row stale during the
	// outage, as a slow run does, so each sweep puts this to the test.
	e := startChaos(t, chaosOptions{players: players, perPlayer: per, ownPostgres: true, env: map[string]string{"SWEEP_STALE_AFTER": "2s"},
		beforeServices: func(e *chaosEnv) { mnt = e.tmpfsTablespace("64m", "match_fetches", "match_participants") }})
	total := players * per
	start := time.Now()
	e.ingestAll(1, players)
	e.waitStored(fraction(total, 0.25), settleTimeout())
	filler := filepath.Join(mnt, "filler")
	n, err := fillDisk(filler)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the tmpfs: %v", err)
	}
	t.Logf("disk full (%d MiB filler) for %s, stored %d", n>>20, full, e.stored())
	time.Sleep(full)
	failed := e.query(`SELECT count(*) FROM match_fetches`) // readable while full
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	t.Logf("disk freed, stored %d (ledger rows %d)", e.stored(), failed)
	e.waitSettled(settleTimeout())
	e.check(fmt.Sprintf("disk full %s (tmpfs tablespace)", full), start, fmt.Sprintf("64 MiB tmpfs tablespace filled for %s", full))
}

// tmpfsTablespace mounts a tmpfs of size under a fresh directory, makes it
// a tablespace of the private cluster and moves tables onto it. The mount
// is removed at cleanup (after Postgres is stopped). It returns the mount
// point.
func (e *chaosEnv) tmpfsTablespace(size string, tables ...string) string {
	t := e.t
	dir, err := os.MkdirTemp("", "rfchaosts")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() {
		// Postgres holds files on the mount: stop it first.
		e.pgctl("stop", "-w", "-m", "immediate", "-D", e.pgDir)
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v %s", dir, err, out)
		}
		os.RemoveAll(dir)
	})
	if u, err := user.Lookup("postgres"); err == nil {
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	if _, err := e.pool.Exec(ctx, fmt.Sprintf(`CREATE TABLESPACE chaos_tmpfs LOCATION '%s'`, dir)); err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		if _, err := e.pool.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s SET TABLESPACE chaos_tmpfs`, tb)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// fillDisk writes zeros to path until the filesystem is full; it returns
// the bytes written and the write error (ENOSPC when full).
func fillDisk(path string) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		w, err := f.Write(buf)
		n += int64(w)
		if err != nil {
			return n, err
		}
	}
}

// TestChaosPartitionNATS cuts the persister off NATS (a TCP proxy that
// black-holes its link: nothing flows, nothing is closed) for 10 s (2 min
// full) while the backlog is worked, then heals it.
func TestChaosPartitionNATS(t *testing.T) {
	t.Parallel()
	// With the persister cut off, fetched results wait in FETCHED and the
	// ledger lags: the retry-sweeper must not take those fetches for lost
	// (it leaves a row alone while a result of its fetch waits there), so
	// the bound is failures + 1. SWEEP_STALE_AFTER 2 s makes every listed
	// row stale during the cut, as a slow run does, so each sweep puts
	// this to the test.
	partitionCase(t, "persister ↔ NATS", chaosOptions{natsProxy: []string{"persister"}, env: map[string]string{"SWEEP_STALE_AFTER": "2s"}},
		func(e *chaosEnv) *tcpproxy.Proxy { return e.natsProxy })
}

// TestChaosPartitionRiot cuts the fetchers off Riot (the simulator) for
// 10 s (2 min full) while the backlog is worked, then heals the link.
func TestChaosPartitionRiot(t *testing.T) {
	t.Parallel()
	// A fetch cut off times out (3 s) and is retried on the FETCH_BACKOFF
	// schedule (5 attempts), then by the sweeper. The Riot client resets
	// the connection of a request it gives up on, so the request never
	// reaches Riot when the link heals (the proxy drops what a reset
	// sender abandoned, as TCP does). Before the reset, each such attempt
	// reached the simulator at the heal, uncounted by the limiter (2
	// method 429s in the full run of 2026-11-27) and answered 200 to no
	// one (21–23 calls over failures + 1).
	// A call the simulator answered just as the black hole began has its
	// answer cut off: the fetcher times out and calls again, a failed
	// attempt in the ledger (checkCalls), so lostCalls stays 0.
	partitionCase(t, "fetchers ↔ Riot", chaosOptions{riotProxy: true},
		func(e *chaosEnv) *tcpproxy.Proxy { return e.riotProxy })
}

// partitionCase black-holes link(e) at 25 % stored for 10 s (2 min full),
// heals it, and checks the end state.
func partitionCase(t *testing.T, name string, o chaosOptions, link func(*chaosEnv) *tcpproxy.Proxy) {
	o.players, o.perPlayer = chaosSize()
	d := shortFull(10*time.Second, 2*time.Minute)
	e := startChaos(t, o)
	start := time.Now()
	e.ingestAll(1, o.players)
	e.waitStored(fraction(o.players*o.perPlayer, 0.25), settleTimeout())
	p := link(e)
	p.Blackhole(true)
	t.Logf("%s black-holed for %s (stored %d)", name, d, e.stored())
	time.Sleep(d)
	p.Blackhole(false)
	t.Logf("healed (stored %d)", e.stored())
	e.waitSettled(settleTimeout())
	e.check(fmt.Sprintf("partition %s %s", name, d), start, fmt.Sprintf("black hole for %s", d))
}

// TestChaosClockSkew runs two processes of every service whose clocks are
// off by +500 ms and −500 ms (RIFTFLOW_TEST_CLOCK_SKEW, the clock Build
// hands every service and the Riot rate limiter) for the whole run.
func TestChaosClockSkew(t *testing.T) {
	t.Parallel()
	players, per := chaosSize()
	skew := map[string]time.Duration{}
	for _, svc := range chaosServices {
		skew[svc], skew[svc+"-2"] = 500*time.Millisecond, -500*time.Millisecond
	}
	e := startChaos(t, chaosOptions{players: players, perPlayer: per, replicas: 2, skew: skew})
	start := time.Now()
	e.ingestAll(1, players)
	e.waitSettled(settleTimeout())
	e.check("clock skew ±500 ms, 2 replicas", start, "every service: one process +500 ms, one −500 ms")
}

// TestChaosHostilePayloads serves hostile getMatch bodies to the separate
// processes under load: a gzip bomb (512 MiB inflated), JSON nested 100,000
// deep, NUL escapes in strings, and a 10 MiB body (over the NATS message
// limit, under the client's 16 MiB cap). The bomb and the deep JSON must
// end refused with a reason; the NUL and 10 MiB matches stored, once.
func TestChaosHostilePayloads(t *testing.T) {
	t.Parallel()
	players, per := chaosSize()
	kinds := []sim.MatchFault{{Kind: sim.FaultGzipBomb, N: 512 << 20}, {Kind: sim.FaultDeepJSON},
		{Kind: sim.FaultNUL}, {Kind: sim.FaultOversized, N: 10 << 20}}
	f := sim.Faults{Match: map[string]sim.MatchFault{}}
	ids := map[string]string{}
	for j, mf := range kinds {
		id := fmt.Sprintf("NA1_%d", sim.SyntheticGameIDBase+j*3)
		f.Match[id], ids[id] = mf, mf.Kind
	}
	e := startChaos(t, chaosOptions{players: players, perPlayer: per, faults: f})
	start := time.Now()
	e.ingestAll(1, players)
	e.waitSettled(settleTimeout())
	r := e.check("hostile payloads (bomb, deep, NUL, 10 MiB)", start, "4 hostile match bodies")
	for id, kind := range ids {
		var status, reason string
		ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
		err := e.pool.QueryRow(ctx, `SELECT status, coalesce(last_error, '') FROM match_fetches WHERE match_id = $1 AND kind = 'match'`, id).Scan(&status, &reason)
		cancel()
		if err != nil {
			t.Errorf("%s (%s): %v", id, kind, err)
			continue
		}
		t.Logf("%-10s %s → %s %s", kind, id, status, reason)
		want := "success"
		if kind == sim.FaultGzipBomb || kind == sim.FaultDeepJSON {
			want = "permanently_unfetchable"
		}
		if status != want {
			t.Errorf("%s (%s): %s (%s), want %s", id, kind, status, reason, want)
		}
	}
	if r.Faults[sim.FaultGzipBomb] == 0 || r.Faults[sim.FaultNUL] == 0 {
		t.Errorf("hostile bodies not served: %v", r.Faults)
	}
}
