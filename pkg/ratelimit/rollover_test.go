package ratelimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riftflow/riftflow/pkg/riot"
)

// manualClock is an injected clock that moves only when the test says so:
// it reads its epoch (t0) plus the offset last set with at.
type manualClock struct{ offset atomic.Int64 }

func newManualClock() *manualClock { return &manualClock{} }

func (c *manualClock) t0() time.Time { return time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC) }

func (c *manualClock) Now() time.Time { return c.t0().Add(time.Duration(c.offset.Load())) }

// at sets the clock to the epoch plus d.
func (c *manualClock) at(d time.Duration) { c.offset.Store(int64(d)) }

// riotHeaders is an answer's rate-limit headers: app limits and count, and
// a method limit of 100 per the same windows with the given count.
func riotHeaders(app, appCount, method, methodCount string) http.Header {
	h := http.Header{}
	h.Set("X-App-Rate-Limit", app)
	h.Set("X-App-Rate-Limit-Count", appCount)
	h.Set("X-Method-Rate-Limit", method)
	h.Set("X-Method-Rate-Limit-Count", methodCount)
	return h
}

// grants counts how many Acquire calls are granted at the clock's time
// before one is refused (at most max).
func grants(t *testing.T, lim riot.Limiter, max int) []riot.Permit {
	t.Helper()
	return grantsOf(t, lim, getMatch, max)
}

// grantsOf is grants for call c.
func grantsOf(t *testing.T, lim riot.Limiter, c riot.Call, max int) []riot.Permit {
	t.Helper()
	var ps []riot.Permit
	for len(ps) < max {
		p, err := lim.Acquire(context.Background(), c)
		if err != nil {
			if !isRateLimited(err) {
				t.Fatal(err)
			}
			break
		}
		ps = append(ps, p)
	}
	return ps
}

// TestCountOneAfterRolloverKeepsBudget: a request granted at the very end
// of a full 3:10 window reaches Riot after Riot's window reset and is
// answered with count 1. Riot's new window holds that one request, so two
// more may go at once, not a whole window later (moving the full
// window's start to the answer while keeping its count 3 would idle the
// key for 50–60 s with 8 fetchers).
func TestCountOneAfterRolloverKeepsBudget(t *testing.T) {
	clk := newManualClock()
	lim := NewLocal(Options{Now: clk.Now, MaxWait: time.Nanosecond})
	const app, meth = "3:10", "100:10"
	grants(t, lim, 1)[0].Done(200, riotHeaders(app, "1:10", meth, "1:10"))
	lastAfterReset(t, clk, lim, lim, lim.e)
	if got := grants(t, lim, 5); len(got) != 2 {
		t.Fatalf("after a count-1 reply: granted %d, want the 2 Riot's new window has left", len(got))
	}
}

// TestCountOneForStragglerMovesNextWindow: a request granted at the end of
// one window reaches Riot late and begins Riot's next window, while ours
// already started without it. Our next window must not end before Riot's,
// or its successor would grant into Riot's still-running window.
func TestCountOneForStragglerMovesNextWindow(t *testing.T) {
	clk := newManualClock()
	lim := NewLocal(Options{Now: clk.Now, MaxWait: time.Nanosecond})
	const app, meth = "3:10", "100:10"
	p := grants(t, lim, 1)[0]
	p.Done(200, riotHeaders(app, "1:10", meth, "1:10"))
	m := appMargin(lim.e)
	end := 10*time.Second + m
	clk.at(lastGrant(lim.e))
	straggler := grants(t, lim, 1)[0]
	clk.at(end + time.Millisecond)
	next := grants(t, lim, 1)[0] // our next window starts here, counting the straggler too
	respAt := end + 500*time.Millisecond
	clk.at(respAt)
	straggler.Done(200, riotHeaders(app, "1:10", meth, "1:10")) // Riot's window began with it, as late as now
	next.Done(200, riotHeaders(app, "2:10", meth, "2:10"))
	got := grants(t, lim, 5)
	if len(got) != 1 {
		t.Fatalf("granted %d in the next window, want 1", len(got))
	}
	got[0].Done(200, riotHeaders(app, "3:10", meth, "3:10"))
	// Riot's window runs until respAt+10 s at the latest: nothing before.
	clk.at(respAt + 10*time.Second - 50*time.Millisecond)
	if got := grants(t, lim, 1); len(got) != 0 {
		t.Fatalf("granted %d before Riot's window (begun by the straggler) can have ended", len(got))
	}
	var resets time.Time
	for _, b := range lim.Snapshot() {
		if b.Method == "app" {
			resets = b.Windows[0].ResetsAt
		}
	}
	if riotEnd := clk.t0().Add(respAt + 10*time.Second); resets.Before(riotEnd) {
		t.Fatalf("our window resets at %v, before Riot's (begun by the straggler) may end at %v", resets, riotEnd)
	}
	clk.at(resets.Sub(clk.t0()))
	if got := grants(t, lim, 5); len(got) != 3 {
		t.Fatalf("granted %d once Riot's window ended, want 3", len(got))
	}
}

