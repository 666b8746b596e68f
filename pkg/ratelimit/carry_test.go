package ratelimit

import (
	"net/http"
	"testing"
	"time"

	"github.com/riftflow/riftflow/pkg/riot"
)

// lateLeaseSetup starts two Shared instances, a and b, on one KV bucket
// with a 4 per 10 s app budget, learned at 0 s. At 20 s a fresh window
// starts: a is granted two requests (a1, a2), and, at 29.8 s, b is granted
// p, the window's last token. It returns a1, a2 and p, with the clock at
// 29.8 s.
func lateLeaseSetup(t *testing.T, keyID string, clk *manualClock) (a, b *Shared, a1, a2, p riot.Permit) {
	t.Helper()
	newJS := startNATS(t)
	o := SharedOptions{KeyID: keyID, StatsEvery: -1, ClockSync: -1, Options: Options{Now: clk.Now, MaxWait: time.Second, InitialMargin: time.Millisecond}}
	o.ProcID = "a"
	a = newShared(t, newJS(), o)
	o.ProcID = "b"
	b = newShared(t, newJS(), o)
	teach(t, a, b, riotHeaders(lateApp, "1:10", lateMeth, "1:10"))
	clk.at(20 * time.Second)
	as := grants(t, a, 2)
	if len(as) != 2 {
		t.Fatalf("a granted %d at the window's start, want 2", len(as))
	}
	clk.at(29*time.Second + 800*time.Millisecond)
	ps := grants(t, b, 1)
	if len(ps) != 1 {
		t.Fatal("b was not granted a token at 29.8 s")
	}
	return a, b, as[0], as[1], ps[0]
}

const lateApp, lateMeth = "4:10", "100:10"

// rollAt answers p at 30 s with count 1 (Riot's window began with p: it is
// a straggler that reached Riot after Riot's window reset) and waits until
// b has rolled the KV window.
func rollAt(t *testing.T, a *Shared, clk *manualClock, key string, p riot.Permit) {
	t.Helper()
	clk.at(30 * time.Second)
	p.Done(200, riotHeaders(lateApp, "1:10", lateMeth, "1:10"))
	waitFor(t, "b to roll the KV window", func() bool {
		wv, ok := readKVWindow(a, key)
		return ok && wv.Start != clk.t0().Add(20*time.Second).UnixMilli()
	})
}

// grantsBoth counts the grants a and b still get at the clock's time.
func grantsBoth(t *testing.T, a, b *Shared) int {
	t.Helper()
	n := len(grants(t, b, 10))
	return n + len(grants(t, a, 10))
}

// TestSharedRollKeepsOtherProcessesLateTokens: process a's two requests,
// granted at 20 s in the KV window [20 s, 30 s), reach Riot only after 30 s
// (a loaded host). Process b's p, granted at 29.8 s, reaches Riot after its
// window reset and is answered with count 1: b rolls the KV window. a's two
// requests land in the window p began, after p. Riot's window then holds
// p, a1, a2 and whatever is granted after the roll: at most 4. Rolling to
// what b alone knows (p and b's own requests in flight) let b and a spend
// 3 more: 6 in a window of 4.
func TestSharedRollKeepsOtherProcessesLateTokens(t *testing.T) {
	clk := newManualClock()
	a, b, a1, a2, p := lateLeaseSetup(t, "late", clk)
	rollAt(t, a, clk, "late.asia.win.app.10", p)
	after := grantsBoth(t, a, b)
	// a1 and a2 are sent now, late, into Riot's window that p began.
	clk.at(30*time.Second + 100*time.Millisecond)
	a1.Done(200, riotHeaders(lateApp, "2:10", lateMeth, "2:10"))
	a2.Done(200, riotHeaders(lateApp, "3:10", lateMeth, "3:10"))
	if riot := 1 + 2 + after; riot > 4 {
		t.Fatalf("Riot's window would hold %d (p, a's 2 late requests, %d granted after the roll), limit 4", riot, after)
	}
	if after != 1 {
		t.Fatalf("granted %d after the roll, want the 1 that Riot's window has left", after)
	}
}

// TestSharedRollFreesSettledTokens is the same case with a's two requests
// answered at 21 s, before p was granted: they were in Riot's earlier
// window, so the roll must not keep them (that would idle their budget):
// Riot's new window holds only p, and 3 more are granted at once.
func TestSharedRollFreesSettledTokens(t *testing.T) {
	clk := newManualClock()
	a, b := sharedPair(t, "settled", clk, time.Second)
	teach(t, a, b, riotHeaders(lateApp, "1:10", lateMeth, "1:10"))
	clk.at(20 * time.Second)
	as := grants(t, a, 2)
	if len(as) != 2 {
		t.Fatalf("a granted %d, want 2", len(as))
	}
	clk.at(21 * time.Second)
	as[0].Done(200, http.Header{"X-App-Rate-Limit": {lateApp}, "X-Method-Rate-Limit": {lateMeth}})
	as[1].Done(200, http.Header{"X-App-Rate-Limit": {lateApp}, "X-Method-Rate-Limit": {lateMeth}})
	key := "settled.asia.win.app.10"
	waitFor(t, "a's answers to be settled in KV", func() bool {
		wv, ok := readKVWindow(a, key)
		n, _ := wv.unsettled(clk.t0().Add(21 * time.Second).UnixMilli())
		return ok && n == 2
	})
	clk.at(29*time.Second + 800*time.Millisecond)
	ps := grants(t, b, 1)
	if len(ps) != 1 {
		t.Fatal("b was not granted a token at 29.8 s")
	}
	rollAt(t, a, clk, key, ps[0])
	if after := grantsBoth(t, a, b); after != 3 {
		t.Fatalf("granted %d after the roll, want 3 (Riot's window holds only p)", after)
	}
}
