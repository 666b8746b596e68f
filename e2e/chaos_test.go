package e2e

// The chaos suite: the whole pipeline on the simulator with a
// synthetic backlog, one fault per case injected mid-run, then a
// Jepsen-style check of the END STATE against the simulator's truth
// (checkEnd): every listed match stored exactly once with Truth's
// participant count, or final in the ledger with a reason; no account left
// syncing; Riot limits never exceeded.
//
// `make chaos` (RIFTFLOW_CHAOS=full) runs every case on 20 players × 100
// matches = 2,000 matches, each fault at its full length. Without it
// (make test, CI) the same cases run on a 60-match backlog with shorter
// faults (docs/chaos.md, "Scenarios"); only the Postgres fast restart and
// the in-process clock jump are skipped with a note.

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/services/riftflow/stack/stacktest"
	"github.com/riftflow/riftflow/streams"
)

func chaosFull() bool { return os.Getenv("RIFTFLOW_CHAOS") == "full" }

// chaosSize is the backlog: 2,000 matches in the full suite, 60 in the
// short one (make test: twelve scenarios within a few minutes).
func chaosSize() (players, perPlayer int) {
	if chaosFull() {
		return 20, 100
	}
	return 2, 30
}

// settleTimeout bounds liveness (the checks come after it).
func settleTimeout() time.Duration {
	if chaosFull() {
		return 15 * time.Minute
	}
	return 5 * time.Minute
}

// longCase skips a case outside the full suite.
func longCase(t *testing.T) {
	if !chaosFull() {
		t.Skip("long chaos case: run with RIFTFLOW_CHAOS=full (make chaos)")
	}
}

// fraction returns ceil(total × f).
func fraction(total int, f float64) int { return int(float64(total)*f + 0.999) }

// TestChaosKillEachService SIGKILLs each of the five service processes in
// turn while the backlog is being worked, and starts it again.
func TestChaosKillEachService(t *testing.T) {
	t.Parallel()
	players, per := chaosSize()
	// lostCalls 1: a fetch in flight in the killed fetcher is called again.
	e := startChaos(t, chaosOptions{players: players, perPlayer: per, lostCalls: 1})
	total := players * per
	start := time.Now()

	// Resolver: killed with requests still queued; the rest are published
	// while it is down.
	half := max(1, players/2)
	e.ingestAll(1, half)
	waitQ(t, e, `SELECT count(*) FROM accounts`, 1, time.Minute)
	e.procs["resolver"].kill()
	e.kills++
	t.Logf("kill -9 resolver (%d accounts known)", e.query(`SELECT count(*) FROM accounts`))
	e.ingestAll(half+1, players)
	time.Sleep(500 * time.Millisecond)
	e.procs["resolver"].start(t)

	// Lister: as soon as matches are being claimed.
	waitQ(t, e, `SELECT count(*) FROM match_fetches`, 1, time.Minute)
	e.killRestart("matchid-lister", 500*time.Millisecond)
	// Fetcher, persister, sweeper: at 20%, 45%, 65% stored.
	e.waitStored(fraction(total, 0.20), settleTimeout())
	e.killRestart("match-fetcher", 500*time.Millisecond)
	e.waitStored(fraction(total, 0.45), settleTimeout())
	e.killRestart("persister", 500*time.Millisecond)
	e.waitStored(fraction(total, 0.65), settleTimeout())
	e.killRestart("retry-sweeper", 500*time.Millisecond)

	e.waitSettled(settleTimeout())
	e.check("kill -9 each service", start, fmt.Sprintf("%d SIGKILLs (resolver, matchid-lister, match-fetcher, persister, retry-sweeper) + restarts", e.kills))
}

