package retrysweeper

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestPollClockFiresOnTheInjectedClock: a timer fires once the injected
// clock reaches its deadline (whatever the wall clock says), never before,
// and a stopped or re-armed timer does not fire for its old deadline.
func TestPollClockFiresOnTheInjectedClock(t *testing.T) {
	var now atomic.Int64
	base := time.Date(2026, 1, 5, 2, 59, 0, 0, time.UTC)
	now.Store(base.UnixNano())
	c := newPollClock(func() time.Time { return time.Unix(0, now.Load()).UTC() })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go c.run(ctx, time.Millisecond)

	fired := make(chan string, 4)
	c.AfterFunc(time.Minute, func() { fired <- "a" })
	stopped := c.AfterFunc(time.Minute, func() { fired <- "stopped" })
	moved := c.AfterFunc(time.Minute, func() { fired <- "moved" })
	if !stopped.Stop() {
		t.Error("Stop of an armed timer reported it unarmed")
	}
	if !moved.Reset(time.Hour) {
		t.Error("Reset of an armed timer reported it unarmed")
	}
	select {
	case f := <-fired:
		t.Fatalf("%s fired before the injected clock reached its deadline", f)
	case <-time.After(50 * time.Millisecond):
	}
	now.Store(base.Add(time.Minute).UnixNano())
	select {
	case f := <-fired:
		if f != "a" {
			t.Fatalf("%s fired, want a", f)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a did not fire when the clock reached its deadline")
	}
	select {
	case f := <-fired:
		t.Fatalf("%s fired too", f)
	case <-time.After(50 * time.Millisecond):
	}
	if c.Now() != base.Add(time.Minute) {
		t.Errorf("Now %v, want the injected clock", c.Now())
	}
}
