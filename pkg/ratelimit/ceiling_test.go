package ratelimit

import (
	"testing"
	"time"

	"github.com/riftflow/riftflow/pkg/riot"
)

// TestSharedCeilingIsKeyWide: riftflow's own ceiling of 3 requests per
// 10 s (RIOT_MAX_PER_MINUTE-style) on two processes sharing one KV bucket
// caps the key, not each process: a and b together are granted 3, on
// two routes and methods, and nothing more until the window ends; then 3
// again (a ceiling per process would grant 3 to each).
func TestSharedCeilingIsKeyWide(t *testing.T) {
	clk := newManualClock()
	newJS := startNATS(t)
	o := SharedOptions{KeyID: "ceil", StatsEvery: -1, ClockSync: -1,
		Options: Options{Now: clk.Now, MaxWait: time.Second, InitialMargin: time.Millisecond}}
	lims := []Limit{{N: 3, Window: 10 * time.Second}}
	o.ProcID = "a"
	sa := newShared(t, newJS(), o)
	o.ProcID = "b"
	sb := newShared(t, newJS(), o)
	a, b := sa.Ceiling(lims), sb.Ceiling(lims)
	// Riot's own budgets are known and large on both routes.
	teachRoute := func(s *Shared, c riot.Call) {
		p, err := s.Acquire(t.Context(), c)
		if err != nil {
			t.Fatal(err)
		}
		p.Done(200, riotHeaders("100:10", "1:10", "100:10", "1:10"))
	}
	asia := riot.Call{Route: "asia", Method: "match-v5.getMatch"}
	jp1 := riot.Call{Route: "jp1", Method: "league-v4.getLeagueEntriesByPUUID"}
	teachRoute(sa, asia)
	teachRoute(sb, jp1)
	clk.at(20 * time.Second)
	take := func(lim riot.Limiter, c riot.Call, n int) []riot.Permit { return grantsOf(t, lim, c, n) }
	ps := take(a, asia, 2)
	ps = append(ps, take(b, jp1, 5)...)
	ps = append(ps, take(a, jp1, 5)...)
	if len(ps) != 3 {
		t.Fatalf("a and b granted %d within one 10 s ceiling window of 3, want 3", len(ps))
	}
	clk.at(21 * time.Second)
	for _, p := range ps {
		p.Done(200, riotHeaders("100:10", "2:10", "100:10", "2:10"))
	}
	waitSettled(t, sa, sb)
	clk.at(31 * time.Second)
	if n := len(take(b, asia, 5)) + len(take(a, asia, 5)); n != 3 {
		t.Fatalf("granted %d in the next ceiling window, want 3", n)
	}
}