// TestSharedCountOneAfterRolloverKeepsBudget is the shared limiter's case
// of TestCountOneAfterRolloverKeepsBudget, with two processes: the KV
// window must be rolled (not moved with its full count) so the other
// process gets the budget Riot's new window has left.
func TestSharedCountOneAfterRolloverKeepsBudget(t *testing.T) {
	clk := newManualClock()
	a, b := sharedPair(t, "roll", clk, 2*time.Second)
	const app, meth = "3:10", "100:10"
	teach(t, a, b, riotHeaders(app, "1:10", meth, "1:10"))
	lastAfterReset(t, clk, b, a, a.e)
	waitFor(t, "the KV window to be realigned", func() bool {
		wv, ok := readKVWindow(a, "roll.asia.win.app.10")
		return ok && wv.Start != clk.t0().UnixMilli()
	})
	got := grants(t, b, 5)
	if len(got) < 1 || len(got) > 2 {
		t.Fatalf("b granted %d after a's count-1 reply, want 1 or 2 (Riot's new window has 2 left)", len(got))
	}
}

// lastAfterReset plays the end of a 3:10 window begun at 0 s with one
// request: at 5 s, second is granted one more, answered with count 2; just
// before the window closes (lastGrant), last is granted the one left and no
// more; its answer comes 20 ms after the window's end (10 s plus the margin
// of e) with count 1 (it reached Riot after Riot's window reset).
func lastAfterReset(t *testing.T, clk *manualClock, second, last riot.Limiter, e *engine) {
	t.Helper()
	const app, meth = "3:10", "100:10"
	clk.at(5 * time.Second)
	grants(t, second, 1)[0].Done(200, riotHeaders(app, "2:10", meth, "2:10"))
	end := 10*time.Second + appMargin(e)
	clk.at(lastGrant(e))
	ps := grants(t, last, 2)
	if len(ps) != 1 {
		t.Fatalf("granted %d at the window's end, want the 1 left", len(ps))
	}
	clk.at(end + 20*time.Millisecond)
	ps[0].Done(200, riotHeaders(app, "1:10", meth, "1:10"))
}

// holdsUntilRiotsEnd spends the rest of a 3:10 window on lim (answers with
// counts from 2) and checks that lim grants nothing until riotEnd (the
// clock's epoch plus riotEnd), the end a count-1 reply proved, and the whole
// budget of 3 from then.
func holdsUntilRiotsEnd(t *testing.T, clk *manualClock, lim riot.Limiter, riotEnd time.Duration) {
	t.Helper()
	const app, meth = "3:10", "100:10"
	for i, p := range grants(t, lim, 5) {
		count := strconv.Itoa(i+2) + ":10"
		p.Done(200, riotHeaders(app, count, meth, count))
	}
	clk.at(riotEnd - time.Millisecond)
	if got := grants(t, lim, 1); len(got) != 0 {
		t.Fatal("granted before Riot's window can have ended")
	}
	clk.at(riotEnd)
	if got := grants(t, lim, 5); len(got) != 3 {
		t.Fatalf("granted %d at the end Riot's count-1 reply proved (not start + 10 s + margin), want 3", len(got))
	}
}

