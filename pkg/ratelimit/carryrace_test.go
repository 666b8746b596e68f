package ratelimit

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"
)

// TestSharedCarryOfAnotherProcess: process a has 2 requests in flight when
// the KV window (4:10) rolls; they may reach Riot in its next window.
// Process b, whose own view rolls first, leases the new KV window before
// a does. The new window counts a's requests in flight (the predecessor's
// unsettled tokens, winVal.carryOut), so b is granted only the other 2,
// and a's own next lease does not add them again (winVal.Prev).
func TestSharedCarryOfAnotherProcess(t *testing.T) {
	clk, a, b := taughtPair(t, "carry")
	inFlight := grants(t, a, 2) // never answered before the roll
	if len(inFlight) != 2 {
		t.Fatalf("a granted %d, want 2", len(inFlight))
	}
	answered := grants(t, b, 2)
	for i, p := range answered {
		n := []string{"3:10", "4:10"}[i]
		p.Done(200, riotHeaders(app, n, meth, n))
	}
	waitSettled(t, b)
	clk.at(31 * time.Second)
	got := grants(t, b, 4)
	if len(got) != 2 {
		t.Fatalf("b granted %d in the window after the roll while a has 2 requests in flight, want 2", len(got))
	}
	// a's in-flight requests are counted once: a's lease finds the window
	// spent (2 carried + b's 2), it does not add them again.
	for _, p := range inFlight {
		p.Done(200, riotHeaders(app, "1:10", meth, "1:10"))
	}
	if n := len(grants(t, a, 1)); n != 0 {
		t.Fatalf("a granted %d in a window already spent, want 0", n)
	}
	if w := readWindow(t, a, "carry.asia.win.app.10"); w.Granted != 4 || w.Carried != 2 {
		t.Fatalf("KV window after a's lease: granted %d, carried %d; want 4 and 2 (a's requests counted once)", w.Granted, w.Carried)
	}
}

// readWindow reads the KV window at key through s's bucket.
func readWindow(t *testing.T, s *Shared, key string) winVal {
	t.Helper()
	ent, err := s.st.kv.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	var w winVal
	if err := json.Unmarshal(ent.Value(), &w); err != nil {
		t.Fatal(err)
	}
	return w
}

// app and meth are the 4 per 10 s key of taughtPair.
const app, meth = "4:10", "100:10"

// taughtPair is sharedPair on a manual clock, both instances taught the
// limits app and meth at 0 s, the clock then at 20 s.
func taughtPair(t *testing.T, keyID string) (clk *manualClock, a, b *Shared) {
	t.Helper()
	clk = newManualClock()
	a, b = sharedPair(t, keyID, clk, time.Second)
	teach(t, a, b, riotHeaders(app, "1:10", meth, "1:10"))
	clk.at(20 * time.Second)
	return clk, a, b
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

// waitSettled waits until every Shared in ss has written its pending
// settlements to KV (kvStore.settle runs in its own goroutine): a test on
// a manual clock that rolls a window right after answers would otherwise
// find them unsettled and carried (winVal.carryOut).
func waitSettled(t *testing.T, ss ...*Shared) {
	t.Helper()
	waitFor(t, "settlements written to KV", func() bool {
		for _, s := range ss {
			s.e.mu.Lock()
			busy := false
			for _, r := range s.e.routes {
				for _, b := range append([]*bucket{r.app}, r.order...) {
					busy = busy || b.kv.settling
				}
			}
			s.e.mu.Unlock()
			if busy {
				return false
			}
		}
		return true
	})
}

// TestSharedRaiseNotCarried: Riot counts 3 in a 4:10 window where a was
// granted 1 (another user of the key sent 2): KV's count is raised to 3.
// The raise is requests no process of ours leased, already counted where
// they belong, so when the window rolls they are not carried as if in
// flight: b gets all 4 of the next window.
func TestSharedRaiseNotCarried(t *testing.T) {
	clk, a, b := taughtPair(t, "raise")
	grants(t, a, 1)[0].Done(200, riotHeaders(app, "3:10", meth, "3:10"))
	waitSettled(t, a)
	waitFor(t, "KV raised to Riot's count", func() bool { return readWindow(t, a, "raise.asia.win.app.10").Granted == 3 })
	clk.at(31 * time.Second)
	if n := len(grants(t, b, 4)); n != 4 {
		t.Fatalf("b granted %d in the window after a raised one, want 4 (a raise is not in flight)", n)
	}
}

// TestSharedLateAnswerCarried: in a 4 per 10 s window begun at 20 s, b's
// 3 requests are answered at once; a's, granted at 29.8 s, is answered at
// 30 s, after Riot's window may have reset: it may be the straggler that
// opens Riot's next window. When b starts the next KV window it carries
// that request although it was settled before the roll, and is granted 3.
func TestSharedLateAnswerCarried(t *testing.T) {
	clk, a, b := taughtPair(t, "late-answer")
	for i, p := range grants(t, b, 3) {
		n := strconv.Itoa(i + 1)
		p.Done(200, riotHeaders(app, n+":10", meth, n+":10"))
	}
	clk.at(29*time.Second + 800*time.Millisecond)
	late := grants(t, a, 1)
	if len(late) != 1 {
		t.Fatalf("a granted %d at 29.8 s, want 1", len(late))
	}
	clk.at(30 * time.Second)
	late[0].Done(200, riotHeaders(app, "4:10", meth, "4:10"))
	waitSettled(t, a, b)
	clk.at(31 * time.Second)
	if n := len(grants(t, b, 4)); n != 3 {
		t.Fatalf("b granted %d in the window after a's late answer, want 3", n)
	}
}
