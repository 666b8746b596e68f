package e2e

// The soak (make soak SOAK=60m; make test runs SOAK=3m): the whole
// pipeline as separate processes (two of each of the five services, a
// 3-node NATS cluster of nats-node processes, a private Postgres cluster)
// on the simulator with Riot faults, a steady stream of ingests
// (interactive and background backfills of new players, and repeats of
// players already synced), and a nemesis that injects one fault every few
// minutes (every SOAK/15, at least 20 s): kill -9 of a service replica, of
// a NATS node, of Postgres; a NATS outage; a Postgres outage longer than
// the (shortened) sync lock TTL; a partition (TCP proxy black hole); a full
// disk under a NATS node's store. At the end the state is judged against
// the simulator's truth (checkEnd: nothing lost, nothing duplicated, no
// account syncing, no client-caused 429) plus no job left pending or
// running; over the run the RSS, goroutines and open files of every
// process are sampled and their least-squares slopes reported, failing on
// a clear leak. docs/chaos.md, "The soak", describes it and its figures.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/internal/tcpproxy"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/services/riftflow/stack"
)

// soakPlan is the shape of one soak run, scaled from its length.
type soakPlan struct {
	dur         time.Duration // the chaos phase: ingests and nemesis
	every       time.Duration // one fault per period
	ingestEvery time.Duration // one ingest request per period
	sampleEvery time.Duration // RSS, goroutines, open files
	players     int           // new players over the run (half the ingests)
	per         int           // matches per player
	lockTTL     time.Duration // SYNC_LOCK_TTL
	// fault lengths
	nodeDown, natsOutage, pgOutage, partition, diskFull time.Duration
	settle                                              time.Duration // liveness bound after the chaos phase
}

// soakKinds are the nemesis's faults, in the order it cycles through them:
// the long outages first, so a 3-minute run has room for every kind.
var soakKinds = []string{"postgres-outage", "nats-outage", "kill-nats-node", "partition", "full-disk",
	"kill-postgres", "kill-service"}

// clampDur is d in whole seconds, within [lo, hi].
func clampDur(d, lo, hi time.Duration) time.Duration { return min(max(d.Round(time.Second), lo), hi) }

// planSoak scales a run of length d: 60m gives a fault every 4 min, a
// 10-minute NATS outage, a 2-minute Postgres outage over a 1-minute lock
// TTL; 3m gives a fault every 20 s, a 30 s NATS outage, a 30 s Postgres
// outage over a 15 s lock TTL.
func planSoak(d time.Duration) soakPlan {
	p := soakPlan{dur: d, every: max(20*time.Second, (d / 15).Round(time.Second)), ingestEvery: 5 * time.Second,
		sampleEvery: 5 * time.Second, per: 12, lockTTL: 15 * time.Second}
	if d >= 20*time.Minute {
		p.sampleEvery, p.lockTTL = 10*time.Second, time.Minute
	}
	p.players = int((d + 2*p.ingestEvery - 1) / (2 * p.ingestEvery))
	p.pgOutage = 2 * p.lockTTL
	p.natsOutage = clampDur(d/6, 15*time.Second, 10*time.Minute)
	p.nodeDown = clampDur(d/18, 10*time.Second, time.Minute)
	p.partition = clampDur(d/12, 15*time.Second, 2*time.Minute)
	p.diskFull = p.partition
	p.settle = max(4*time.Minute, d/4)
	return p
}

// length is how long a fault of kind keeps the system broken.
func (p soakPlan) length(kind string) time.Duration {
	switch kind {
	case "kill-nats-node":
		return p.nodeDown
	case "partition":
		return p.partition
	case "kill-postgres":
		return 3 * time.Second
	case "full-disk":
		return p.diskFull
	case "postgres-outage":
		return p.pgOutage
	case "nats-outage":
		return p.natsOutage
	}
	return time.Second
}

// warmup is the start of each process's life left out of its slopes
// (caches, pools and GC targets filling up).
func (p soakPlan) warmup() time.Duration { return max(30*time.Second, p.dur/10) }

