package ratelimit

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riftflow/riftflow/pkg/riot"
)

var getMatch = riot.Call{Route: "asia", Method: "match-v5.getMatch"}

func TestLocalUsesBudgetWithout429(t *testing.T) {
	f, srv := newFakeRiot(t, "20:1,300:10", map[string]string{"": "200:1"})
	// The margin is measured from round trips (about 1 ms to the
	// in-process fake), so a 1 s window is not capped by a fixed margin.
	lim := NewLocal(Options{})
	hammer(t, []riot.Limiter{lim}, srv.URL, getMatch, 16, 3500*time.Millisecond, 1)
	ok, tm, span := f.stats()
	if len(tm) != 0 {
		t.Errorf("429s: %v, want none", tm)
	}
	u := utilisation(ok, span, Limit{20, time.Second})
	t.Logf("ok=%d span=%v utilisation of 20:1 = %.3f", ok, span, u)
	// The margin follows measured round trips, which grow on a loaded
	// machine (up to a quarter of the 1 s window); 0.8 still catches a
	// limiter that idles whole windows. Speed itself is benchmarked
	// (BenchmarkLimitLongWindows).
	if u < 0.8 {
		t.Errorf("utilisation of 20:1 = %.3f (%d in %v), want ≥ 0.8", u, ok, span)
	}
	st := lim.Snapshot()
	if len(st) != 2 || st[0].Method != "app" || len(st[0].Windows) != 2 || st[0].Windows[1].Limit != 300 {
		t.Errorf("snapshot = %+v, want app budget with learned 20:1,300:10", st)
	}
}

func TestLocalFirstRequestIsConservative(t *testing.T) {
	lim := NewLocal(Options{MaxWait: 50 * time.Millisecond})
	p, err := lim.Acquire(context.Background(), getMatch)
	if err != nil {
		t.Fatal(err)
	}
	// No limits known: a second request must wait for the first answer.
	if _, err := lim.Acquire(context.Background(), getMatch); !isRateLimited(err) {
		t.Fatalf("second Acquire before any answer: err = %v, want KindRateLimited", err)
	}
	h := http.Header{}
	h.Set("X-App-Rate-Limit", "3:1")
	h.Set("X-App-Rate-Limit-Count", "1:1")
	h.Set("X-Method-Rate-Limit", "100:1")
	h.Set("X-Method-Rate-Limit-Count", "1:1")
	p.Done(200, h)
	for i := range 2 {
		if _, err := lim.Acquire(context.Background(), getMatch); err != nil {
			t.Fatalf("Acquire %d after learning 3:1: %v", i+2, err)
		}
	}
	_, err = lim.Acquire(context.Background(), getMatch)
	var re *riot.Error
	if !errors.As(err, &re) || re.Kind != riot.KindRateLimited || re.RetryAt.IsZero() {
		t.Fatalf("4th Acquire in a 3:1 window: err = %v, want KindRateLimited with RetryAt", err)
	}
}

