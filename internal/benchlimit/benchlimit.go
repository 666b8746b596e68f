// Package benchlimit is the multi-process benchmark of the shared rate
// limiter (`make bench-limit`): N separate fetcher OS processes
// (cmd/limitfetcher: the production Riot client on the production Shared
// limiter) share one API key through the JetStream KV bucket of a separate
// nats-server process (the nats-server/v2 module's own binary), against
// the Riot simulator (internal/sim) with application and method limits and
// its escalating blacklist. A case can skew the fetchers' clocks
// (BENCH_LIMIT_SKEW_MS, read only by limitfetcher) and kill -9 the NATS
// node mid-run, restarting it on the same store after an outage.
//
// The ratelimit KV bucket is created as streams/ declares it by
// `limitfetcher -setup`, so that every NATS client of the benchmark is that
// one program. The driver is BenchmarkLimitProcesses in services/riftflow;
// the table and files it writes are in report.go.
package benchlimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/riftflow/riftflow/internal/freeport"
	"github.com/riftflow/riftflow/internal/sim"
)

// Key is an API key's application limit in Riot's header format, e.g.
// "20:1,100:120".
type Key struct {
	Name string
	App  string
}

// Keys the benchmark runs: a development key, and a production-shaped one
// whose short limit spends the long window only just before it ends
// (50 per 1 s × 60 s = 3,000 ≥ 2,500, as 500 per 10 s × 60 = 30,000 with
// 30,000 per 10 min).
var (
	DevKey  = Key{Name: "dev", App: "20:1,100:120"}
	ProdKey = Key{Name: "prod", App: "50:1,2500:60"}
)

// Case is one benchmark run.
type Case struct {
	Name string // e.g. "dev", "prod", "skew", "natskill"
	Key  Key
	// N fetcher processes, Workers concurrent fetches each (default 8).
	N, Workers int
	// Windows is how many whole long windows are measured (the run ends
	// when Windows+1 long windows have started).
	Windows int
	// SkewMS shifts the limiter clock of fetcher i by +SkewMS (i even) or
	// −SkewMS (i odd) milliseconds.
	SkewMS int
	// KillAt, if > 0, kills the nats-server (SIGKILL) this long after the
	// fetchers start, and restarts it on the same store and port after
	// KillFor.
	KillAt, KillFor time.Duration
	// Duration, if > 0, makes a short run instead: the case ends this long
	// after the first request, and Used is measured over the shortest
	// window from that first request (Result.ColdUse); the plot shows its
	// first 10 s (the cold start) beside its last 10 s.
	Duration time.Duration
	// Match makes the fetchers call getMatch and getTimeline, as the
	// match-fetcher does; by default they call two methods with small
	// answers (see cmd/limitfetcher).
	Match bool
}

// Env is where a case runs.
type Env struct {
	// BinDir holds the nats-server and limitfetcher binaries (Build).
	BinDir string
	// OutDir receives <case>-N<n>.csv, .svg and the processes' logs.
	OutDir string
	// Log receives progress lines (nil: discarded).
	Log io.Writer
	// CPUQuotaUS, if > 0, puts each case's fetchers together in their
	// own cgroup v1 cpu group limited to CPUQuotaUS per 100 ms period
	// (20000: 20 % of one core), as a Kubernetes CPU limit does (root).
	CPUQuotaUS int
}

// Result is what one case measured.
type Result struct {
	Case Case
	// Long is the tightest window (the key's longest): length and limit.
	LongSecs, LongLimit int
	// Used is the requests served in the whole long windows ÷ what the
	// limit allows from the first window's start to the last one's
	// (WindowUse); Windows is how many whole windows it covers.
	Used    float64
	Windows int
	Served  int
	Gap     time.Duration
	// TooMany counts the simulator's 429s by X-Rate-Limit-Type.
	TooMany map[string]int64
	// Over is the largest count above its limit in any window instance of
	// any application or method window; OverOutage the same over the
	// instances that overlap the NATS outage.
	Over, OverOutage int
	// Blacklisted counts the simulator's blacklistings; Forbidden its 403s.
	Blacklisted, Forbidden int64
	// Outage is when the NATS node was down (zero without a kill).
	OutageFrom, OutageTo time.Time
	Elapsed              time.Duration
	// Load is the mean 1-minute load average sampled during the case,
	// LoadMax the highest.
	Load, LoadMax float64
	// Throttled is the share of CFS periods in which the fetchers' cgroup
	// was throttled (Env.CPUQuotaUS; 0 without), ThrottledFor the total
	// time it was.
	Throttled    float64
	ThrottledFor time.Duration
}