// soakDuration is SOAK (a Go duration), 3m by default.
func soakDuration(t *testing.T) time.Duration {
	v := os.Getenv("SOAK")
	if v == "" {
		return 3 * time.Minute
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Minute {
		t.Fatalf("SOAK=%q: want a duration of at least 1m (3m, 60m)", v)
	}
	return d
}

// soakFault is one injected fault.
type soakFault struct {
	at, length   time.Duration // since the start; how long it lasted
	kind, target string
	stored       int // matches stored when it began
	note         string
}

// soakIngests counts the ingest requests published.
type soakIngests struct {
	interactive, backfill, repeats, retries atomic.Int64
	players                                 atomic.Int64 // new players published: 1..players
}

func (n *soakIngests) total() int64 {
	return n.interactive.Load() + n.backfill.Load() + n.repeats.Load()
}

// soak is one running soak.
type soak struct {
	t       *testing.T
	e       *chaosEnv
	p       soakPlan
	start   time.Time
	rng     *rand.Rand
	diskMnt string
	faults  []soakFault
	ingests soakIngests
	parts   int // partitions so far (they alternate NATS / Riot links)
}

func TestSoak(t *testing.T) {
	t.Parallel()
	d := soakDuration(t)
	p := planSoak(d)
	seed := uint64(envIntDefault("SOAK_SEED", 1))
	s := &soak{t: t, p: p, rng: rand.New(rand.NewPCG(seed, 27))}
	root := os.Geteuid() == 0
	if !root {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI: the soak mounts a tmpfs and runs pg_ctl: needs root")
		}
		t.Log("not root: the full-disk fault is left out")
	}
	t.Logf("soak %s: a fault every %s, an ingest every %s, %d players × %d matches, lock TTL %s, settle bound %s",
		d, p.every, p.ingestEvery, p.players, p.per, p.lockTTL, p.settle)

	o := chaosOptions{players: p.players, perPlayer: p.per, nodes: 3, replicas: 2, ownPostgres: true,
		// partition points: two replicas reach NATS (node n0) through a
		// proxy; every fetcher reaches Riot through one.
		natsProxy: []string{"persister-2", "match-fetcher-2"}, riotProxy: true,
		// Riot misbehaves the whole run: 5xx, service 429s (not the
		// client's doing), answers slower than the client's 3 s timeout.
		faults: sim.Faults{Seed: seed, Error5xx: 0.03, Service429: 0.01, Slow: 0.005, SlowDelay: 4 * time.Second},
		env:    map[string]string{"SYNC_LOCK_TTL": p.lockTTL.String(), "LOG_LEVEL": "warn"}}
	if root {
		o.beforeNATS = func(e *chaosEnv) { s.diskMnt = mountTmpfs(e, filepath.Join(e.dir, "nats", "n2"), "64m") }
	}
	e := startChaos(t, o)
	s.e = e
	out := soakOutDir(t)
	// The faults are for a running system: every process answers /readyz
	// before the first one. (A service whose first Postgres ping fails
	// exits: the persister and the sweeper did, when an outage began while
	// they were still starting on a loaded machine.)
	for _, name := range e.order {
		waitHTTP(t, "http://"+e.procs[name].ops+"/readyz", 3*time.Minute)
	}

	s.start = time.Now()
	samples := startSampler(s)
	ictx, stopIngests := context.WithCancel(e.ctx)
	var drv sync.WaitGroup
	drv.Go(func() { s.drive(ictx) })

	s.nemesis(root)

	stopIngests()
	drv.Wait()
	chaosEnd := time.Since(s.start)
	players := int(s.ingests.players.Load())
	t.Logf("chaos phase over after %s: %d ingests (%d new players), %d faults; settling (bound %s)",
		chaosEnd.Round(time.Second), s.ingests.total(), players, len(s.faults), p.settle)
	settled, settleNote := s.waitSettled(players)
	settleTook := time.Since(s.start) - chaosEnd
	rows := samples.stop()

	// The end state against the simulator's truth.
	r, _ := checkEnd(t, e.ctx, e.pool, e.sim, players)
	jobs := e.query(`SELECT count(*) FROM jobs WHERE status IN ('pending','running')`)
	jobsTotal := e.query(`SELECT count(*) FROM jobs`)
	// The sync lock's promise: one sync of an account at a time. Two
	// finished sync jobs of one account that ran at the same time (by more
	// than a second) mean a second sync got in (a lapsed lock).
	overlaps := e.query(`SELECT count(*) FROM jobs a JOIN jobs b ON a.puuid = b.puuid AND a.id < b.id
WHERE a.type = 'sync' AND b.type = 'sync' AND a.status IN ('completed','failed') AND b.status IN ('completed','failed')
  AND a.started_at < b.finished_at - interval '1 second' AND b.started_at < a.finished_at - interval '1 second'`)
	if overlaps != 0 {
		t.Errorf("%d pairs of sync jobs of one account ran at the same time", overlaps)
	}
	if jobs != 0 {
		t.Errorf("%d jobs left pending or running", jobs)
		s.logOpenJobs()
	}
	if !settled {
		t.Errorf("not settled within %s after the chaos phase: %s", p.settle, settleNote)
	}
	exits := e.checkProcs()

	slopes := judgeSamples(rows, p, chaosEnd.Seconds())
	res := soakResult{plan: p, chaos: chaosEnd, settle: settleTook, settled: settled, faults: s.faults,
		ingests: &s.ingests, players: players, end: r, jobsOpen: jobs, jobsTotal: jobsTotal, overlaps: overlaps, exits: exits, slopes: slopes}
	table := res.table()
	fmt.Print(table)
	t.Log("\n" + table)
	if err := res.writeCSV(out, rows); err != nil {
		t.Errorf("writing CSV: %v", err)
	} else {
		t.Logf("CSV in %s", out)
	}
	for _, sl := range slopes {
		for _, m := range sl.leaks() {
			if sl.proc == soakHarnessProc {
				// The test process itself (the simulator, the partition
				// proxies holding black-holed connections, the samplers):
				// reported, not a riftflow process, so not failed.
				t.Logf("harness growth (reported, not judged): %s", m)
				continue
			}
			t.Errorf("LEAK %s: %s", sl.proc, m)
		}
	}
	if len(s.faults) < min(len(soakKinds)-1, int(d/p.every)-1) {
		t.Errorf("only %d faults injected in %s", len(s.faults), d)
	}
	if d >= 3*time.Minute {
		// From 3 minutes on the plan has room for every kind.
		for _, k := range soakKinds {
			if k == "full-disk" && !root {
				continue
			}
			if !slices.ContainsFunc(s.faults, func(f soakFault) bool { return f.kind == k }) {
				t.Errorf("no %s fault was injected in %s", k, d)
			}
		}
	}
	if t.Failed() {
		e.keepLogs()
	}
}

