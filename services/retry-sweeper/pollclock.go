package retrysweeper

import (
	"context"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/riftflow/riftflow/pkg/tick"
)

// pollClock is the clock the gocron scheduler runs on: Now is the
// scheduler's clock (time.Now, or a test's), and a timer fires at the
// first poll at which Now has reached its deadline. gocron uses only Now
// and AfterFunc; the other methods are the real clock's.
type pollClock struct {
	clockwork.Clock
	now func() time.Time

	mu     sync.Mutex
	timers map[*pollTimer]struct{}
}

func newPollClock(now func() time.Time) *pollClock {
	return &pollClock{Clock: clockwork.NewRealClock(), now: now, timers: map[*pollTimer]struct{}{}}
}

// Now is the scheduler's clock.
func (c *pollClock) Now() time.Time { return c.now() }

// AfterFunc calls f (in its own goroutine) at the first poll at or after
// Now()+d.
func (c *pollClock) AfterFunc(d time.Duration, f func()) clockwork.Timer {
	t := &pollTimer{c: c, f: f}
	t.Reset(d)
	return t
}

// run fires due timers every poll until ctx ends.
func (c *pollClock) run(ctx context.Context, poll time.Duration) {
	tick.Every(ctx, poll, c.fireDue)
}

// fireDue starts (each in its own goroutine) the timers whose deadline Now
// has reached, and forgets them.
func (c *pollClock) fireDue() {
	now := c.now()
	var due []func()
	c.mu.Lock()
	for t := range c.timers {
		if !now.Before(t.at) {
			delete(c.timers, t)
			due = append(due, t.f)
		}
	}
	c.mu.Unlock()
	for _, f := range due {
		go f()
	}
}

type pollTimer struct {
	c  *pollClock
	f  func()
	at time.Time
}

// Chan is nil: gocron's timers are AfterFunc timers, which have none.
func (t *pollTimer) Chan() <-chan time.Time { return nil }

// Reset re-arms the timer for Now()+d; it reports whether it was armed.
func (t *pollTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, armed := t.c.timers[t]
	t.at = t.c.now().Add(d)
	t.c.timers[t] = struct{}{}
	return armed
}

// Stop disarms the timer; it reports whether it was armed.
func (t *pollTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, armed := t.c.timers[t]
	delete(t.c.timers, t)
	return armed
}