// Build compiles the nats-server and limitfetcher binaries into dir, from
// the module at moduleDir (the internal/ module, which requires
// nats-server/v2).
func Build(ctx context.Context, moduleDir, dir string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator),
		"github.com/nats-io/nats-server/v2", "github.com/riftflow/riftflow/internal/benchlimit/cmd/limitfetcher")
	cmd.Dir = moduleDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	return nil
}

// proc is one child process.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func start(bin string, args, env []string, logPath string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// stop sends sig and waits up to 10 s, then SIGKILL.
func (p *proc) stop(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// natsNode is a nats-server process with JetStream on a store directory.
type natsNode struct {
	bin, store, logPath string
	port                int
	p                   *proc
}

func (n *natsNode) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

func (n *natsNode) start() error {
	p, err := start(n.bin, []string{"-js", "-sd", n.store, "-a", "127.0.0.1", "-p", strconv.Itoa(n.port), "-n", "bench-limit"}, nil, n.logPath)
	if err != nil {
		return err
	}
	n.p = p
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", n.port), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("nats-server exited; see %s", n.logPath)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return errors.New("nats-server did not listen within 20 s")
}

// setupBucket runs `limitfetcher -setup`, which creates the ratelimit KV
// bucket as streams/ declares it on the nats-server at url.
func setupBucket(ctx context.Context, binDir, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "limitfetcher"), "-setup")
	cmd.Env = append(os.Environ(), "NATS_URL="+url)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("setup: limitfetcher -setup: %v\n%s", err, out)
	}
	return nil
}

// Run runs one case and returns what it measured. The processes it starts
// are stopped when it returns.
func Run(ctx context.Context, env Env, c Case) (res Result, err error) {
	if c.Workers <= 0 {
		c.Workers = 8
	}
	res = Result{Case: c}
	logf := func(format string, a ...any) {
		if env.Log != nil {
			fmt.Fprintf(env.Log, "%s %s N=%d: %s\n", time.Now().UTC().Format("15:04:05"), c.Name, c.N, fmt.Sprintf(format, a...))
		}
	}
	lims, err := sim.ParseLimits(c.Key.App)
	if err != nil {
		return res, err
	}
	long := tightest(lims)
	res.LongLimit, res.LongSecs = long[0], long[1]
	name := fmt.Sprintf("%s-N%d", c.Name, c.N)
	node, stopNode, err := startNode(ctx, env, name)
	if err != nil {
		return res, err
	}
	defer stopNode()

	s, err := newSim(c.Key.App)
	if err != nil {
		return res, err
	}
	base, err := s.Start("127.0.0.1:0")
	if err != nil {
		return res, err
	}
	defer s.Close()
	region, ids := matchesOf(s)
	if !c.Match {
		ids = playersOf(s, region)
	}
	if len(ids) == 0 {
		return res, errors.New("the simulator has no match with a timeline")
	}

	var cg *Cgroup
	if env.CPUQuotaUS > 0 {
		if cg, err = NewCgroup(fmt.Sprintf("bench-limit-%s-%d", name, os.Getpid()), env.CPUQuotaUS, 100000); err != nil {
			return res, err
		}
		defer func() {
			thr, per, ns := cg.Throttled()
			if per > 0 {
				res.Throttled = float64(thr) / float64(per)
			}
			res.ThrottledFor = time.Duration(ns)
			_ = cg.Remove()
		}()
	}
	var fetchers []*proc
	defer func() {
		var wg sync.WaitGroup
		for _, f := range fetchers {
			wg.Go(func() { f.stop(syscall.SIGTERM) })
		}
		wg.Wait()
	}()
	t0 := time.Now()
	fetchers, err = startFetchers(env, c, name, node.url(), base, region, ids, cg)
	if err != nil {
		return res, err
	}
	logf("%d fetchers started (skew ±%d ms)", c.N, c.SkewMS)

	if err := res.watch(ctx, env, c, node, s, region, lims, fetchers, t0, logf); err != nil {
		return res, err
	}
	res.Elapsed = time.Since(t0)
	hist := map[int][]sim.WindowInstance{}
	for _, l := range lims {
		hist[l[1]] = s.WindowHistory(region, "", l[1])
	}
	res.Measure(s.Stats(), hist[res.LongSecs], t0, methodLimits)
	if c.Duration > 0 {
		return res, res.short(env, name, t0, hist, lims)
	}
	if !res.OutageFrom.IsZero() {
		res.overDuringOutage(s, region, lims, hist)
	}
	if err := res.write(env, name, t0, hist, lims); err != nil {
		return res, err
	}
	logf("used %.3f over %d windows, 429s %v, over %d, load %.1f", res.Used, res.Windows, res.TooMany, res.Over, res.Load)
	return res, nil
}