// lastGrant is the last instant a 10 s window begun at 0 s grants: 1 ms
// before it closes, its send allowance before its nominal end
// (engine.closes).
func lastGrant(e *engine) time.Duration {
	return 10*time.Second - e.o.SendAllowance - time.Millisecond
}

// appMargin is the margin of the first app window of route asia.
func appMargin(e *engine) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.routes["asia"]
	return e.margin(r.app, r.app.windows[0])
}

// teach sends one request on a, answered with h, and waits until b has
// learned the limits from KV.
func teach(t *testing.T, a, b *Shared, h http.Header) {
	t.Helper()
	grants(t, a, 1)[0].Done(200, h)
	learned(t, b)
}

// learned waits until b has learned the limits from KV.
func learned(t *testing.T, b *Shared) {
	t.Helper()
	waitFor(t, "b learns the limits", func() bool {
		s := b.Snapshot()
		return len(s) > 0 && len(s[0].Windows) == 1
	})
}

// waitFor polls cond (for asynchronous KV writes) for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for d := time.Now().Add(5 * time.Second); time.Now().Before(d); time.Sleep(2 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestCountOneEndsWindowAtRiotsEnd: the count-1 reply to a window's first
// request, answered 200 ms after its grant, proves that Riot's window ends
// by that answer + 10 s. Ours rolls then, not at its start + 10 s + the
// measured margin (600 ms here: srtt + 4·rttvar of one 200 ms trip), and
// not a millisecond before.
func TestCountOneEndsWindowAtRiotsEnd(t *testing.T) {
	clk := newManualClock()
	lim := NewLocal(Options{Now: clk.Now, MaxWait: time.Nanosecond})
	const app, meth = "3:10", "100:10"
	p := grants(t, lim, 1)[0]
	clk.at(200 * time.Millisecond)
	p.Done(200, riotHeaders(app, "1:10", meth, "1:10")) // learns the limits
	clk.at(20 * time.Second)
	q := grants(t, lim, 1)[0] // a new window starts here
	clk.at(20*time.Second + 200*time.Millisecond)
	q.Done(200, riotHeaders(app, "1:10", meth, "1:10"))
	if m := appMargin(lim.e); m != 600*time.Millisecond {
		t.Fatalf("margin %v, want 600ms", m)
	}
	// start + 10 s + margin would be 400 ms later.
	holdsUntilRiotsEnd(t, clk, lim, 30*time.Second+200*time.Millisecond)
}

// TestSharedCountOneEndThroughKV: process a's count-1 reply, 200 ms after
// its grant, proves that Riot's window ends 10.2 s after the window began;
// a writes that end into the KV window ("e"), and process b, which learns
// it with its lease, starts the next window then, not at start + 10 s +
// the margin (600 ms measured by a, 1 s initial for b).
func TestSharedCountOneEndThroughKV(t *testing.T) {
	newJS := startNATS(t)
	clk := newManualClock()
	o := SharedOptions{KeyID: "end", StatsEvery: -1, ClockSync: -1, Options: Options{Now: clk.Now, MaxWait: 2 * time.Second}}
	o.ProcID = "a"
	a := newShared(t, newJS(), o)
	o.ProcID = "b"
	b := newShared(t, newJS(), o)
	const app, meth = "3:10", "100:10"
	p := grants(t, a, 1)[0]
	clk.at(200 * time.Millisecond)
	p.Done(200, riotHeaders(app, "1:10", meth, "1:10"))
	learned(t, b)
	clk.at(20 * time.Second)
	q := grants(t, a, 1)[0] // a new KV window starts here
	clk.at(20*time.Second + 200*time.Millisecond)
	q.Done(200, riotHeaders(app, "1:10", meth, "1:10"))
	riotEnd := clk.t0().Add(30*time.Second + 200*time.Millisecond)
	waitFor(t, "the KV window to hold Riot's end", func() bool {
		wv, ok := readKVWindow(a, "end.asia.win.app.10")
		return ok && wv.End == riotEnd.UnixMilli()
	})
	holdsUntilRiotsEnd(t, clk, b, 30*time.Second+200*time.Millisecond)
}

