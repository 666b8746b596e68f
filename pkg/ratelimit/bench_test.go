package ratelimit

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/pkg/riot"
)

// BenchmarkSharedBudget runs N limiter instances sharing one key against
// the fake Riot edge with limits shaped like a production key, scaled down
// ten times in time and count (app 50:1,3000:60 for 500:10,30000:600;
// method 200:1 for 2000:10) and a backlog (8 workers per instance), for 3 s
// per case. Metrics: used = accepted requests over what 50:1 allows in the
// run; app429 and method429 = 429 answers by type. Cases: shared (this
// package's Shared on one embedded NATS), independent (N Local limiters,
// each believing it owns the key) and split (N Local limiters each using a
// fixed 1/N of the learned limits).
func BenchmarkSharedBudget(b *testing.B) {
	for _, mode := range []string{"shared", "independent", "split"} {
		for _, n := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("%s/N=%d", mode, n), func(b *testing.B) {
				for b.Loop() {
					f, srv := newFakeRiot(b, "50:1,3000:60", map[string]string{"": "200:1"})
					var lims []riot.Limiter
					scale := 1
					switch mode {
					case "shared":
						newJS := startNATS(b)
						for range n {
							lims = append(lims, newShared(b, newJS(), SharedOptions{}))
						}
					case "split":
						scale = n
						fallthrough
					default:
						for range n {
							lims = append(lims, NewLocal(Options{}))
						}
					}
					hammer(b, lims, srv.URL, getMatch, 8, 3*time.Second, scale)
					ok, tm, span := f.stats()
					b.ReportMetric(utilisation(ok, span, Limit{50, time.Second}), "used")
					b.ReportMetric(float64(tm["application"]), "app429")
					b.ReportMetric(float64(tm["method"]), "method429")
				}
			})
		}
	}
}

// BenchmarkLimitLongWindows runs N Shared instances (each with its own NATS
// connection, on one embedded NATS server) against the fake Riot edge,
// 8 workers each, for BENCH_LIMIT_WINDOWS long windows (skipped when
// unset; `make bench-limit` sets 5). Keys: dev (20:1,100:120) and prod, a
// production-shaped key whose short limit spends the long window only just
// before it ends (50:1,2500:60). Skew: 0, or the instances' host clocks
// spread evenly over ±BENCH_LIMIT_SKEW_MS (500) through Options.Now.
// Filters: BENCH_LIMIT_N ("1,2,4,8"), BENCH_LIMIT_KEYS ("dev,prod"),
// BENCH_LIMIT_SKEWED ("false,true"). Metrics: used = accepted requests ÷
// what the tightest window allowed over the run (limit × windows the run
// touched); app429, method429.
func BenchmarkLimitLongWindows(b *testing.B) {
	windows, _ := strconv.Atoi(os.Getenv("BENCH_LIMIT_WINDOWS"))
	if windows <= 0 {
		b.Skip("BENCH_LIMIT_WINDOWS not set (make bench-limit sets it)")
	}
	skewMS := 500
	if v, err := strconv.Atoi(os.Getenv("BENCH_LIMIT_SKEW_MS")); err == nil {
		skewMS = v
	}
	keys := map[string]string{"dev": "20:1,100:120", "prod": "50:1,2500:60"}
	for _, key := range envList("BENCH_LIMIT_KEYS", "dev,prod") {
		for _, skewed := range envList("BENCH_LIMIT_SKEWED", "false,true") {
			for _, ns := range envList("BENCH_LIMIT_N", "1,2,4,8") {
				n, _ := strconv.Atoi(ns)
				lims := ParseLimits(keys[key])
				if n < 1 || len(lims) == 0 {
					b.Fatalf("bad case key=%q N=%q", key, ns)
				}
				b.Run(fmt.Sprintf("%s/skewed=%s/N=%d", key, skewed, n), func(b *testing.B) {
					for b.Loop() {
						f, srv := newFakeRiot(b, keys[key], map[string]string{"": "2000:10"})
						newJS := startNATS(b)
						var ls []riot.Limiter
						for i := range n {
							var d time.Duration
							if skewed == "true" && n > 1 {
								d = time.Duration(-skewMS+2*skewMS*i/(n-1)) * time.Millisecond
							}
							ls = append(ls, newShared(b, newJS(), SharedOptions{ProcID: fmt.Sprint("p", i), Options: Options{Now: skewedClock(d)}}))
						}
						long := lims[len(lims)-1].Window
						hammer(b, ls, srv.URL, getMatch, 8, time.Duration(windows)*long-long/20, 1)
						ok, tm, span := f.stats()
						allowed := 0.0 // by the tightest window over the run
						for i, l := range lims {
							a := float64(l.N) * float64(int(span/l.Window)+1)
							if i == 0 || a < allowed {
								allowed = a
							}
						}
						b.ReportMetric(float64(ok)/allowed, "used")
						b.ReportMetric(float64(ok), "accepted")
						b.ReportMetric(float64(tm["application"]), "app429")
						b.ReportMetric(float64(tm["method"]), "method429")
					}
				})
			}
		}
	}
}

// skewedClock is a host clock off by d.
func skewedClock(d time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(d) }
}

func envList(name, def string) []string {
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	return strings.Split(v, ",")
}