// methodLimits are method limits of the order Riot reports for these
// methods; the application limit is the tighter one.
var methodLimits = map[string]string{sim.MethodMatch: "2000:10", sim.MethodTimeline: "2000:10",
	sim.MethodAccountByPUUID: "2000:10", sim.MethodMatchIDs: "2000:10"}

const apiKey = "RGAPI-bench-limit"

// tightest is the window of lims (count, seconds) with the lowest rate.
func tightest(lims [][2]int) [2]int {
	long := lims[0]
	for _, l := range lims {
		if float64(l[0])/float64(l[1]) < float64(long[0])/float64(long[1]) {
			long = l
		}
	}
	return long
}

// newSim is the simulator of a case: app limits app ("count:secs,..."),
// methodLimits, and Riot's escalating blacklist: more than 5 application
// or method 429s within a minute turn the key to 403s for a minute, then
// twice as long each time.
func newSim(app string) (*sim.Sim, error) {
	return sim.New(sim.Options{APIKey: apiKey, DeriveTimelines: true,
		Limits:    sim.RateLimits{App: app, Method: methodLimits},
		Blacklist: sim.Blacklist{Violations: 5, Period: time.Minute, Duration: time.Minute},
		Logger:    slog.New(slog.DiscardHandler)})
}

// startFetchers starts the case's N limitfetcher processes on the NATS
// node natsURL and the simulator base, clocks skewed ±c.SkewMS
// alternately, in cgroup cg when it is not nil.
func startFetchers(env Env, c Case, name, natsURL, base, region string, ids []string, cg *Cgroup) ([]*proc, error) {
	calls := "light"
	if c.Match {
		calls = "match"
	}
	var fetchers []*proc
	for i := range c.N {
		skew := c.SkewMS
		if i%2 == 1 {
			skew = -skew
		}
		f, err := start(filepath.Join(env.BinDir, "limitfetcher"), nil, []string{
			"NATS_URL=" + natsURL, "RIOT_BASE_URL=" + base, "RIOT_API_KEY=" + apiKey,
			"BENCH_LIMIT_REGION=" + region, "BENCH_LIMIT_IDS=" + strings.Join(ids, ","), "BENCH_LIMIT_CALLS=" + calls,
			"BENCH_LIMIT_WORKERS=" + strconv.Itoa(c.Workers), "BENCH_LIMIT_SKEW_MS=" + strconv.Itoa(skew),
		}, filepath.Join(env.OutDir, fmt.Sprintf("%s.fetcher%d.log", name, i)))
		if err != nil {
			return fetchers, err
		}
		fetchers = append(fetchers, f)
		if cg != nil {
			if err := cg.Add(f.cmd.Process.Pid); err != nil {
				return fetchers, err
			}
		}
	}
	return fetchers, nil
}

