package ratelimit

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/riftflow/riftflow/pkg/riot"
)

// TestSharedSkewedClocksAgree: two processes whose host clocks are 1 s
// apart judge windows on the NATS server's clock, measured from KV entry
// timestamps, so they agree to within the KV round trip.
func TestSharedSkewedClocksAgree(t *testing.T) {
	newJS := startNATS(t)
	a := newShared(t, newJS(), SharedOptions{Options: Options{Now: skewedClock(500 * time.Millisecond)}})
	b := newShared(t, newJS(), SharedOptions{Options: Options{Now: skewedClock(-500 * time.Millisecond)}})
	d := a.e.now().Sub(b.e.now())
	if d < -50*time.Millisecond || d > 50*time.Millisecond {
		t.Fatalf("the processes' limiter clocks differ by %v with hosts 1 s apart, want under 50 ms", d)
	}
}

// TestSharedSkewedInstancesNo429: three processes with host clocks at
// −500 ms, 0 and +500 ms share a 20:1 key with no 429. On host clocks, the
// one ahead ended every shared window half a second early.
func TestSharedSkewedInstancesNo429(t *testing.T) {
	newJS := startNATS(t)
	f, srv := newFakeRiot(t, "20:1,300:10", map[string]string{"": "200:1"})
	var lims []riot.Limiter
	for _, d := range []time.Duration{-500 * time.Millisecond, 0, 500 * time.Millisecond} {
		lims = append(lims, newShared(t, newJS(), SharedOptions{Options: Options{Now: skewedClock(d)}}))
	}
	for _, lim := range lims {
		if _, err := call(t.Context(), lim, srv.URL, getMatch, 1); err != nil {
			t.Fatal(err)
		}
	}
	hammer(t, lims, srv.URL, getMatch, 8, 3500*time.Millisecond, 1)
	ok, tm, span := f.stats()
	t.Logf("skewed ±500 ms: ok=%d span=%v 429s=%v utilisation of 20:1 = %.3f", ok, span, tm, utilisation(ok, span, Limit{20, time.Second}))
	if len(tm) != 0 {
		t.Errorf("429s: %v, want none; %q", tm, f.log)
	}
}

// TestSharedPauseHoldsUnderSkew: a process whose host clock is 5 s behind
// gets an application 429 with Retry-After 3; the pause it shares must
// hold on a process with a correct clock (on host clocks it had ended
// 2 s before it was written).
func TestSharedPauseHoldsUnderSkew(t *testing.T) {
	newJS := startNATS(t)
	a := newShared(t, newJS(), SharedOptions{Options: Options{Now: skewedClock(-5 * time.Second)}})
	b := newShared(t, newJS(), SharedOptions{Options: Options{MaxWait: 100 * time.Millisecond}})
	const app, meth = "100:10", "100:10"
	for _, l := range []*Shared{a, b} {
		p := grants(t, l, 1)[0]
		p.Done(200, riotHeaders(app, "1:10", meth, "1:10"))
	}
	p := grants(t, a, 1)[0]
	h := riotHeaders(app, "101:10", meth, "2:10")
	h.Set("X-Rate-Limit-Type", "application")
	h.Set("Retry-After", "3")
	p.Done(http.StatusTooManyRequests, h)
	waitFor(t, "b sees a's pause", func() bool {
		for _, s := range b.Snapshot() {
			if s.Method == "app" && !s.PausedUntil.IsZero() {
				return true
			}
		}
		return false
	})
	_, err := b.Acquire(context.Background(), getMatch)
	var re *riot.Error
	if !isRateLimited(err) {
		t.Fatalf("b.Acquire during a's Retry-After pause: %v, want KindRateLimited", err)
	}
	if errors.As(err, &re) && time.Until(re.RetryAt) < 2*time.Second {
		t.Errorf("RetryAt %v is %v away, want about 3.5 s", re.RetryAt, time.Until(re.RetryAt))
	}
}