func TestCountsReconcileAndCancel(t *testing.T) {
	lim := NewLocal(Options{MaxWait: 30 * time.Millisecond})
	p, _ := lim.Acquire(context.Background(), getMatch)
	h := http.Header{}
	h.Set("X-App-Rate-Limit", "10:5")
	h.Set("X-App-Rate-Limit-Count", "8:5") // another user of the key used 7
	h.Set("X-Method-Rate-Limit", "100:5")
	h.Set("X-Method-Rate-Limit-Count", "1:5")
	p.Done(200, h)
	p1, err := lim.Acquire(context.Background(), getMatch)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := lim.Acquire(context.Background(), getMatch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Acquire(context.Background(), getMatch); !isRateLimited(err) {
		t.Fatalf("11th in window: %v, want KindRateLimited", err)
	}
	p1.Cancel()
	p1.Cancel() // idempotent
	if _, err := lim.Acquire(context.Background(), getMatch); err != nil {
		t.Fatalf("after Cancel the slot must return: %v", err)
	}
	p2.Done(0, nil) // transport error: the request still counts
	if _, err := lim.Acquire(context.Background(), getMatch); !isRateLimited(err) {
		t.Fatalf("after a transport error the slot must stay used: %v", err)
	}
}

func isRateLimited(err error) bool {
	var re *riot.Error
	return errors.As(err, &re) && re.Kind == riot.KindRateLimited
}

func TestLimitsRelearned(t *testing.T) {
	f, srv := newFakeRiot(t, "5:1", map[string]string{"": "100:1"})
	lim := NewLocal(Options{})
	ctx := context.Background()
	if _, err := call(ctx, lim, srv.URL, getMatch, 1); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.app = "3:1,7:3"
	f.buckets = map[string]*fakeBucket{}
	f.mu.Unlock()
	time.Sleep(1100 * time.Millisecond)
	hammer(t, []riot.Limiter{lim}, srv.URL, getMatch, 4, 2500*time.Millisecond, 1)
	if _, tm, _ := f.stats(); len(tm) > 1 || tm["application"] > 1 {
		// at most the one request sent before the new limits were seen
		t.Errorf("429s after limits changed: %v", tm)
	}
	st := lim.Snapshot()
	if st[0].Windows[0].Limit != 3 || len(st[0].Windows) != 2 || st[0].Windows[1].Limit != 7 {
		t.Errorf("app windows = %+v, want 3:1,7:3", st[0].Windows)
	}
}

func Test429PausesRightScope(t *testing.T) {
	other := riot.Call{Route: "asia", Method: "match-v5.getMatchIdsByPUUID"}
	otherRoute := riot.Call{Route: "jp1", Method: "match-v5.getMatch"}
	short := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	cases := []struct {
		typ, ra     string
		sameMethod  bool // still blocked right after?
		otherMethod bool
		minPause    time.Duration
		maxPause    time.Duration
	}{
		{"application", "1", true, true, time.Second, 1600 * time.Millisecond},
		{"method", "1", true, false, time.Second, 1600 * time.Millisecond},
		{"service", "", true, false, 300 * time.Millisecond, 400 * time.Millisecond}, // backoff start
		{"", "", true, false, 300 * time.Millisecond, 400 * time.Millisecond},        // underlying service
		{"server", "2", true, false, 2 * time.Second, 2600 * time.Millisecond},       // Retry-After beats backoff
		{"application", "", true, true, 300 * time.Millisecond, 400 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.typ+"/"+tc.ra, func(t *testing.T) {
			f, srv := newFakeRiot(t, "100:1", map[string]string{"": "100:1"})
			lim := NewLocal(Options{BackoffStart: 300 * time.Millisecond, RetryAfterMargin: 100 * time.Millisecond})
			for _, c := range []riot.Call{getMatch, other, otherRoute} { // learn limits
				if _, err := call(context.Background(), lim, srv.URL, c, 1); err != nil {
					t.Fatal(err)
				}
			}
			f.force(getMatch.Method, tc.typ, tc.ra)
			before := time.Now()
			if st, _ := call(context.Background(), lim, srv.URL, getMatch, 1); st != 429 {
				t.Fatalf("forced status = %d", st)
			}
			_, err := lim.Acquire(short(), getMatch)
			var re *riot.Error
			if !errors.As(err, &re) || re.Kind != riot.KindRateLimited {
				t.Fatalf("same method after 429: %v, want KindRateLimited", err)
			}
			if p := re.RetryAt.Sub(before); p < tc.minPause || p > tc.maxPause {
				t.Errorf("RetryAt - now = %v, want %v..%v", p, tc.minPause, tc.maxPause)
			}
			_, err = lim.Acquire(short(), other)
			if tc.otherMethod != isRateLimited(err) {
				t.Errorf("other method blocked = %v, want %v (err %v)", isRateLimited(err), tc.otherMethod, err)
			}
			if _, err := lim.Acquire(short(), otherRoute); err != nil {
				t.Errorf("other route must not pause: %v", err)
			}
			// after the pause the method works again, without blocking past it
			ctx, cancel := context.WithTimeout(context.Background(), tc.maxPause+time.Second)
			defer cancel()
			if _, err := lim.Acquire(ctx, getMatch); err != nil {
				t.Errorf("after the pause: %v", err)
			}
		})
	}
}

func TestServiceBackoffDoublesAndResets(t *testing.T) {
	f, srv := newFakeRiot(t, "100:1", map[string]string{"": "100:1"})
	lim := NewLocal(Options{BackoffStart: 100 * time.Millisecond, BackoffMax: 400 * time.Millisecond})
	ctx := context.Background()
	call(ctx, lim, srv.URL, getMatch, 1)
	pause := func() time.Duration {
		for _, s := range lim.Snapshot() {
			if s.Method == getMatch.Method && !s.PausedUntil.IsZero() {
				return time.Until(s.PausedUntil)
			}
		}
		return 0
	}
	var got []time.Duration
	for range 4 {
		f.force(getMatch.Method, "service", "")
		call(ctx, lim, srv.URL, getMatch, 1) // waits out the previous pause
		got = append(got, pause().Round(100*time.Millisecond))
	}
	want := []time.Duration{100, 200, 400, 400}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("backoff pauses = %v, want 100ms,200ms,400ms,400ms", got)
		}
	}
	call(ctx, lim, srv.URL, getMatch, 1) // success resets
	f.force(getMatch.Method, "service", "")
	call(ctx, lim, srv.URL, getMatch, 1)
	if p := pause().Round(100 * time.Millisecond); p != 100*time.Millisecond {
		t.Errorf("after a success the backoff restarts at 100ms, got %v", p)
	}
}