// soakOutDir is SOAK_OUT, or .data/soak at the root of the repository.
func soakOutDir(t *testing.T) string {
	dir := os.Getenv("SOAK_OUT")
	if dir == "" {
		wd, _ := os.Getwd()
		for d := wd; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
				dir = filepath.Join(d, ".data", "soak")
				break
			}
			if filepath.Dir(d) == d {
				dir = t.TempDir()
				break
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// mountTmpfs mounts a tmpfs of size at dir (made if missing) and unmounts
// it at cleanup: registered before the NATS cluster's own cleanup, so it
// runs after the nodes are stopped.
func mountTmpfs(e *chaosEnv, dir, size string) string {
	t := e.t
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs on %s: %v %s", dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// ---- the ingest stream -------------------------------------------------------

// drive publishes one ingest request every ingestEvery until ctx ends:
// in turn a new player (alternately an interactive sync and a background
// backfill, mode full) and a repeat of a player already asked for
// (interactive, mode latest: nothing new to store). A publish that fails
// (NATS down, partitioned) is retried every second: the client saw the
// failure, so the request is not yet asked.
func (s *soak) drive(ctx context.Context) {
	tick := time.NewTicker(s.p.ingestEvery)
	defer tick.Stop()
	for k := 0; ; k++ {
		n := int(s.ingests.players.Load())
		var req bus.IngestRequest
		var count *atomic.Int64
		switch {
		case k%2 == 0 && n < s.p.players:
			i := n + 1
			rid := sim.SyntheticRiotID(i)
			req = bus.IngestRequest{RequestID: fmt.Sprintf("soak-new-%04d", i), RiotID: rid.GameName + "#" + rid.TagLine,
				Platform: "na1", Mode: bus.ModeFull, LookbackDays: 60, Count: s.p.per, Trigger: "test",
				Priority: bus.Interactive}
			count = &s.ingests.interactive
			if i%2 == 0 {
				req.Priority, count = bus.Background, &s.ingests.backfill
			}
		case n > 0:
			i := 1 + s.rng.IntN(n)
			rid := sim.SyntheticRiotID(i)
			req = bus.IngestRequest{RequestID: fmt.Sprintf("soak-again-%04d-%d", i, k), RiotID: rid.GameName + "#" + rid.TagLine,
				Platform: "na1", Mode: bus.ModeLatest, Count: s.p.per, Trigger: "test", Priority: bus.Interactive}
			count = &s.ingests.repeats
		}
		if count != nil {
			// Once begun, a publish is seen through even when the phase
			// ends: a request that may have reached the stream counts.
			for {
				pctx, cancel := context.WithTimeout(s.e.ctx, 5*time.Second)
				err := stack.PublishIngest(pctx, s.e.nc, s.e.subj, req)
				cancel()
				if err == nil {
					break
				}
				s.ingests.retries.Add(1)
				if s.e.ctx.Err() != nil {
					return
				}
				time.Sleep(time.Second)
			}
			count.Add(1)
			if count != &s.ingests.repeats {
				s.ingests.players.Add(1)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// ---- the nemesis -------------------------------------------------------------

// nemesis injects one fault per period (the first half a period in), in
// the order of soakKinds, until the chaos phase ends; a fault that would
// outlast it is replaced by a kill -9 of a service. Each fault is healed
// before the next begins. It runs on the test goroutine.
func (s *soak) nemesis(root bool) {
	next := s.start.Add(s.p.every / 2)
	end := s.start.Add(s.p.dur)
	for i := 0; ; i++ {
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		kind := soakKinds[i%len(soakKinds)]
		if kind == "full-disk" && !root {
			kind = "kill-service"
		}
		if time.Now().Add(s.p.length(kind)).After(end) {
			kind = "kill-service"
		}
		if time.Now().Add(s.p.length(kind)).After(end) {
			break
		}
		f := soakFault{at: time.Since(s.start), kind: kind, stored: s.e.stored()}
		f.target, f.note = s.inject(kind)
		f.length = time.Since(s.start) - f.at
		s.faults = append(s.faults, f)
		s.t.Logf("nemesis %s %s at %s (stored %d, %s) %s", kind, f.target, f.at.Round(time.Second), f.stored,
			f.length.Round(time.Second), f.note)
		next = next.Add(s.p.every)
		if gap := time.Now().Add(s.p.every / 4); next.Before(gap) {
			next = gap
		}
		if !next.Before(end) {
			break
		}
	}
	if d := time.Until(end); d > 0 {
		time.Sleep(d)
	}
}

// inject carries out one fault and heals it; it returns the target and a
// note.
func (s *soak) inject(kind string) (target, note string) {
	e, p := s.e, s.p
	switch kind {
	case "kill-service":
		name := e.order[s.rng.IntN(len(e.order))]
		e.killRestart(name, time.Second)
		return name, "kill -9, started again after 1 s"
	case "kill-nats-node":
		n := s.rng.IntN(3)
		e.cluster.Kill(n)
		time.Sleep(p.nodeDown)
		if err := e.cluster.Start(n); err != nil {
			s.t.Fatal(err)
		}
		s.waitNodes(n)
		return fmt.Sprintf("n%d", n), fmt.Sprintf("kill -9, down %s", p.nodeDown)
	case "kill-postgres":
		e.bouncePostgres("immediate", 3*time.Second)
		return "postgres", "pg_ctl stop -m immediate, down 3 s"
	case "postgres-outage":
		e.bouncePostgres("fast", p.pgOutage)
		return "postgres", fmt.Sprintf("pg_ctl stop -m fast, down %s (lock TTL %s)", p.pgOutage, p.lockTTL)
	case "nats-outage":
		var wg sync.WaitGroup
		for n := range 3 {
			wg.Go(func() { e.cluster.Stop(n) })
		}
		wg.Wait()
		time.Sleep(p.natsOutage)
		for n := range 3 {
			if err := e.cluster.Start(n); err != nil {
				s.t.Fatal(err)
			}
		}
		s.waitNodes(0, 1, 2)
		return "n0 n1 n2", fmt.Sprintf("every node stopped, down %s", p.natsOutage)
	case "partition":
		link, proxy := "persister-2 + match-fetcher-2 ↔ NATS", e.natsProxy
		if s.parts%2 == 1 {
			link, proxy = "fetchers ↔ Riot", e.riotProxy
		}
		s.parts++
		return link, s.blackhole(proxy, p.partition)
	case "full-disk":
		return "n2 store (64 MiB tmpfs)", s.fillNodeDisk(2)
	}
	s.t.Fatalf("unknown fault %q", kind)
	return "", ""
}

func (s *soak) blackhole(p *tcpproxy.Proxy, d time.Duration) string {
	p.Blackhole(true)
	time.Sleep(d)
	p.Blackhole(false)
	return fmt.Sprintf("black hole for %s", d)
}

// waitNodes waits (2 min at most) until JetStream answers on the nodes.
func (s *soak) waitNodes(nodes ...int) {
	ctx, cancel := context.WithTimeout(s.e.ctx, 2*time.Minute)
	defer cancel()
	for _, n := range nodes {
		if err := s.e.cluster.WaitJetStream(ctx, n); err != nil {
			s.t.Fatal(err)
		}
	}
}

// fillNodeDisk fills the tmpfs under node n's store, holds it full for the
// plan's length and frees it. nats-server disables JetStream on a node
// whose store hit ENOSPC ("JetStream out of resources, will be DISABLED")
// and does not enable it again by itself: when its log says so, the node is
// restarted, as an operator would after freeing the disk.
func (s *soak) fillNodeDisk(n int) string {
	logPath := filepath.Join(s.e.dir, "nats", fmt.Sprintf("n%d.log", n))
	before := fileSize(logPath)
	filler := filepath.Join(s.diskMnt, "filler")
	written, err := fillDisk(filler)
	if !errors.Is(err, syscall.ENOSPC) {
		s.t.Fatalf("filling the tmpfs: %v", err)
	}
	time.Sleep(s.p.diskFull)
	if err := os.Remove(filler); err != nil {
		s.t.Fatal(err)
	}
	note := fmt.Sprintf("%d MiB filler for %s", written>>20, s.p.diskFull)
	if b, _ := os.ReadFile(logPath); int64(len(b)) > before && strings.Contains(string(b[before:]), "will be DISABLED") {
		s.e.cluster.Stop(n)
		if err := s.e.cluster.Start(n); err != nil {
			s.t.Fatal(err)
		}
		note += "; JetStream disabled itself on the node: restarted"
	}
	s.waitNodes(n)
	return note
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// ---- the end ----------------------------------------------------------------

// waitSettled waits until every player asked for has left pending/syncing,
// no ledger row is open, no job is pending or running and every consumer
// is drained, or the plan's settle bound passes; it reports what is still
// open then.
func (s *soak) waitSettled(players int) (bool, string) {
	e := s.e
	deadline := time.Now().Add(s.p.settle)
	for {
		done := e.query(`SELECT count(*) FROM accounts WHERE puuid LIKE 'synth-%' AND sync_status IN ('completed','failed')`)
		open := e.query(`SELECT count(*) FROM match_fetches WHERE status IN ('unfetched','temporary_failure')`)
		jobs := e.query(`SELECT count(*) FROM jobs WHERE status IN ('pending','running')`)
		busy, err := e.consumersBusy()
		if err != nil {
			busy = err.Error()
		}
		if done == players && open == 0 && jobs == 0 && busy == "" {
			return true, ""
		}
		if time.Now().After(deadline) {
			e.logOpenRows()
			return false, fmt.Sprintf("%d/%d accounts done, %d ledger rows open, %d jobs open, consumers: %s",
				done, players, open, jobs, busy)
		}
		time.Sleep(time.Second)
	}
}

// logOpenJobs logs the jobs left pending or running (at most 20).
func (s *soak) logOpenJobs() {
	ctx, cancel := context.WithTimeout(s.e.ctx, 5*time.Second)
	defer cancel()
	rows, err := s.e.pool.Query(ctx, `SELECT id, type, coalesce(puuid, ''), status, retries, coalesce(error, ''),
  requested_at::text FROM jobs WHERE status IN ('pending','running') ORDER BY requested_at LIMIT 20`)
	if err != nil {
		s.t.Logf("open jobs: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var id, typ, puuid, status, msg, at string
		var retries int
		if rows.Scan(&id, &typ, &puuid, &status, &retries, &msg, &at) == nil {
			s.t.Logf("OPEN JOB %s %s %s %s retries %d requested %s: %s", id, typ, puuid, status, retries, at, msg)
		}
	}
}

// soakSeconds formats d in whole seconds for the CSV.
func soakSeconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) }
