package natsx

import (
	"context"
	"time"
)

type holdKey struct{}

// WithHold returns a context under which every Consume and ConsumeBatch
// runner pulls nothing while held() is true (the pause switch, pkg/control;
// the match-fetcher's backpressure). A hold already on ctx still applies:
// the runner waits while either is on. Messages already pulled are
// finished and settled as usual; nothing is naked or redelivered because
// of a hold.
func WithHold(ctx context.Context, held func() bool) context.Context {
	if held == nil {
		return ctx
	}
	if outer, _ := ctx.Value(holdKey{}).(func() bool); outer != nil {
		inner := held
		held = func() bool { return outer() || inner() }
	}
	return context.WithValue(ctx, holdKey{}, held)
}

// WithoutHold returns ctx without any hold: a runner under it pulls
// whatever the pause switch says (the retry-sweeper's recording of queued
// requests, which must show them while the switch holds them).
func WithoutHold(ctx context.Context) context.Context {
	return context.WithValue(ctx, holdKey{}, (func() bool)(nil))
}

// HoldPoll is how often a held runner checks whether it may pull again.
const HoldPoll = 200 * time.Millisecond

// awaitHold blocks while ctx's hold is on, logging once when it starts and
// once when it ends. The runner calls it before each pull, and before
// handling messages a pull already open when the switch went on delivered
// (kept in progress meanwhile); it returns early when the runner stops.
func (r *runner) awaitHold(ctx context.Context) {
	held, _ := ctx.Value(holdKey{}).(func() bool)
	if held == nil || !held() {
		return
	}
	start := time.Now()
	r.log.Info("held (the pause switch, or backpressure); pulling nothing")
	for ctx.Err() == nil && held() {
		select {
		case <-ctx.Done():
		case <-r.stopping:
			return
		case <-time.After(HoldPoll):
		}
	}
	r.log.Info("hold off; consumer resumed", "held_for", time.Since(start).Round(time.Millisecond))
}
