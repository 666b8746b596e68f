package app

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/riftflow/riftflow/pkg/riot"
)

type countingLimiter struct{ n int }

type nopPermit struct{}

func (nopPermit) Done(int, http.Header) {}
func (nopPermit) Cancel()               {}
func (nopPermit) Send() bool            { return true }
func (nopPermit) Written()              {}

func (l *countingLimiter) Acquire(context.Context, riot.Call) (riot.Permit, error) {
	l.n++
	return nopPermit{}, nil
}

// TestCeilings: with RIOT_MAX_PER_MINUTE 3, the fourth request in a minute
// is refused as rate-limited with a RetryAt about 20 s ahead (never sent to
// the next limiter); with no ceiling the limiter is not wrapped.
func TestCeilings(t *testing.T) {
	next := &countingLimiter{}
	if got := WithCeilings(next, Ceilings{}, time.Second); got != riot.Limiter(next) {
		t.Fatal("no ceiling set, yet the limiter was wrapped")
	}
	lim := WithCeilings(next, Ceilings{PerSecond: 10, PerMinute: 3}, time.Second)
	call := riot.Call{Route: "americas", Method: "match-v5.getMatch"}
	for i := 0; i < 3; i++ {
		if _, err := lim.Acquire(t.Context(), call); err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
	}
	_, err := lim.Acquire(t.Context(), call)
	var re *riot.Error
	if !errors.As(err, &re) || re.Kind != riot.KindRateLimited {
		t.Fatalf("fourth request in a minute: %v, want KindRateLimited", err)
	}
	if d := time.Until(re.RetryAt); d < 15*time.Second || d > 21*time.Second {
		t.Errorf("RetryAt in %v, want about 20 s (one token per 20 s)", d)
	}
	if next.n != 3 {
		t.Errorf("%d requests reached the next limiter, want 3", next.n)
	}
}