// watch runs the case until its windows (or c.Duration) have passed,
// sampling the load average every 200 ms and killing the NATS node at
// c.KillAt for c.KillFor; it fails when a fetcher exits early.
func (res *Result) watch(ctx context.Context, env Env, c Case, node *natsNode, s *sim.Sim, region string,
	lims [][2]int, fetchers []*proc, t0 time.Time, logf func(string, ...any)) error {
	killed := c.KillAt <= 0
	longLen := time.Duration(res.LongSecs) * time.Second
	deadline := t0.Add(time.Duration(c.Windows+3)*longLen + c.KillFor)
	if c.Duration > 0 {
		deadline = t0.Add(c.Duration + 15*time.Second) // the first request comes after the processes start
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var loads int
	defer func() {
		if loads > 0 {
			res.Load /= float64(loads)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if l := LoadAvg(); l > 0 {
			res.Load += l
			res.LoadMax = max(res.LoadMax, l)
			loads++
		}
		if !killed && time.Since(t0) >= c.KillAt {
			killed = true
			_ = node.p.cmd.Process.Kill() // kill -9
			<-node.p.done
			res.OutageFrom = time.Now()
			logf("nats-server killed (SIGKILL); restarting in %s", c.KillFor)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(c.KillFor):
			}
			if err := node.start(); err != nil {
				return fmt.Errorf("restart nats-server: %w", err)
			}
			res.OutageTo = time.Now()
			logf("nats-server restarted on its store")
		}
		if c.Duration > 0 {
			if first := firstStart(s.WindowHistory(region, "", lims[0][1]), t0); (!first.IsZero() && time.Since(first) > c.Duration+time.Second) || time.Now().After(deadline) {
				return nil
			}
		} else if n := len(Since(s.WindowHistory(region, "", res.LongSecs), t0)); n > c.Windows || time.Now().After(deadline) {
			return nil
		}
		for _, f := range fetchers {
			select {
			case <-f.done:
				return fmt.Errorf("a fetcher exited early; see %s", env.OutDir)
			default:
			}
		}
	}
}

// write puts the case's windows in OutDir: name.csv (every window of
// every limit) and name.svg (the tightest window's).
func (res *Result) write(env Env, name string, t0 time.Time, hist map[int][]sim.WindowInstance, lims [][2]int) error {
	path := filepath.Join(env.OutDir, name)
	limits := map[int]int{}
	for _, l := range lims {
		limits[l[1]] = l[0]
	}
	if err := WriteWindowCSV(path+".csv", t0, hist, limits); err != nil {
		return err
	}
	title := fmt.Sprintf("%s, N=%d, app %s: requests per %d s window", res.Case.Name, res.Case.N, res.Case.Key.App, res.LongSecs)
	if err := WriteWindowSVG(path+".svg", title, t0, hist[res.LongSecs], res.LongLimit); err != nil {
		return err
	}
	return nil
}

// startNode starts the case's nats-server process on a free port with a
// temporary store, and the limiter's KV bucket on it; stop stops it and
// removes the store.
func startNode(ctx context.Context, env Env, name string) (node *natsNode, stop func(), err error) {
	store, err := os.MkdirTemp("", "bench-limit-"+name+"-")
	if err != nil {
		return nil, nil, err
	}
	stop = func() { os.RemoveAll(store) }
	port, err := freeport.Get()
	if err != nil {
		stop()
		return nil, nil, err
	}
	node = &natsNode{bin: filepath.Join(env.BinDir, "nats-server"), store: store, port: port, logPath: filepath.Join(env.OutDir, name+".nats.log")}
	if err := node.start(); err != nil {
		stop()
		return nil, nil, err
	}
	stop = func() { node.p.stop(syscall.SIGTERM); os.RemoveAll(store) }
	if err := setupBucket(ctx, env.BinDir, node.url()); err != nil {
		stop()
		return nil, nil, err
	}
	return node, stop, nil
}

// overDuringOutage records the most any window overlapping the NATS
// outage went over its limit.
func (res *Result) overDuringOutage(s *sim.Sim, region string, lims [][2]int, hist map[int][]sim.WindowInstance) {
	check := func(h []sim.WindowInstance, limit, secs int) {
		for _, w := range h {
			end := w.Start.Add(time.Duration(secs) * time.Second)
			if w.Start.Before(res.OutageTo) && end.After(res.OutageFrom) {
				res.OverOutage = max(res.OverOutage, w.Count-limit)
			}
		}
	}
	for _, l := range lims {
		check(hist[l[1]], l[0], l[1])
	}
	for m := range methodLimits {
		check(s.WindowHistory(region, m, 10), 2000, 10)
	}
}

// short measures a short run (Case.Duration): Served is the requests of
// the shortest window's instances that started within the Duration from
// the first request, Used that ÷ what a perfect client sends from the
// first request to the end of the last of them; and a plot of the first
// and last 10 s (<name>.svg).
func (r *Result) short(env Env, name string, t0 time.Time, hist map[int][]sim.WindowInstance, lims [][2]int) error {
	short := lims[0]
	for _, l := range lims {
		if l[1] < short[1] {
			short = l
		}
	}
	h := Since(hist[short[1]], t0)
	if len(h) == 0 {
		return errors.New("no request reached the simulator")
	}
	first := h[0].Start
	d := r.Case.Duration
	r.Served, r.Windows = 0, 0
	var last time.Time
	for _, w := range h {
		if w.Start.Sub(first) < d {
			r.Served += w.Count
			r.Windows++
			last = w.Start
		}
	}
	// Against a perfect client over the same time: from the first request
	// to the end of the last window counted.
	r.Used = float64(r.Served) / float64(PerfectClient(lims, last.Add(time.Duration(short[1])*time.Second).Sub(first)))
	r.LongSecs, r.LongLimit = short[1], short[0]
	limits := map[int]int{}
	for _, l := range lims {
		limits[l[1]] = l[0]
	}
	path := filepath.Join(env.OutDir, name)
	if err := WriteWindowCSV(path+".csv", first, hist, limits); err != nil {
		return err
	}
	const span = 10 * time.Second
	title := fmt.Sprintf("%s, N=%d, app %s: requests per %d s window, first 10 s (cold start) and last 10 s of %s", r.Case.Name, r.Case.N, r.Case.Key.App, short[1], d)
	return WriteStartSVG(path+".svg", title, first, d-span, span, h, short[0], time.Duration(short[1])*time.Second)
}

// PerfectClient is how many requests a client that knew lims (Riot's
// "n:secs" pairs) from the start could send in d from its first request:
// each window full from its start, windows back to back.
func PerfectClient(lims [][2]int, d time.Duration) int {
	best := -1
	for _, l := range lims {
		win := time.Duration(l[1]) * time.Second
		n := l[0] * int((d+win-1)/win)
		if best < 0 || n < best {
			best = n
		}
	}
	return best
}

// firstStart is the start of the first instance since t0 (zero if none).
func firstStart(h []sim.WindowInstance, t0 time.Time) time.Time {
	if k := Since(h, t0); len(k) > 0 {
		return k[0].Start
	}
	return time.Time{}
}

// Measure fills r from the simulator's stats st and the instances long
// of the tightest (long) window since t0: the whole windows' use, their
// requests, 429s by type, blacklistings, 403s of methods and the largest
// count over a limit.
func (r *Result) Measure(st sim.Stats, long []sim.WindowInstance, t0 time.Time, methods map[string]string) {
	var fill float64
	r.Used, fill, r.Gap, r.Windows = WindowUse(long, t0, r.LongLimit, time.Duration(r.LongSecs)*time.Second)
	r.Windows = max(0, r.Windows-1)
	r.Served = int(fill*float64(r.LongLimit*r.Windows) + 0.5)
	r.TooMany = st.RateLimited
	r.Blacklisted = st.BlacklistEvents
	for m := range methods {
		r.Forbidden += st.MethodCount(m, 403)
	}
	for _, b := range st.Buckets {
		r.Over = max(r.Over, b.MaxCount-b.Limit)
	}
}

// matchesOf returns the regional route and the IDs of the simulator's
// matches on it whose match and timeline both answer 200.
func matchesOf(s *sim.Sim) (string, []string) {
	byRegion := map[string][]string{}
	for _, p := range s.Truth().Players {
		for _, m := range p.Matches {
			if m.MatchOK && m.TimelineOK {
				byRegion[p.Region] = append(byRegion[p.Region], m.ID)
			}
		}
	}
	best := ""
	for r, ids := range byRegion {
		if len(ids) > len(byRegion[best]) || (len(ids) == len(byRegion[best]) && r < best) {
			best = r
		}
	}
	ids := byRegion[best]
	sort.Strings(ids)
	return best, slices.Compact(ids)
}

// playersOf returns the PUUIDs of the simulator's players on region.
func playersOf(s *sim.Sim, region string) []string {
	var out []string
	for _, p := range s.Truth().Players {
		if p.Region == region {
			out = append(out, p.PUUID)
		}
	}
	sort.Strings(out)
	return out
}

// Since keeps the instances that started at or after t0.
func Since(h []sim.WindowInstance, t0 time.Time) []sim.WindowInstance {
	var kept []sim.WindowInstance
	for _, w := range h {
		if !w.Start.Before(t0) {
			kept = append(kept, w)
		}
	}
	return kept
}
