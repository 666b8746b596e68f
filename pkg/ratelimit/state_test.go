package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/riftflow/riftflow/pkg/riot"
)

// TestReadState: the state two Shared instances leave in KV is readable by
// a third party (riftflow status): learned limits, the running windows'
// global counts, a pause, every process's counters and the rejected key.
func TestReadState(t *testing.T) {
	f, srv := newFakeRiot(t, "20:1,100:60", map[string]string{"": "50:1"})
	newJS := startNATS(t)
	a := newShared(t, newJS(), SharedOptions{StatsEvery: 50 * time.Millisecond, ProcID: "a"})
	b := newShared(t, newJS(), SharedOptions{StatsEvery: 50 * time.Millisecond, ProcID: "b"})
	hammer(t, []riot.Limiter{a, b}, srv.URL, getMatch, 4, 1500*time.Millisecond, 1)
	ok, tm, _ := f.stats()
	f.force(getMatch.Method, "method", "30")
	if _, err := call(context.Background(), a, srv.URL, getMatch, 1); err != nil {
		t.Fatal(err)
	}
	if err := b.RejectKey(403); err != nil {
		t.Fatal(err)
	}
	js := newJS()
	kv, err := js.KeyValue(context.Background(), "ratelimit")
	if err != nil {
		t.Fatal(err)
	}
	var st []KeyState
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err = ReadState(context.Background(), kv, "", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		// A process's counters are written every StatsEvery: a write may
		// hold the last grant before its 429 was counted.
		var granted, m429 int64
		if len(st) == 1 {
			for _, c := range st[0].Totals() {
				granted += c.Granted
				m429 += c.TooMany["method"]
			}
		}
		if len(st) == 1 && len(st[0].Processes) == 2 && st[0].Rejected == 403 && granted == int64(ok+tm["application"]+tm["method"]+1) && m429 == int64(tm["method"]+1) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("state %+v; granted %d, want %d (ok %d, 429s %v, +1); method 429s %d, want %d", st, granted, ok+tm["application"]+tm["method"]+1, ok, tm, m429, tm["method"]+1)
		}
		time.Sleep(50 * time.Millisecond)
	}
	k := st[0]
	if k.KeyID != "k0123abcd" {
		t.Errorf("key id %q", k.KeyID)
	}
	if since := time.Since(k.RejectedAt); k.RejectedAt.IsZero() || since < 0 || since > time.Minute {
		t.Errorf("RejectedAt = %v, want the time of the rejection", k.RejectedAt)
	}
	var app, meth *BudgetState
	for i := range k.Budgets {
		switch k.Budgets[i].Method {
		case "app":
			app = &k.Budgets[i]
		case getMatch.Method:
			meth = &k.Budgets[i]
		}
	}
	if app == nil || meth == nil {
		t.Fatalf("budgets %+v", k.Budgets)
	}
	if app.Limits != "20:1,100:60" || meth.Limits != "50:1" {
		t.Errorf("limits app %q method %q", app.Limits, meth.Limits)
	}
	if len(app.Windows) != 2 || app.Windows[0].Length != time.Second || app.Windows[1].Length != time.Minute {
		t.Errorf("app windows %+v", app.Windows)
	}
	// The 60 s window is still running and counts every request sent.
	if w := app.Windows[1]; w.Count < ok || w.Count > 100 {
		t.Errorf("app 60 s window count %d, want between %d accepted requests and the limit 100", w.Count, ok)
	}
	if meth.PauseType != "method" || time.Until(meth.PausedUntil) < 20*time.Second {
		t.Errorf("method pause %q until %v", meth.PauseType, meth.PausedUntil)
	}
}

// TestLimitShare: a Local with LimitShare 0.5 uses half of each learned
// limit and ignores the key's global -Count (the fixed-split baseline).
func TestLimitShare(t *testing.T) {
	f, srv := newFakeRiot(t, "20:1", map[string]string{"": "100:1"})
	l := NewLocal(Options{LimitShare: 0.5})
	hammer(t, []riot.Limiter{l}, srv.URL, getMatch, 4, 2500*time.Millisecond, 1)
	ok, tm, span := f.stats()
	if len(tm) != 0 {
		t.Fatalf("429s: %v", tm)
	}
	// 10 per ~1.05 s window: between 2 and 3 windows in 2.5 s, plus the
	// first request sent before the limits were known.
	if max := 10*(int(span/time.Second)+1) + 1; ok > max || ok < 20 {
		t.Errorf("accepted %d in %v, want 20..%d (half of 20:1)", ok, span, max)
	}
}

// TestServerNowIgnoresHostClock: a host whose clock is 5 s behind reads
// the NATS server's time (this machine's real time) from ServerNow, which
// `riftflow status --ratelimit` judges windows and pauses with.
func TestServerNowIgnoresHostClock(t *testing.T) {
	js := startNATS(t)()
	kv, err := js.KeyValue(context.Background(), "ratelimit")
	if err != nil {
		t.Fatal(err)
	}
	behind := func() time.Time { return time.Now().Add(-5 * time.Second) }
	got, err := ServerNow(context.Background(), kv, "k0123abcd", "status", behind)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(got); d < -time.Second || d > time.Second {
		t.Fatalf("ServerNow with a host clock 5 s behind is %v from the server's time", d)
	}
	if st, err := ReadState(context.Background(), kv, "", got); err != nil || len(st) != 0 {
		t.Fatalf("the clock key shows up as state: %+v, %v", st, err)
	}
}
