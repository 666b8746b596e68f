package e2e

// The soak's resource samples (RSS, goroutines, open files of every
// process), their least-squares slopes and leak verdicts, its table and
// its CSV files.

import (
	"bufio"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// soakSample is one process's resources at one moment.
type soakSample struct {
	t          float64 // seconds since the soak began
	proc       string  // resolver, resolver-2, …, nats n0, postgres, harness (sim)
	pid        int
	rss        int64 // bytes (VmRSS)
	fds        int   // entries of /proc/<pid>/fd
	goroutines int   // go_goroutines on the ops /metrics; -1 when unknown
}

type soakSampler struct {
	mu    sync.Mutex
	rows  []soakSample
	stopc chan struct{}
	wg    sync.WaitGroup
}

// startSampler samples every process of s every sampleEvery until stop.
func startSampler(s *soak) *soakSampler {
	ss := &soakSampler{stopc: make(chan struct{})}
	ss.wg.Go(func() {
		tick := time.NewTicker(s.p.sampleEvery)
		defer tick.Stop()
		for {
			rows := s.sampleOnce()
			ss.mu.Lock()
			ss.rows = append(ss.rows, rows...)
			ss.mu.Unlock()
			select {
			case <-ss.stopc:
				return
			case <-tick.C:
			}
		}
	})
	return ss
}

// stop ends the sampling and returns every sample.
func (ss *soakSampler) stop() []soakSample {
	close(ss.stopc)
	ss.wg.Wait()
	return ss.rows
}

// sampleOnce reads every running process once.
func (s *soak) sampleOnce() []soakSample {
	e := s.e
	now := time.Since(s.start).Seconds()
	var out []soakSample
	add := func(name string, pid int, goroutines int) {
		if pid <= 0 {
			return
		}
		ps, ok := readProc(pid)
		if !ok {
			return
		}
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			return
		}
		out = append(out, soakSample{t: now, proc: name, pid: pid, rss: ps.rss, fds: len(fds), goroutines: goroutines})
	}
	for _, name := range e.order {
		p := e.procs[name]
		pid := 0
		p.mu.Lock()
		if p.cmd != nil && p.cmd.Process != nil && p.cmd.ProcessState == nil {
			pid = p.cmd.Process.Pid
		}
		p.mu.Unlock()
		if pid > 0 && p.running() {
			add(name, pid, int(metricValue(p.ops, "go_goroutines")))
		}
	}
	for n := range 3 {
		add(fmt.Sprintf("nats n%d", n), e.cluster.Pid(n), -1)
	}
	add("postgres (postmaster)", postmasterPid(e.pgDir), -1)
	add(soakHarnessProc, os.Getpid(), runtime.NumGoroutine())
	return out
}

// metricValue reads the unlabelled metric name from the /metrics of the
// ops server at addr (1 s timeout), truncated to a whole number; it is -1
// on any error (the process is partitioned, starting, or gone).
func metricValue(addr, name string) int64 {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return -1
			}
			return int64(f)
		}
	}
	return -1
}