// TestChaosRiotFaults: the simulator answers 20% 5xx, 5% service 429s and
// 2% slow responses past the client timeout, on every endpoint, for the
// whole run (the first 15 s in the short suite).
func TestChaosRiotFaults(t *testing.T) {
	t.Parallel()
	players, per := chaosSize()
	f := sim.Faults{Seed: 7, Error5xx: 0.20, Service429: 0.05, Slow: 0.02, SlowDelay: 2 * time.Second}
	// A 5xx, a service 429 or a timeout each cost a call, counted failed
	// by the simulator (a timeout: the client gave up before the answer
	// was sent, on a slow answer or one late on a loaded host); the bound
	// is failures + 1 in both lengths.
	o := chaosOptions{players: players, perPlayer: per, faults: f,
		env: map[string]string{"RIOT_HTTP_TIMEOUT_MS": "500"}}
	e := startChaos(t, o)
	start := time.Now()
	e.ingestAll(1, players)
	name, what := "Riot 20% 5xx, 5% service 429, 2% slow > timeout", "sim faults for the whole run"
	if !chaosFull() {
		// Short suite: the faults last 15 s of the load, then Riot heals;
		// their long tail of retries (minutes) is for make chaos.
		time.Sleep(15 * time.Second)
		if err := e.sim.SetFaults(sim.Faults{}); err != nil {
			t.Fatal(err)
		}
		t.Logf("Riot faults off after 15 s (stored %d)", e.stored())
		name, what = "Riot 20% 5xx, 5% service 429, 2% slow, 15 s", "sim faults for the first 15 s"
	}
	e.waitSettled(settleTimeout())
	r := e.check(name, start, what)
	if inj := r.Faults["500"] + r.Faults["502"] + r.Faults["503"] + r.Faults["504"] + r.Faults["5xx"]; inj == 0 && len(r.Faults) == 0 {
		t.Errorf("no fault was injected: %+v", r.Faults)
	}
	// The timelines Riot does not have (the clones' 404s) end final for
	// that reason, not for a fault that came between their 404s.
	gone := e.query(`SELECT count(*) FROM match_fetches WHERE kind = 'timeline' AND status = 'permanently_unfetchable'`)
	if wrong := e.query(`SELECT count(*) FROM match_fetches WHERE kind = 'timeline' AND status = 'permanently_unfetchable'
  AND (last_error NOT LIKE 'gave up after%' OR last_error NOT LIKE '%404%')`); wrong != 0 {
		t.Errorf("%d of %d timelines Riot does not have ended for another reason than their 404s", wrong, gone)
	}
	t.Logf("timelines Riot does not have: %d permanently_unfetchable after their 404s", gone)
	t.Logf("faults injected by the sim: %v", r.Faults)
}

// TestChaosNATSRestart stops the (single) NATS server twice mid-run and
// starts it again on the same port and store: every process reconnects.
func TestChaosNATSRestart(t *testing.T) {
	t.Parallel()
	e, start := restartTwice(t, chaosOptions{}, (*chaosEnv).restartNATS)
	e.check("NATS disconnect and reconnect", start, fmt.Sprintf("%d NATS server restarts (3 s down each)", e.natsRestarts))
}

// restartTwice starts a chaos environment of o with the default backlog,
// ingests it and calls restart (3 s down) once a quarter of it is stored
// and again at 60 %, then waits until the backlog settles. It returns the
// environment and when the ingest began.
func restartTwice(t *testing.T, o chaosOptions, restart func(*chaosEnv, time.Duration)) (*chaosEnv, time.Time) {
	o.players, o.perPlayer = chaosSize()
	e := startChaos(t, o)
	total := o.players * o.perPlayer
	start := time.Now()
	e.ingestAll(1, o.players)
	for _, at := range []float64{0.25, 0.60} {
		e.waitStored(fraction(total, at), settleTimeout())
		restart(e, 3*time.Second)
	}
	e.waitSettled(settleTimeout())
	return e, start
}