// at20s is a Local limiter (margin 1 ms, UnansweredTTL 15 s) on a manual
// clock that learned the app limit 3:10 (method 100:10) from one answer
// at 0 s, with the clock at 20 s: the next grant starts a fresh window.
func at20s(t *testing.T) (*manualClock, *Local) {
	t.Helper()
	clk := newManualClock()
	lim := NewLocal(Options{Now: clk.Now, MaxWait: time.Nanosecond, InitialMargin: time.Millisecond, UnansweredTTL: 15 * time.Second})
	grants(t, lim, 1)[0].Done(200, riotHeaders("3:10", "1:10", "100:10", "1:10"))
	clk.at(20 * time.Second)
	return clk, lim
}

// TestSlowFirstAnswerCarried: a full window's requests reach Riot late (a
// starved process or Riot, a slow network): Riot's window begins only at
// the first arrival, later than our start plus the measured margin, and
// no answer has come back when ours rolls. The requests still in flight
// count in our next window (eventRolled), so it grants nothing into
// Riot's first; the count-1 reply then moves it to Riot's window, which
// ends by the reply's time + 10 s.
func TestSlowFirstAnswerCarried(t *testing.T) {
	clk, lim := at20s(t)
	const app, meth = "3:10", "100:10"
	ps := grants(t, lim, 5)
	if len(ps) != 3 {
		t.Fatalf("granted %d in a fresh 3:10 window, want 3", len(ps))
	}
	clk.at(30*time.Second + 50*time.Millisecond) // past start + length + margin
	if got := grants(t, lim, 1); len(got) != 0 {
		t.Fatalf("granted %d while no answer has said when Riot's window began", len(got))
	}
	replyAt := 30*time.Second + 500*time.Millisecond
	clk.at(replyAt)
	for i, p := range ps {
		n := strconv.Itoa(i+1) + ":10"
		p.Done(200, riotHeaders(app, n, meth, n))
	}
	clk.at(replyAt + 10*time.Second - time.Millisecond)
	if got := grants(t, lim, 1); len(got) != 0 {
		t.Fatalf("granted %d before Riot's window (begun by 30.5 s) can have ended", len(got))
	}
	clk.at(replyAt + 10*time.Second)
	if got := grants(t, lim, 5); len(got) != 3 {
		t.Fatalf("granted %d once Riot's window ended, want 3", len(got))
	}
}

// TestUnansweredStaysInFlight: a request written and never answered (the
// client timed out) may still reach Riot, late, in its next window. It is
// carried into our next window as a request in flight is, for
// UnansweredTTL, and then settles; Written (the send-lag sample) does not
// make it forget that it was sent.
func TestUnansweredStaysInFlight(t *testing.T) {
	clk, lim := at20s(t)
	const app, meth = "3:10", "100:10"
	ps := grants(t, lim, 3)
	for _, p := range ps {
		if !p.Send() {
			t.Fatal("Send refused a fresh grant")
		}
		p.Written() // the transport reports each one on the wire
	}
	ps[0].Done(200, riotHeaders(app, "1:10", meth, "1:10"))
	ps[1].Done(200, riotHeaders(app, "2:10", meth, "2:10"))
	clk.at(25 * time.Second)
	ps[2].Done(0, nil) // timed out after the write: in flight until 40 s
	clk.at(31 * time.Second)
	if got := grants(t, lim, 5); len(got) != 2 {
		t.Fatalf("granted %d in the window after an unanswered request, want 2 (it may still arrive)", len(got))
	} else {
		for i, p := range got {
			n := strconv.Itoa(i+1) + ":10"
			p.Done(200, riotHeaders(app, n, meth, n))
		}
	}
	clk.at(41*time.Second + 500*time.Millisecond)
	if got := grants(t, lim, 5); len(got) != 3 {
		t.Fatalf("granted %d once the unanswered request's time passed, want 3", len(got))
	}
}

