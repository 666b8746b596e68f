package ratelimit

import (
	"fmt"
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
