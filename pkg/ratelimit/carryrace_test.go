package ratelimit

import (
	"os"
	"testing"
	"time"
)

// TestSharedCarryOfAnotherProcess: process a has 2 requests in flight when
// the KV window (4:10) rolls; they may reach Riot in its next window.
// Process b, whose own view rolls first, leases the new KV window before
// a does. The new window must count a's requests in flight, or b is
// granted the whole budget of a Riot window that a's stragglers also
// land in.
//
// KNOWN GAP (issue 25): today a process's requests in flight at a roll
// are added to the KV window only by its own next lease (leaseJob.carry),
// so b is granted all 4. This is the leading explanation of the 1–11
// application 429s per cell of `BENCH_LIMIT_PARALLEL=15 make
// bench-limit` (docs/rate-limiting.md, "Every cell at once, 2026-11-27").
// Set RIFTFLOW_KNOWN_GAPS=1 to run it.
func TestSharedCarryOfAnotherProcess(t *testing.T) {
	if os.Getenv("RIFTFLOW_KNOWN_GAPS") == "" {
		t.Skip("KNOWN GAP (issue 25): another process's requests in flight at a KV window's roll are not counted in the next window until it leases; RIFTFLOW_KNOWN_GAPS=1 runs it")
	}
	clk := newManualClock()
	a, b := sharedPair(t, "carry", clk, time.Second)
	const app, meth = "4:10", "100:10"
	teach(t, a, b, riotHeaders(app, "1:10", meth, "1:10"))
	clk.at(20 * time.Second)
	inFlight := grants(t, a, 2) // never answered before the roll
	if len(inFlight) != 2 {
		t.Fatalf("a granted %d, want 2", len(inFlight))
	}
	answered := grants(t, b, 2)
	for i, p := range answered {
		n := []string{"3:10", "4:10"}[i]
		p.Done(200, riotHeaders(app, n, meth, n))
	}
	clk.at(31 * time.Second)
	got := grants(t, b, 4)
	if len(got) > 2 {
		t.Fatalf("b granted %d in the window after the roll while a has 2 requests in flight, want at most 2", len(got))
	}
}

// sharedPair starts two Shared instances, a and b, on one KV bucket of key
// keyID, on clk, with MaxWait maxWait and a 1 ms initial margin.
func sharedPair(t *testing.T, keyID string, clk *manualClock, maxWait time.Duration) (a, b *Shared) {
	t.Helper()
	newJS := startNATS(t)
	o := SharedOptions{KeyID: keyID, StatsEvery: -1, ClockSync: -1, Options: Options{Now: clk.Now, MaxWait: maxWait, InitialMargin: time.Millisecond}}
	o.ProcID = "a"
	a = newShared(t, newJS(), o)
	o.ProcID = "b"
	b = newShared(t, newJS(), o)
	return a, b
}