// TestUnansweredThroughTheClient is TestUnansweredStaysInFlight through
// the Riot client and its transport, which report the write (Written)
// before the answer times out: the request written and never answered is
// still carried into the next window.
func TestUnansweredThroughTheClient(t *testing.T) {
	var n atomic.Int32
	hold := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) > 1 {
			select { // written, never answered
			case <-hold:
			case <-r.Context().Done():
			}
			return
		}
		for k, v := range riotHeaders("3:10", "1:10", "100:10", "1:10") {
			w.Header()[k] = v
		}
		_, _ = w.Write([]byte(`{"metadata":{"matchId":"JP1_1"},"info":{}}`))
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(hold) })
	clk := newManualClock()
	lim := NewLocal(Options{Now: clk.Now, MaxWait: time.Nanosecond, InitialMargin: time.Millisecond, UnansweredTTL: 15 * time.Second})
	c, err := riot.New(riot.Config{APIKey: "RGAPI-test", BaseURL: srv.URL + "/{route}", Limiter: lim,
		MaxRetries: -1, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Match(t.Context(), "asia", "JP1_1"); err != nil {
		t.Fatal(err)
	}
	clk.at(20 * time.Second)
	if _, _, err := c.Match(t.Context(), "asia", "JP1_1"); err == nil {
		t.Fatal("a server that never answers answered")
	}
	clk.at(31 * time.Second)
	if got := grants(t, lim, 5); len(got) != 2 {
		t.Fatalf("granted %d in the window after a request written and never answered, want 2 (it may still arrive)", len(got))
	}
}

// TestFirstSendThatNeverArrivedRealigns: the first request of a window
// passes Send (the window is recorded open at its grant) but never
// reaches Riot: its write fails, and it stays in flight as an unanswered
// request. Riot's window begins later, with the next request that arrives,
// whose answer says count 1. From that answer on our window ends no
// earlier than Riot's, so the grants after our own window's length still
// count in it: Riot never sees more than its limit.
func TestFirstSendThatNeverArrivedRealigns(t *testing.T) {
	clk, lim := at20s(t)
	const app, meth = "3:10", "100:10"
	lost := grants(t, lim, 1)[0]
	if !lost.Send() {
		t.Fatal("Send refused a fresh grant")
	}
	lost.Written() // the write failed: net/http reports it written, with an error
	lost.Done(0, nil)
	arrived := 25 * time.Second // Riot's window begins here
	clk.at(arrived)
	first := grants(t, lim, 1)[0]
	first.Send()
	first.Done(200, riotHeaders(app, "1:10", meth, "1:10"))
	clk.at(26 * time.Second)
	second := grants(t, lim, 1)
	if len(second) != 1 {
		t.Fatalf("granted %d with 1 request in Riot's 3:10 window and 1 unanswered, want 1", len(second))
	}
	second[0].Send()
	second[0].Done(200, riotHeaders(app, "2:10", meth, "2:10"))
	// Our window began at 20 s; Riot's, at 25 s, still holds 2 requests
	// until 35 s. Past 30 s, Riot has room for 1 more at most.
	clk.at(31 * time.Second)
	if got := grants(t, lim, 5); len(got) > 1 {
		t.Fatalf("granted %d at 31 s, when Riot's window (25 s to 35 s) has room for 1 at most", len(got))
	}
	clk.at(arrived + 10*time.Second + 100*time.Millisecond)
	if got := grants(t, lim, 5); len(got) == 0 {
		t.Fatal("granted nothing after Riot's window ended")
	}
}

// TestUnansweredProbeFreesItsSlot: a first request sent before the limits
// are known and never answered holds the budget's one in-flight slot for
// UnansweredTTL, then frees it without any other event.
func TestUnansweredProbeFreesItsSlot(t *testing.T) {
	clk := newManualClock()
	lim := NewLocal(Options{Now: clk.Now, MaxWait: time.Minute, UnansweredTTL: 300 * time.Millisecond})
	p := grants(t, lim, 1)[0]
	if !p.Send() {
		t.Fatal("Send refused the probe")
	}
	p.Done(0, nil)
	got := make(chan riot.Permit, 1)
	go func() {
		q, err := lim.Acquire(context.Background(), getMatch)
		if err != nil {
			t.Error(err)
		}
		got <- q
	}()
	time.Sleep(50 * time.Millisecond)
	select {
	case <-got:
		t.Fatal("granted while the unanswered probe may still reach Riot")
	default:
	}
	clk.at(300 * time.Millisecond)
	select {
	case q := <-got:
		q.Cancel()
	case <-time.After(5 * time.Second):
		t.Fatal("not granted once the unanswered probe's time passed")
	}
}
