package riot

import (
	"testing"
	"time"
)

func TestErrorRetryDelay(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		retryAt time.Time
		want    time.Duration
	}{
		{"no RetryAt: the minimum", time.Time{}, 5 * time.Second},
		{"RetryAt sooner than the minimum", now.Add(time.Second), 5 * time.Second},
		{"RetryAt later: wait for it", now.Add(30 * time.Second), 30 * time.Second},
		{"RetryAt in the past", now.Add(-time.Minute), 5 * time.Second},
	} {
		e := &Error{Kind: KindRateLimited, RetryAt: tc.retryAt}
		if got := e.RetryDelay(now, 5*time.Second); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