// TestInteractiveBeforeBacklog queues a large background backlog on a
// 10-per-second budget, then one interactive call: it must be granted
// within the next window, ahead of the whole backlog.
func TestInteractiveBeforeBacklog(t *testing.T) {
	lim := NewLocal(Options{MaxWait: time.Minute})
	p, _ := lim.Acquire(context.Background(), getMatch)
	h := http.Header{}
	h.Set("X-App-Rate-Limit", "10:1")
	h.Set("X-App-Rate-Limit-Count", "1:1")
	p.Done(200, h)
	const backlog = 20000
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var bgGranted atomic.Int64
	var wg sync.WaitGroup
	bg := getMatch
	bg.Background = true
	for range backlog {
		wg.Go(func() {
			p, err := lim.Acquire(ctx, bg)
			if err == nil {
				bgGranted.Add(1)
				p.Done(200, nil)
			}
		})
	}
	for { // wait until the backlog is queued
		s := lim.Snapshot()
		if len(s) == 2 && s[1].WaitingBackground+int(bgGranted.Load()) >= backlog {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	before := bgGranted.Load()
	if _, err := lim.Acquire(context.Background(), getMatch); err != nil {
		t.Fatal(err)
	}
	after := bgGranted.Load()
	cancel()
	wg.Wait()
	t.Logf("background granted before the interactive call was queued: %d, while it waited: %d", before, after-before)
	if after-before > 10 {
		t.Errorf("%d background calls were served while an interactive one waited; want ≤ one window (10)", after-before)
	}
}

func TestRejectKey(t *testing.T) {
	lim := NewLocal(Options{})
	lim.RejectKey(403)
	_, err := lim.Acquire(context.Background(), getMatch)
	var re *riot.Error
	if !errors.As(err, &re) || re.Kind != riot.KindKeyRejected || !errors.Is(err, ErrKeyRejected) {
		t.Fatalf("Acquire after RejectKey: %v", err)
	}
	if ok, st := lim.KeyRejected(); !ok || st != 403 {
		t.Errorf("KeyRejected = %v, %d", ok, st)
	}
}

func TestCtxCancelled(t *testing.T) {
	lim := NewLocal(Options{})
	lim.Acquire(context.Background(), getMatch) // holds the only initial slot
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	if _, err := lim.Acquire(ctx, getMatch); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// TestRejectKeyWakesQueuedWaiters: a call already waiting for budget when
// the key is rejected gets riot.KindKeyRejected and is never granted, so
// nothing queued before a 401/403 is sent with the key afterwards.
func TestRejectKeyWakesQueuedWaiters(t *testing.T) {
	lim := NewLocal(Options{MaxWait: time.Minute})
	// Before any response the limiter allows one request in flight: the
	// second call queues behind the first.
	first, err := lim.Acquire(t.Context(), getMatch)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Cancel()
	got := make(chan error, 1)
	go func() {
		p, err := lim.Acquire(t.Context(), getMatch)
		if p != nil {
			p.Cancel()
		}
		got <- err
	}()
	// Wait until the second call is queued (hang guard, not a timing assertion).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		queued := 0
		for _, b := range lim.Snapshot() {
			queued += b.WaitingInteractive + b.WaitingBackground
		}
		if queued == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second call never queued")
		}
	}
	lim.RejectKey(403)
	select {
	case err := <-got:
		var re *riot.Error
		if !errors.As(err, &re) || re.Kind != riot.KindKeyRejected {
			t.Fatalf("queued call returned %v, want KindKeyRejected", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the queued call was not woken by the rejection")
	}
}

// TestOptionsDefaults: a zero or negative option takes its default, a set
// one is kept, and a LimitShare above 1 means the whole limit.
func TestOptionsDefaults(t *testing.T) {
	var zero Options
	zero.defaults()
	if zero.MaxWait != 30*time.Second || zero.InitialInFlight != 1 || zero.RetryAfterMargin != 500*time.Millisecond ||
		zero.UnansweredTTL != 10*time.Second || zero.BackoffMax != time.Minute || zero.LimitShare != 1 ||
		zero.Now == nil || zero.Logger == nil {
		t.Errorf("zero options: %+v", zero)
	}
	o := Options{MaxWait: -time.Second, SendAllowance: time.Millisecond, LimitShare: 1.5}
	o.defaults()
	if o.MaxWait != 30*time.Second || o.SendAllowance != time.Millisecond || o.LimitShare != 1 {
		t.Errorf("MaxWait %s (want the default), SendAllowance %s (set), LimitShare %g (want 1)", o.MaxWait, o.SendAllowance, o.LimitShare)
	}
	o = Options{LimitShare: 0.25}
	if o.defaults(); o.LimitShare != 0.25 {
		t.Errorf("LimitShare 0.25 became %g", o.LimitShare)
	}
}
