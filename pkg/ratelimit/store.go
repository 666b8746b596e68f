package ratelimit

import (
	"time"
)

// store is where the engine's budgets are counted, and the only part of
// the limiter that differs between one process and many: memStore counts
// in this process (Local); kvStore leases tokens from windows kept in a
// JetStream KV bucket that every process using the key shares (Shared).
// The engine holds e.mu for every call but opening; a store that does I/O
// does it in its own goroutine and re-enters the engine when done.
type store interface {
	// clock is the store's clock minus Options.Now and the error bound of
	// that offset (both 0 in memory).
	clock() (offset, errBound time.Duration)
	// unknown decides a request on b while its limits are unknown and
	// fewer than InitialInFlight requests are in flight: okGrant, blocked
	// until a time (zero: an event), or needLease (fetch).
	unknown(b *bucket, now time.Time) (int, time.Time)
	// reserve decides one more request in w, one of b's windows, at now;
	// end is when w rolls (zero start: w is not running). Same outcomes.
	reserve(b *bucket, w *window, end, now time.Time) (int, time.Time)
	// fetch is asked for tokens for b (after a needLease).
	fetch(r *route, b *bucket)
	// aligned is told that a count-1 reply for the request marked m puts
	// Riot's window of w's length at or after floor; it returns the floor
	// as the store keeps times.
	aligned(b *bucket, w *window, m mark, floor, now time.Time) time.Time
	// opening records that a request granted in w (marked m) is about to
	// be sent late, as the window's first from this process: w's start
	// must be no earlier than start everywhere before it goes, unless
	// Riot's window is known open already (permit.Send). It returns the
	// start the window has then. It is called without mu, and may block
	// on the store; an error means the request must not be sent.
	opening(b *bucket, w *window, m mark, start time.Time) (time.Time, error)
	// observe is told what happened to a budget (event).
	observe(ev event)
}

// eventKind says what an event reports and which of its fields are set.
type eventKind uint8

const (
	// eventSpent: n tokens of w were granted (n = 1) or cancelled (n = −1).
	eventSpent eventKind = iota + 1
	// eventRolled: w, one of b's windows, ended at at with its state
	// cleared, while b.inflight requests may still reach Riot's next window.
	eventRolled
	// eventAnswered: the request marked m in w, one of b's windows, was
	// answered at at, or given up after w moved on (its token not returned).
	eventAnswered
	// eventOpened: w is a new window of b (limits learned or changed at
	// at, with b.inflight requests in flight and b.pre sent before).
	eventOpened
	// eventLearned: an answer on route r taught b's limits, canon.
	eventLearned
	// eventCounted: Riot counted n requests in w, one of b's windows, in
	// its answer to p, which stands at m in w (zero m: p was granted before
	// the limits were known; marked: p was counted in some window of b).
	eventCounted
	// eventPaused: a 429 of X-Rate-Limit-Type typ paused b until at.
	eventPaused
	// eventIdle: an answer, cancel or give-up on route r.
	eventIdle
	// eventSent: the request marked m, this process's first in w (one of
	// b's windows), was sent on time at at, within half the margin of
	// w's start (as it was, or as a late first send moved it): Riot's
	// window is open.
	eventSent
	// eventClosed: w, one of b's windows, is closed at at (engine.closes):
	// no token of it can be granted any more before it rolls.
	eventClosed
)

// event is one thing the engine tells its store (store.observe). It is
// passed by value, so observing allocates nothing.
type event struct {
	kind   eventKind
	r      *route
	b      *bucket
	w      *window
	m      mark
	p      *permit
	n      int
	at     time.Time
	canon  string // eventLearned
	typ    string // eventPaused
	marked bool   // eventCounted
}

// memStore counts every budget in this process (Local): a window's count
// is the requests granted in it, raised by Riot's -Count headers.
type memStore struct{}

func (memStore) clock() (time.Duration, time.Duration) { return 0, 0 }

func (memStore) unknown(*bucket, time.Time) (int, time.Time) { return okGrant, time.Time{} }

func (memStore) reserve(b *bucket, w *window, end, now time.Time) (int, time.Time) {
	switch {
	case w.limit <= 0:
		return blocked, now.Add(w.length)
	case !w.start.IsZero() && w.count >= w.limit:
		return blocked, end
	}
	return okGrant, time.Time{}
}

func (memStore) fetch(*route, *bucket) {}

func (memStore) aligned(_ *bucket, _ *window, _ mark, floor, _ time.Time) time.Time { return floor }

func (memStore) opening(_ *bucket, _ *window, _ mark, start time.Time) (time.Time, error) {
	return start, nil
}

// observe counts grants and cancels in the window; the requests in flight
// when a window rolls or opens count in the new one; a -Count header
// raises the count (and starts the window of a request granted before the
// limits were known).
func (memStore) observe(ev event) {
	w := ev.w
	switch ev.kind {
	case eventSpent:
		w.count += ev.n
	case eventRolled, eventOpened:
		if ev.b.inflight > 0 {
			w.start, w.count = ev.at, ev.b.inflight
		}
	case eventCounted:
		if ev.m.start.IsZero() && w.start.IsZero() {
			w.start = ev.p.at
		}
		w.count = max(w.count, ev.n)
	}
}
