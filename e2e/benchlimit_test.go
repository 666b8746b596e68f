package e2e

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/benchlimit"
	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/bus"
)

// BenchmarkLimitProductionShape: N match-fetcher instances share one key
// shaped like a production key scaled down (app 50:1,2500:60: the short
// limit spends the long window only just before it ends, as 500:10 does
// with 30000:600) over BENCH_LIMIT_WINDOWS long windows (default 5) after
// a warm-up. The simulator blacklists the key as Riot does after repeated
// 429s (escalating). Each instance has its own NATS connection, Riot client and
// limiter, in this process (the pipeline harness of BenchmarkPipelineBudget);
// they share the key only through the KV bucket. It is not the
// multi-process bench the issue asks for (no OS processes, no clock skew, no
// NATS node loss). N from BENCH_LIMIT_N (default "1,2,4,8").
//
//	make bench-limit
//	cd e2e && BENCH_LIMIT_N=8 go test -run '^$' -bench LimitProductionShape -benchtime 1x -timeout 2h .
//
// Metrics: used = requests the sim counted in the whole 60 s windows that
// started after the warm-up ÷ what 2,500 per 60 s allows from the first
// window's start to the last one's (gaps count as unused); app429 and
// method429; over = the largest count above its limit in any 1 s or 60 s
// window instance. It writes the per-window counts to
// $BENCH_LIMIT_OUT/limit-N<n>.csv and an SVG plot of the 60 s windows
// against the limit (default directory: the test's temp dir, logged).
func BenchmarkLimitProductionShape(b *testing.B) {
	windows, ns := limitWindowsAndN(b)
	const long, longLimit, short, shortLimit = 60, 2500, 1, 50
	const players, per = 40, 500 // 20,000 matches: more than 6 windows can fetch
	ids := syntheticIDs(players, per)
	for _, n := range ns {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			for b.Loop() {
				p := startPipeline(b, pipelineOptions{fetchers: n, mode: modeShared, regions: []string{"americas"},
					sim: sim.Options{Limits: sim.RateLimits{App: "50:1,2500:60",
						Method: map[string]string{sim.MethodMatch: "2000:10", sim.MethodTimeline: "2000:10"}},
						Synthetic: sim.Synthetic{Players: players, MatchesPerPlayer: per},
						// Riot's escalating blacklist: more than 5 application or
						// method 429s in a minute turn the key to 403s for a
						// minute, then twice as long each time.
						Blacklist: sim.Blacklist{Violations: 5, Period: time.Minute, Duration: time.Minute}}})
				p.backlog(b, ids, bus.Background)
				s := p.h.St.Sim
				waitUntil(b, 2*time.Minute, "warm-up", func() bool { return routeRequests(s.Stats(), "americas") >= 100 })
				t0 := time.Now()
				// windows whole windows end when windows+1 have started.
				waitUntil(b, time.Duration(windows+3)*long*time.Second, fmt.Sprintf("%d whole 60 s windows", windows), func() bool {
					k := 0
					for _, w := range s.WindowHistory("americas", "", long) {
						if !w.Start.Before(t0) {
							k++
						}
					}
					return k > windows
				})
				st := s.Stats()
				hl := s.WindowHistory("americas", "", long)
				hs := s.WindowHistory("americas", "", short)
				used, fill, gap, k := benchlimit.WindowUse(hl, t0, longLimit, long*time.Second)
				over := 0
				for _, w := range hl {
					over = max(over, w.Count-longLimit)
				}
				for _, w := range hs {
					over = max(over, w.Count-shortLimit)
				}
				b.ReportMetric(used, "used")
				b.ReportMetric(fill, "fill")
				b.ReportMetric(gap.Seconds()*1000, "gap-ms")
				b.ReportMetric(float64(k-1), "windows")
				b.ReportMetric(float64(st.RateLimited["application"]), "app429")
				b.ReportMetric(float64(st.RateLimited["method"]), "method429")
				b.ReportMetric(float64(st.RateLimited["service"]), "service429")
				b.ReportMetric(float64(over), "over")
				name := filepath.Join(limitOut(b), fmt.Sprintf("limit-N%d", n))
				if err := benchlimit.WriteWindowCSV(name+".csv", t0, map[int][]sim.WindowInstance{long: hl, short: hs}, map[int]int{long: longLimit, short: shortLimit}); err != nil {
					b.Fatal(err)
				}
				if err := benchlimit.WriteWindowSVG(name+".svg", fmt.Sprintf("N=%d, app 50:1,2500:60: requests per 60 s window", n), t0, hl, longLimit); err != nil {
					b.Fatal(err)
				}
				b.Logf("N=%d: used %.3f over %d whole 60 s windows, 429s %v, peak over budget %d; wrote %s.csv and .svg", n, used, k-1, st.RateLimited, over, name)
			}
		})
	}
}
