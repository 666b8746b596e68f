package ratelimit

import (
	"time"
)

// store is where the engine's budgets are counted, and the only part of
// the limiter that differs between one process and many: memStore counts
// in this process (Local); kvStore leases tokens from windows kept in a
// JetStream KV bucket that every process using the key shares (Shared).
// The engine holds e.mu for every call; a store that does I/O does it in
// its own goroutine and re-enters the engine when done.
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
	// spend counts n granted (n = 1) or cancelled (n = −1) requests in w.
	spend(w *window, n int)
	// rolled is called when w ended at now, with its state cleared, while
	// b.inflight requests may still reach Riot's next window; dropped is
	// how many tokens this process held unsent in w.
	rolled(b *bucket, w *window, dropped int, now time.Time)
	// answered is told that the request marked m in w was answered at
	// now, or given up after its window moved on (its token not returned).
	answered(b *bucket, w *window, m mark, now time.Time)
	// opened is called for a new window w of b (limits learned or changed
	// at at, with b.inflight requests in flight and b.pre sent before).
	opened(b *bucket, w *window, at time.Time)
	// learned is called when an answer on r taught b's limits canon.
	learned(r *route, b *bucket, canon string)
	// counted applies Riot's count c of w, from the answer to p, which
	// stands at m in w (zero m: p was granted before the limits were
	// known; marked: p was counted in some window of b).
	counted(b *bucket, w *window, m mark, p *permit, c int, marked bool)
	// aligned is told that a count-1 reply for the request marked m puts
	// Riot's window of w's length at or after floor; it returns the floor
	// as the store keeps times.
	aligned(b *bucket, w *window, m mark, floor, now time.Time) time.Time
	// paused is told that a 429 paused b until until.
	paused(b *bucket, until time.Time, typ string)
	// opening records that a request granted in w (marked m) is about to
	// be sent late, as the window's first from this process: w's start
	// must be no earlier than start everywhere before it goes
	// (permit.Send). Unlike the others, it is called without mu, and may
	// block on the store; an error means the request must not be sent.
	opening(b *bucket, w *window, m mark, start time.Time) error
	// fetch is asked for tokens for b (after a needLease).
	fetch(r *route, b *bucket)
	// idle is called after an answer, cancel or give-up on r.
	idle(r *route)
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

func (memStore) spend(w *window, n int) { w.count += n }

func (memStore) answered(*bucket, *window, mark, time.Time) {}

func (memStore) rolled(b *bucket, w *window, _ int, now time.Time) {
	if b.inflight > 0 {
		w.start, w.count = now, b.inflight
	}
}

func (memStore) opened(b *bucket, w *window, at time.Time) {
	if b.inflight > 0 { // requests already in flight count in the new window
		w.start, w.count = at, b.inflight
	}
}

func (memStore) learned(*route, *bucket, string) {}

func (memStore) counted(b *bucket, w *window, m mark, p *permit, c int, marked bool) {
	if m.start.IsZero() && w.start.IsZero() {
		w.start = p.at
	}
	w.count = max(w.count, c)
}

func (memStore) aligned(_ *bucket, _ *window, _ mark, floor, _ time.Time) time.Time { return floor }

func (memStore) paused(*bucket, time.Time, string) {}

func (memStore) opening(*bucket, *window, mark, time.Time) error { return nil }

func (memStore) fetch(*route, *bucket) {}

func (memStore) idle(*route) {}