// TestChaosClusterNodeLoss runs on a 3-node JetStream cluster of separate
// nats-node OS processes with R3 streams and KV buckets: kill -9 of the
// node leading FETCH, then of a second node (the leader of FETCHED, or
// another), so the cluster has lost its quorum; both stay down for a while
// (10 s short, 60 s full), then both are started again.
func TestChaosClusterNodeLoss(t *testing.T) {
	t.Parallel()
	players, per := chaosSize()
	down := shortFull(10*time.Second, time.Minute)
	// Without quorum the fetcher cannot publish a result it fetched; it
	// holds the payload and publishes it again for up to 30 s
	// (fetcher.publishHeld) rather than fetch it again; a fetch in flight
	// on a killed node's connection may still be called again (lostCalls
	// 1; before publishHeld: 3 calls for a match in the short run).
	e := startChaos(t, chaosOptions{players: players, perPlayer: per, nodes: 3, lostCalls: 1})
	total := players * per
	start := time.Now()
	e.ingestAll(1, players)
	e.waitStored(fraction(total, 0.25), settleTimeout())
	first := e.streamLeader(streams.StreamFetch)
	e.cluster.Kill(first)
	e.nodeLosses++
	t.Logf("kill -9 node n%d (leader of %s), stored %d", first, streams.StreamFetch, e.stored())
	time.Sleep(down / 2)
	second := (first + 1) % 3
	if n, ok := e.tryStreamLeader(streams.StreamFetched); ok && n != first {
		second = n
	}
	e.cluster.Kill(second)
	e.nodeLosses++
	t.Logf("kill -9 node n%d: 2 of 3 nodes down (no quorum), stored %d", second, e.stored())
	time.Sleep(down)
	for _, n := range []int{first, second} {
		if err := e.cluster.Start(n); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(e.ctx, 2*time.Minute)
	for n := range 3 {
		if err := e.cluster.WaitJetStream(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	t.Logf("nodes n%d and n%d back, stored %d", first, second, e.stored())
	e.waitSettled(settleTimeout())
	e.check("NATS 3 nodes: kill -9 1 then 2 nodes", start, fmt.Sprintf("%d NATS node processes SIGKILLed (%s down), restarted", e.nodeLosses, down))
}

// streamLeader returns the index of the node leading stream.
func (e *chaosEnv) streamLeader(stream string) int {
	e.t.Helper()
	for try := 0; try < 50; try++ {
		if n, ok := e.tryStreamLeader(stream); ok {
			return n
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.t.Fatalf("no leader for %s", stream)
	return 0
}

// tryStreamLeader reads the leader of stream once: nodes are named n<i>.
func (e *chaosEnv) tryStreamLeader(stream string) (int, bool) {
	ctx, cancel := context.WithTimeout(e.ctx, 2*time.Second)
	defer cancel()
	st, err := e.js.Stream(ctx, stream)
	if err != nil {
		return 0, false
	}
	info, err := st.Info(ctx)
	if err != nil || info.Cluster == nil {
		return 0, false
	}
	var n int
	if _, err := fmt.Sscanf(info.Cluster.Leader, "n%d", &n); err != nil || n < 0 || n > 2 {
		return 0, false
	}
	return n, true
}

// TestChaosPostgresRestart stops Postgres (pg_ctl stop -m fast) twice while
// the persister is writing, and starts it again on the same port.
func TestChaosPostgresRestart(t *testing.T) {
	t.Parallel()
	longCase(t)
	e, start := restartTwice(t, chaosOptions{ownPostgres: true}, (*chaosEnv).restartPostgres)
	e.check("Postgres restart during persist", start, fmt.Sprintf("%d Postgres restarts (3 s down each)", e.pgRestarts))
}

// TestChaosPostgresCrashOutage crashes Postgres (pg_ctl stop -m immediate)
// while the separate service processes work the backlog, and keeps it down
// for 10 minutes in the full suite (20 s in the short one): far longer than
// any consumer's delivery budget. The persister and the lister pause on a
// failed ping, the fetchers keep fetching into FETCHED, the sweeper waits
// for the persister; nothing is lost, duplicated or marked gone, and no
// match is fetched twice.
func TestChaosPostgresCrashOutage(t *testing.T) {
	t.Parallel()
	players, per := chaosSize()
	down := shortFull(20*time.Second, 10*time.Minute)
	e := startChaos(t, chaosOptions{players: players, perPlayer: per, ownPostgres: true})
	total := players * per
	start := time.Now()
	e.ingestAll(1, players)
	e.waitStored(fraction(total, 0.25), settleTimeout())
	e.bouncePostgres("immediate", down)
	e.waitSettled(settleTimeout())
	e.check(fmt.Sprintf("Postgres crash, %s down", down), start, fmt.Sprintf("%d Postgres crash (pg_ctl stop -m immediate, %s down)", e.pgRestarts, down))
}

// TestChaosDatabaseReadOnly makes the database read-only for 1 minute in
// the full suite (15 s in the short one) while the backlog is worked:
// ALTER DATABASE … SET default_transaction_read_only = on, then every
// session of it terminated, so each new one is read-only (SQLSTATE 25006
// on every write); then the setting is reset and the sessions terminated
// again. A read-only error is transient: nothing is marked gone or lost.
func TestChaosDatabaseReadOnly(t *testing.T) {
	t.Parallel()
	players, per := chaosSize()
	ro := shortFull(15*time.Second, time.Minute)
	e := startChaos(t, chaosOptions{players: players, perPlayer: per})
	total := players * per
	start := time.Now()
	e.ingestAll(1, players)
	e.waitStored(fraction(total, 0.25), settleTimeout())
	e.setReadOnly(true)
	t.Logf("database read-only for %s (stored %d)", ro, e.stored())
	time.Sleep(ro)
	e.setReadOnly(false)
	t.Logf("database writable again (stored %d)", e.stored())
	e.waitSettled(settleTimeout())
	e.check(fmt.Sprintf("database read-only %s", ro), start, fmt.Sprintf("read-only for %s (default_transaction_read_only + sessions terminated)", ro))
}

// setReadOnly sets or resets default_transaction_read_only on the test's
// own database and terminates its other sessions, so the services'
// connections come back with the new setting.
func (e *chaosEnv) setReadOnly(on bool) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	var db string
	if err := e.pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		e.t.Fatal(err)
	}
	stmt := fmt.Sprintf(`ALTER DATABASE %q SET default_transaction_read_only = on`, db)
	if !on {
		stmt = fmt.Sprintf(`ALTER DATABASE %q RESET default_transaction_read_only`, db)
	}
	// READ WRITE: once the setting is on, the test's own new sessions
	// start read-only too.
	tx, err := e.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadWrite})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, stmt); err != nil {
		tx.Rollback(ctx)
		e.t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()`); err != nil {
		e.t.Fatal(err)
	}
	// The test's own pool reads only; drop its sessions too so none keeps
	// the old setting.
	e.pool.Reset()
}

// jumpClock is a clock that can jump forward.
type jumpClock struct{ off atomic.Int64 }

func (c *jumpClock) Now() time.Time       { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *jumpClock) Jump(d time.Duration) { c.off.Add(int64(d)) }

// TestChaosClockJump runs the in-process pipeline on a clock shared by the
// simulator and every service, and jumps it 2 hours forward mid-run
// (rate-limit windows, retry schedules computed from Now, retention and
// lookback all see the jump); then once more by 2 hours.
func TestChaosClockJump(t *testing.T) {
	longCase(t)
	players, per := chaosSize()
	clk := &jumpClock{}
	h := stacktest.Start(t, stacktest.Options{Now: clk.Now,
		Sim: sim.Options{Now: clk.Now, Limits: sim.RateLimits{App: "1000:10,60000:600"},
			Synthetic: sim.Synthetic{Players: players, MatchesPerPlayer: per, Platform: "na1"}},
		Env: map[string]string{"SWEEP_INTERVAL": "2s", "SWEEP_STALE_AFTER": "5s", "SYNC_LOCK_TTL": "60s", "LOG_LEVEL": "info"}})
	e := &chaosEnv{t: t, ctx: h.Ctx, pool: h.DB, js: h.St.Infra.JS, nc: h.St.Infra.NC,
		subj: h.St.Infra.Subjects, o: chaosOptions{players: players, perPlayer: per}}
	total := players * per
	start := time.Now()
	e.ingestAll(1, players)
	e.waitStored(fraction(total, 0.30), settleTimeout())
	clk.Jump(2 * time.Hour)
	t.Logf("clock jumped +2h at %d stored", e.stored())
	e.waitStored(fraction(total, 0.70), settleTimeout())
	clk.Jump(2 * time.Hour)
	t.Logf("clock jumped +2h again at %d stored", e.stored())
	e.waitSettled(settleTimeout())
	r, ledger := checkEnd(t, h.Ctx, e.pool, h.St.Sim, players)
	checkCalls(t, ledger, h.St.Sim, players, 0, &r)
	r.Case, r.Injected, r.ElapsedSecond = "clock jump", []string{"2 forward jumps of 2 h (sim and services)"}, time.Since(start).Round(time.Second).Seconds()
	recordResult(t, r)
}

// waitQ polls a count query until it reaches n.
func waitQ(t *testing.T, e *chaosEnv, sql string, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for e.query(sql) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s < %d after %s", strings.TrimSpace(sql), n, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