// postmasterPid reads the postmaster's pid from the cluster's
// postmaster.pid (0 when Postgres is down).
func postmasterPid(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// ---- slopes and verdicts -----------------------------------------------------

// leastSquares returns the slope of y over x (units of y per unit of x);
// 0 for fewer than two distinct x.
func leastSquares(x, y []float64) float64 {
	n := float64(len(x))
	if len(x) < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx, sy, sxx, sxy = sx+x[i], sy+y[i], sxx+x[i]*x[i], sxy+x[i]*y[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// soakHarnessProc names the test process in the samples: the simulator,
// the TCP proxies and the samplers, reported beside riftflow's processes
// but never failed for growth (soak_test.go).
const soakHarnessProc = "harness (sim)"

// soakMetric is one resource of one process over the judged samples.
type soakMetric struct {
	first, last float64 // medians of the first and last quarter of the samples
	perHour     float64 // least-squares slope, units per hour
	threshold   float64 // growth over the span that counts as a leak
	leak        bool
	known       bool
}

// judgeMetric fits y(t) (t in seconds) and calls it a clear leak when the
// fitted growth over the span exceeds the threshold max(abs, rel × median)
// and the rise from the first quarter's median to the last quarter's
// exceeds half of it:
// growth that a GC cycle, a reconnect storm or one outage cannot fake over
// a long run, and that a steady leak cannot hide.
func judgeMetric(t, y []float64, abs, rel float64) soakMetric {
	if len(y) < 8 {
		return soakMetric{}
	}
	q := len(y) / 4
	m := soakMetric{known: true, first: median(y[:q]), last: median(y[len(y)-q:]),
		threshold: math.Max(abs, rel*median(y))}
	slope := leastSquares(t, y)
	m.perHour = slope * 3600
	span := t[len(t)-1] - t[0]
	m.leak = slope*span > m.threshold && m.last-m.first > m.threshold/2
	return m
}

// median of v (the upper one of an even count).
func median(v []float64) float64 {
	sorted := append([]float64(nil), v...)
	sort.Float64s(sorted)
	return sorted[len(sorted)/2]
}

// soakSlope is the verdict on one process: its longest-lived incarnation
// (a killed process comes back with a new pid), without its warm-up.
type soakSlope struct {
	proc          string
	pid, samples  int
	span          float64 // seconds judged
	judged        bool    // long enough to judge (≥ 40 % of the chaos phase)
	rss, gor, fds soakMetric
	incarnations  int
	rssMax        float64 // bytes, over the whole incarnation
}

// Leak thresholds: growth over the judged span beyond max(abs, rel ×
// median) (and half of it between the first and last quarter).
const (
	leakRSSAbs, leakRSSRel = 32 << 20, 0.5
	leakGorAbs, leakGorRel = 50, 0.5
	leakFDAbs, leakFDRel   = 30, 0.5
)

// judgeSamples groups the samples of the chaos phase (t ≤ until seconds:
// steady load; the settle phase after it idles) by process and
// incarnation and judges the longest incarnation of each process.
func judgeSamples(rows []soakSample, p soakPlan, until float64) []soakSlope {
	type key struct {
		proc string
		pid  int
	}
	byInc := map[key][]soakSample{}
	incs := map[string]int{}
	for _, r := range rows {
		if r.t > until {
			continue
		}
		k := key{r.proc, r.pid}
		if _, ok := byInc[k]; !ok {
			incs[r.proc]++
		}
		byInc[k] = append(byInc[k], r)
	}
	best := map[string][]soakSample{}
	for k, v := range byInc {
		if b := best[k.proc]; len(v) > len(b) || len(v) == len(b) && len(v) > 0 && v[0].pid < b[0].pid {
			best[k.proc] = v
		}
	}
	warm := p.warmup().Seconds()
	var out []soakSlope
	for proc, v := range best {
		sl := soakSlope{proc: proc, pid: v[0].pid, incarnations: incs[proc]}
		var t, rss, gor, fds, gt []float64
		for _, r := range v {
			sl.rssMax = math.Max(sl.rssMax, float64(r.rss))
			if r.t < v[0].t+warm {
				continue
			}
			t, rss, fds = append(t, r.t), append(rss, float64(r.rss)), append(fds, float64(r.fds))
			if r.goroutines >= 0 {
				gt, gor = append(gt, r.t), append(gor, float64(r.goroutines))
			}
		}
		sl.samples = len(t)
		if len(t) > 1 {
			sl.span = t[len(t)-1] - t[0]
		}
		sl.judged = sl.span >= 0.4*p.dur.Seconds() && len(t) >= 8
		if sl.judged {
			sl.rss = judgeMetric(t, rss, leakRSSAbs, leakRSSRel)
			sl.fds = judgeMetric(t, fds, leakFDAbs, leakFDRel)
			sl.gor = judgeMetric(gt, gor, leakGorAbs, leakGorRel)
		}
		out = append(out, sl)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].proc < out[j].proc })
	return out
}

// leaks describes each clear leak of sl.
func (sl soakSlope) leaks() []string {
	var out []string
	if sl.rss.leak {
		out = append(out, fmt.Sprintf("RSS %.1f → %.1f MB, %+.1f MB/h (threshold %.1f MB over the run)",
			sl.rss.first/(1<<20), sl.rss.last/(1<<20), sl.rss.perHour/(1<<20), sl.rss.threshold/(1<<20)))
	}
	if sl.gor.leak {
		out = append(out, fmt.Sprintf("goroutines %.0f → %.0f, %+.0f/h (threshold %.0f)", sl.gor.first, sl.gor.last, sl.gor.perHour, sl.gor.threshold))
	}
	if sl.fds.leak {
		out = append(out, fmt.Sprintf("open files %.0f → %.0f, %+.0f/h (threshold %.0f)", sl.fds.first, sl.fds.last, sl.fds.perHour, sl.fds.threshold))
	}
	return out
}

func (sl soakSlope) verdict() string {
	switch {
	case !sl.judged:
		return "too short to judge"
	case len(sl.leaks()) > 0:
		return "LEAK"
	}
	return "flat"
}

// ---- the report --------------------------------------------------------------

type soakResult struct {
	plan            soakPlan
	chaos, settle   time.Duration
	settled         bool
	faults          []soakFault
	ingests         *soakIngests
	players         int
	end             chaosResult
	jobsOpen, exits int
	jobsTotal       int
	overlaps        int // pairs of sync jobs of one account that overlapped
	slopes          []soakSlope
}

// faultCounts is "kind n, kind n" in soakKinds order.
func (r soakResult) faultCounts() string {
	n := map[string]int{}
	for _, f := range r.faults {
		n[f.kind]++
	}
	var parts []string
	for _, k := range soakKinds {
		if n[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, n[k]))
		}
	}
	return strings.Join(parts, ", ")
}

