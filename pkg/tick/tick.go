// Package tick holds riftflow's two context-bound waits: a loop that calls
// a function at a fixed interval until its context ends (Every) and a sleep
// that a context cuts short (Sleep).
package tick

import (
	"context"
	"time"
)

// Every calls fn every d until ctx ends, the first call one interval after
// the start; it returns when ctx ends, never during a call of fn. d must be
// positive (time.NewTicker's rule).
func Every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// Sleep waits d or until ctx ends, whichever is first, and returns
// ctx.Err() in the second case (nil when d elapsed). A d of zero or less
// does not wait.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
