package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/benchlimit"
	"github.com/riftflow/riftflow/internal/sim"
)

// BenchmarkLimitMatchFetchers (`make bench-limit-fetchers`) runs the real
// match-fetcher binary, BENCH_LIMIT_N (2,8) processes of it, in the whole
// pipeline as separate OS processes (the chaos environment: resolver,
// matchid-lister, persister, retry-sweeper, NATS, Postgres) against the
// simulator on a production-shaped key (application 50:1,2500:60, method
// limits 2000:10, Riot's escalating blacklist: more than 5 rate-limit
// violations in a minute). BENCH_LIMIT_PLAYERS synthetic players
// (default 400) of 20 matches each are ingested at once: a backlog of
// about 16,000 requests that keeps the key busy for BENCH_LIMIT_WINDOWS
// (5) whole 60 s windows, measured on the simulator's own windows as
// bench-limit does. BENCH_LIMIT_CPU_QUOTA_US (e.g. 20000) puts the
// match-fetcher processes together in a cgroup v1 cpu group of that
// much CPU per 100 ms (root), and BENCH_LIMIT_HOGS busy loops run beside.
// It prints one table row per N (load average and throttled periods
// included) and writes fetchers-N<n>.csv/.svg to BENCH_LIMIT_OUT.
func BenchmarkLimitMatchFetchers(b *testing.B) {
	windows := envInt(b, "BENCH_LIMIT_WINDOWS", 5)
	ns := envInts(b, "BENCH_LIMIT_N", []int{2, 8})
	players := envInt(b, "BENCH_LIMIT_PLAYERS", 400)
	quota := envInt(b, "BENCH_LIMIT_CPU_QUOTA_US", 0)
	out := limitOut(b)
	if err := os.MkdirAll(out, 0o755); err != nil {
		b.Fatal(err)
	}
	if n := envInt(b, "BENCH_LIMIT_HOGS", 0); n > 0 {
		hogs, err := benchlimit.StartHogs(n)
		if err != nil {
			b.Fatal(err)
		}
		defer hogs.Stop()
	}
	for b.Loop() {
		var rs []benchlimit.Result
		for _, n := range ns {
			rs = append(rs, runMatchFetchers(b, n, players, windows, quota, out))
		}
		benchlimit.PrintTable(os.Stdout, rs)
		if err := benchlimit.WriteResults(filepath.Join(out, "fetchers.csv"), rs); err != nil {
			b.Fatal(err)
		}
	}
}

func runMatchFetchers(b *testing.B, n, players, windows, quota int, out string) benchlimit.Result {
	key := benchlimit.ProdKey
	const long = 60
	methods := map[string]string{sim.MethodMatch: "2000:10", sim.MethodTimeline: "2000:10",
		sim.MethodMatchIDs: "2000:10", sim.MethodAccountByRiotID: "2000:10", sim.MethodAccountByPUUID: "2000:10"}
	e := startChaos(b, chaosOptions{players: players, perPlayer: 20, fetchers: n,
		env: map[string]string{
			// Production's sweeper and retry schedule (the chaos ones are
			// compressed for fault tests), and the production AckWait
			// reaction: nothing here is a fault.
			"SWEEP_INTERVAL": "1h", "SWEEP_STALE_AFTER": "1h", "SYNC_STUCK_AFTER": "1h",
			"FETCH_BACKOFF": "30s,60s,120s,300s", "LOG_LEVEL": "warn",
		},
		sim: func(o *sim.Options) {
			o.Limits = sim.RateLimits{App: key.App, Method: methods}
			o.Blacklist = sim.Blacklist{Violations: 5, Period: time.Minute, Duration: time.Minute}
		}})
	res := benchlimit.Result{Case: benchlimit.Case{Name: "fetchers", Key: key, N: n, Windows: windows}, LongSecs: long, LongLimit: 2500}
	var cg *benchlimit.Cgroup
	if quota > 0 {
		var err error
		if cg, err = benchlimit.NewCgroup(fmt.Sprintf("bench-fetchers-N%d-%d", n, os.Getpid()), quota, 100000); err != nil {
			b.Fatal(err)
		}
		defer func() { _ = cg.Remove() }()
		for name, p := range e.procs {
			if strings.HasPrefix(name, "match-fetcher") {
				if err := cg.Add(p.cmd.Process.Pid); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	t0 := time.Now()
	e.ingestAll(0, players-1)
	deadline := t0.Add(time.Duration(windows+3) * long * time.Second)
	loads := 0
	for time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		if l := benchlimit.LoadAvg(); l > 0 {
			res.Load += l
			res.LoadMax = max(res.LoadMax, l)
			loads++
		}
		if len(benchlimit.Since(e.sim.WindowHistory("americas", "", long), t0)) > windows {
			break
		}
	}
	res.Elapsed = time.Since(t0)
	if loads > 0 {
		res.Load /= float64(loads)
	}
	if cg != nil {
		thr, per, ns := cg.Throttled()
		if per > 0 {
			res.Throttled = float64(thr) / float64(per)
		}
		res.ThrottledFor = time.Duration(ns)
	}
	hist := map[int][]sim.WindowInstance{1: e.sim.WindowHistory("americas", "", 1), long: e.sim.WindowHistory("americas", "", long)}
	res.Measure(e.sim.Stats(), hist[long], t0, methods)
	name := filepath.Join(out, fmt.Sprintf("fetchers-N%d", n))
	if err := benchlimit.WriteWindowCSV(name+".csv", t0, hist, map[int]int{1: 50, long: 2500}); err != nil {
		b.Fatal(err)
	}
	title := fmt.Sprintf("match-fetcher ×%d, app %s: requests per 60 s window", n, key.App)
	if err := benchlimit.WriteWindowSVG(name+".svg", title, t0, hist[long], res.LongLimit); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "%s fetchers N=%d: used %.3f over %d windows, 429s %v, blacklists %d, stored %d, load %.1f\n",
		time.Now().UTC().Format("15:04:05"), n, res.Used, res.Windows, res.TooMany, res.Blacklisted, e.stored(), res.Load)
	e.stopAll()
	return res
}