func (r soakResult) table() string {
	var b strings.Builder
	e, in := r.end, r.ingests
	settled := fmt.Sprintf("settled in %s", r.settle.Round(time.Second))
	if !r.settled {
		settled = fmt.Sprintf("NOT settled within %s", r.plan.settle)
	}
	service429 := e.Faults["service429"]
	fmt.Fprintf(&b, "\n== soak: %s of chaos (faults + ingests), then %s ==\n", r.chaos.Round(time.Second), settled)
	row := func(k string, format string, a ...any) {
		fmt.Fprintf(&b, "%-22s "+format+"\n", append([]any{k}, a...)...)
	}
	row("faults injected", "%d: %s", len(r.faults), r.faultCounts())
	row("ingests", "%d: %d interactive + %d backfill (new players), %d repeats; %d publishes retried",
		in.total(), in.interactive.Load(), in.backfill.Load(), in.repeats.Load(), in.retries.Load())
	row("matches", "%d listed by the sim, %d stored, %d final with a reason, %d timelines", e.Listed, e.Stored, e.FinalFailed, e.Timelines)
	row("lost", "%d", e.Losses)
	row("duplicated", "%d", e.Duplicates)
	row("wrongly gone", "%d", e.WronglyGone)
	row("content mismatches", "%d", e.Wrong)
	row("accounts syncing", "%d", e.Syncing)
	row("jobs left open", "%d (of %d jobs)", r.jobsOpen, r.jobsTotal)
	row("overlapping syncs", "%d (pairs of sync jobs of one account running at once)", r.overlaps)
	row("429s", "%d client-caused (app/method limits); %d service 429s injected by the sim", e.Violations, service429)
	row("Riot calls", "%d; getMatch 200s %d for %d stored; at most %d getMatch calls for one match (%s)",
		e.Requests, e.MatchFetches, e.Stored, e.MaxCalls, e.MaxCallsID)
	row("unexpected exits", "%d", r.exits)
	fmt.Fprintf(&b, "\n%-22s %4s %5s %7s %19s %9s %15s %8s %11s %7s  %s\n", "process", "inc", "n", "span s",
		"RSS MB first→last", "MB/h", "gor first→last", "gor/h", "fds f→l", "fds/h", "verdict")
	for _, sl := range r.slopes {
		if !sl.judged {
			fmt.Fprintf(&b, "%-22s %4d %5d %7.0f %19s %9s %15s %8s %11s %7s  %s (max RSS %.1f MB)\n", sl.proc, sl.incarnations,
				sl.samples, sl.span, "-", "-", "-", "-", "-", "-", sl.verdict(), sl.rssMax/(1<<20))
			continue
		}
		gor, gorH := "-", "-"
		if sl.gor.known {
			gor, gorH = fmt.Sprintf("%.0f→%.0f", sl.gor.first, sl.gor.last), fmt.Sprintf("%+.0f", sl.gor.perHour)
		}
		fmt.Fprintf(&b, "%-22s %4d %5d %7.0f %19s %+9.1f %15s %8s %11s %+7.0f  %s\n", sl.proc, sl.incarnations, sl.samples, sl.span,
			fmt.Sprintf("%.1f→%.1f", sl.rss.first/(1<<20), sl.rss.last/(1<<20)), sl.rss.perHour/(1<<20), gor, gorH,
			fmt.Sprintf("%.0f→%.0f", sl.fds.first, sl.fds.last), sl.fds.perHour, sl.verdict())
	}
	fmt.Fprintf(&b, "(inc: incarnations; the longest is judged over the chaos phase without its first %s; slopes are least squares per hour)\n",
		r.plan.warmup())
	return b.String()
}

