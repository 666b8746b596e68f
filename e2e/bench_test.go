package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/benchlimit"
	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/bus"
)

// Pipeline rate-limit benchmarks (measured, not asserted); the
// figures are in docs/rate-limiting.md. Run with `make bench` or
//
//	cd e2e && go test -run '^$' -bench PipelineBudget -benchtime 1x
//
// Setup per case: the whole pipeline in-process (embedded NATS, a fresh
// Postgres database, the simulator) with the stack's own fetcher replaced
// by N match-fetcher instances, each with its own NATS connection, Riot
// client and limiter (in-process "processes": they share the key only
// through the KV bucket, as pods would). Limits are a production key's as
// Riot states them (app 500:10,30000:600; getMatch and getTimeline
// 2000:10), so the application limit, 500 requests per 10 s window, is the
// tightest. (An earlier version compressed them ten-fold to 50:1, which
// makes every KV lease round trip and every window edge ten times more
// significant than with Riot's real windows.) The
// backlog is 5,000 synthetic na1 (americas) matches published as
// background FetchCommands; timelines queue behind them as matches are
// fetched. After a warm-up of 100 requests, the case runs for
// benchMeasure (four 10 s windows) and reads the sim's window history.
// Metrics:
//
//	used        over the app windows the sim ran on americas after the
//	            warm-up (whole windows only: from the first window's start
//	            to the start of the window after the last), requests the
//	            sim counted / what 500 per 10 s allows over that time; gaps
//	            between windows count as unused budget
//	fill        mean count per window / 500 (the share of each window used)
//	gap-ms      mean idle time between a window's end and the next start
//	app429      application 429s (whole case)
//	method429   method 429s (whole case)
//	stored/min  matches rows stored per minute, over the same windows
//
// Modes: shared (ratelimit.Shared), local (N independent Local limiters,
// RIOT_SHARED_RATELIMIT=false), split (N Local limiters each using a fixed
// 1/N of every limit). The Faults variant injects 3 % service 429s (no
// type, no Retry-After) and 3 % 5xx on every method.
const benchMeasure = 45 * time.Second

func BenchmarkPipelineBudget(b *testing.B) { benchPipeline(b, sim.Faults{}) }
func BenchmarkPipelineBudgetFaults(b *testing.B) {
	benchPipeline(b, sim.Faults{Seed: 7, Service429: 0.03, Error5xx: 0.03})
}

func benchPipeline(b *testing.B, faults sim.Faults) {
	const players, per = 10, 500
	ids := syntheticIDs(players, per)
	for _, mode := range []limiterMode{modeShared, modeLocal, modeSplit} {
		for _, n := range []int{1, 2, 4} {
			if mode != modeShared && n == 1 {
				continue // identical to shared N=1 but for KV
			}
			b.Run(fmt.Sprintf("%s/N=%d", mode, n), func(b *testing.B) {
				for b.Loop() {
					p := startPipeline(b, pipelineOptions{fetchers: n, mode: mode, regions: []string{"americas"},
						sim: sim.Options{Limits: sim.RateLimits{App: "500:10,30000:600",
							Method: map[string]string{sim.MethodMatch: "2000:10", sim.MethodTimeline: "2000:10"}},
							Synthetic: sim.Synthetic{Players: players, MatchesPerPlayer: per}, Faults: faults}})
					p.backlog(b, ids, bus.Background)
					s := p.h.St.Sim
					waitUntil(b, 60*time.Second, "warm-up", func() bool { return routeRequests(s.Stats(), "americas") >= 100 })
					stored := func() int { return p.h.Count(`SELECT count(*) FROM matches WHERE match_id LIKE 'NA1_9%'`) }
					// Sample the stored count every 250 ms, so that stored/min
					// can be read over the same whole windows as "used".
					type sample struct {
						at time.Time
						n  int
					}
					var samples []sample
					t0 := time.Now()
					for time.Since(t0) < benchMeasure {
						samples = append(samples, sample{time.Now(), stored()})
						time.Sleep(250 * time.Millisecond)
					}
					st := s.Stats()
					hist := s.WindowHistory("americas", "", 10)
					used, fill, gap, n := benchlimit.WindowUse(hist, t0, 500, 10*time.Second)
					if n < 2 {
						b.Fatalf("only %d whole app windows ended in %v", n, time.Since(t0))
					}
					at := func(t time.Time) sample { // the last sample at or before t
						x := samples[0]
						for _, sm := range samples {
							if !sm.at.After(t) {
								x = sm
							}
						}
						return x
					}
					first, last := at(hist[len(hist)-n].Start), at(hist[len(hist)-1].Start)
					m0, m1, d := first.n, last.n, last.at.Sub(first.at)
					b.ReportMetric(used, "used")
					b.ReportMetric(fill, "fill")
					b.ReportMetric(gap.Seconds()*1000, "gap-ms")
					b.ReportMetric(float64(st.RateLimited["application"]), "app429")
					b.ReportMetric(float64(st.RateLimited["method"]), "method429")
					b.ReportMetric(float64(m1-m0)/d.Minutes(), "stored/min")
					b.ReportMetric(float64(st.RateLimited["service"]+statusCount(st, "500")+statusCount(st, "502")+statusCount(st, "503")+statusCount(st, "504")), "faults")
					if pending := int64(len(ids)) - int64(m1); pending < 1000 {
						b.Logf("only %d matches left in the backlog at the end", pending)
					}
				}
			})
		}
	}
}