// writeCSV writes samples.csv, faults.csv, slopes.csv and summary.csv to dir.
func (r soakResult) writeCSV(dir string, rows []soakSample) error {
	var s strings.Builder
	s.WriteString("t_s,phase,process,pid,rss_bytes,open_files,goroutines\n")
	for _, x := range rows {
		phase := "chaos"
		if x.t > r.chaos.Seconds() {
			phase = "settle"
		}
		fmt.Fprintf(&s, "%.1f,%s,%s,%d,%d,%d,%d\n", x.t, phase, x.proc, x.pid, x.rss, x.fds, x.goroutines)
	}
	var f strings.Builder
	f.WriteString("t_s,kind,target,length_s,stored_at_start,note\n")
	for _, x := range r.faults {
		fmt.Fprintf(&f, "%s,%s,%q,%s,%d,%q\n", soakSeconds(x.at), x.kind, x.target, soakSeconds(x.length), x.stored, x.note)
	}
	var sl strings.Builder
	sl.WriteString("process,incarnations,pid,samples,span_s,judged,rss_first_bytes,rss_last_bytes,rss_bytes_per_h," +
		"goroutines_first,goroutines_last,goroutines_per_h,fds_first,fds_last,fds_per_h,verdict\n")
	for _, x := range r.slopes {
		fmt.Fprintf(&sl, "%s,%d,%d,%d,%.0f,%t,%.0f,%.0f,%.0f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%s\n", x.proc, x.incarnations, x.pid,
			x.samples, x.span, x.judged, x.rss.first, x.rss.last, x.rss.perHour, x.gor.first, x.gor.last, x.gor.perHour,
			x.fds.first, x.fds.last, x.fds.perHour, x.verdict())
	}
	e := r.end
	var m strings.Builder
	m.WriteString("metric,value\n")
	for _, kv := range [][2]any{{"chaos_s", r.chaos.Seconds()}, {"settle_s", r.settle.Seconds()}, {"settled", r.settled},
		{"faults", len(r.faults)}, {"ingests", r.ingests.total()}, {"ingests_interactive", r.ingests.interactive.Load()},
		{"ingests_backfill", r.ingests.backfill.Load()}, {"ingests_repeat", r.ingests.repeats.Load()},
		{"publish_retries", r.ingests.retries.Load()}, {"players", r.players}, {"matches_listed", e.Listed},
		{"matches_stored", e.Stored}, {"final_with_reason", e.FinalFailed}, {"timelines", e.Timelines},
		{"lost", e.Losses}, {"duplicated", e.Duplicates}, {"wrongly_gone", e.WronglyGone}, {"content_mismatches", e.Wrong},
		{"accounts_syncing", e.Syncing}, {"jobs_open", r.jobsOpen}, {"jobs", r.jobsTotal}, {"overlapping_syncs", r.overlaps}, {"client_429s", e.Violations},
		{"service_429s_injected", e.Faults["service429"]}, {"riot_requests", e.Requests}, {"getmatch_200", e.MatchFetches},
		{"max_getmatch_calls_per_match", e.MaxCalls}, {"unexpected_exits", r.exits}} {
		fmt.Fprintf(&m, "%s,%v\n", kv[0], kv[1])
	}
	for name, body := range map[string]string{"samples.csv": s.String(), "faults.csv": f.String(),
		"slopes.csv": sl.String(), "summary.csv": m.String()} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// TestSoakLeakVerdict checks the leak judge on made-up series: flat with
// noise, a GC sawtooth and one outage spike are flat; a steady climb of a
// goroutine a minute over an hour, of 1 MB a minute, and a doubling of
// open files are leaks.
func TestSoakLeakVerdict(t *testing.T) {
	series := func(n int, f func(i int) float64) (ts, ys []float64) {
		for i := range n {
			ts, ys = append(ts, float64(i*10)), append(ys, f(i))
		}
		return ts, ys
	}
	for _, c := range []struct {
		name     string
		n        int
		f        func(i int) float64
		abs, rel float64
		leak     bool
	}{
		{"flat goroutines with noise", 360, func(i int) float64 { return 80 + float64(i*7%11) - 5 }, leakGorAbs, leakGorRel, false},
		{"RSS GC sawtooth", 360, func(i int) float64 { return float64(40<<20 + (i%30)*(1<<20)) }, leakRSSAbs, leakRSSRel, false},
		{"one outage spike of goroutines", 360, func(i int) float64 {
			if i >= 100 && i < 110 {
				return 400
			}
			return 80
		}, leakGorAbs, leakGorRel, false},
		{"a late reconnect storm that ends", 360, func(i int) float64 {
			if i >= 300 && i < 320 {
				return 250
			}
			return 90
		}, leakGorAbs, leakGorRel, false},
		{"a goroutine a minute", 360, func(i int) float64 { return 80 + float64(i)/6 }, leakGorAbs, leakGorRel, true},
		{"1 MB a minute", 360, func(i int) float64 { return float64(40<<20) + float64(i)/6*(1<<20) }, leakRSSAbs, leakRSSRel, true},
		{"open files doubling", 36, func(i int) float64 { return 40 + float64(i)*40/36 }, leakFDAbs, leakFDRel, true},
		{"too few samples", 5, func(i int) float64 { return float64(i * 1000) }, leakFDAbs, leakFDRel, false},
	} {
		ts, ys := series(c.n, c.f)
		if m := judgeMetric(ts, ys, c.abs, c.rel); m.leak != c.leak {
			t.Errorf("%s: leak %t, want %t (%+v)", c.name, m.leak, c.leak, m)
		}
	}
	if s := leastSquares([]float64{0, 1, 2, 3}, []float64{1, 3, 5, 7}); s != 2 {
		t.Errorf("leastSquares slope %v, want 2", s)
	}
}
