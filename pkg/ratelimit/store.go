package ratelimit

import "time"

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

// kvStore's side of the interface; the KV operations are in shared.go.

func (st *kvStore) clock() (time.Duration, time.Duration) {
	return time.Duration(st.offset.Load()), time.Duration(st.offErr.Load())
}

// unknown: one process at a time probes an unknown budget (kvStore.probe),
// so N processes starting together send one request before the limits are
// known, not N; none probes without the store (fail closed).
func (st *kvStore) unknown(b *bucket, now time.Time) (int, time.Time) {
	switch {
	case now.Before(b.probeUntil):
		return okGrant, time.Time{} // this process holds the probe lock
	case now.Before(b.storeRetry):
		return blocked, b.storeRetry
	case now.Before(b.probeWait):
		return blocked, b.probeWait
	}
	return needLease, time.Time{}
}

// reserve grants from tokens this process leased; a window spent in KV
// blocks until its end; otherwise a lease is needed, unless the store
// failed lately: then only leased tokens (counted in KV) are spent (fail
// closed) until StoreRetry has passed.
func (st *kvStore) reserve(b *bucket, w *window, end, now time.Time) (int, time.Time) {
	switch {
	case !w.start.IsZero() && w.leased > 0:
		return okGrant, time.Time{}
	case !w.start.IsZero() && w.count >= w.limit:
		return blocked, end
	case now.Before(b.storeRetry):
		return blocked, b.storeRetry
	}
	return needLease, time.Time{}
}

// spend: count, the KV view, already includes the leased tokens; a
// cancelled one returns to this process's lease.
func (st *kvStore) spend(w *window, n int) { w.leased -= n }

// rolled: the next lease adds this process's requests in flight at the
// rollover to the KV window (leaseJob.carry). They are counted now, not
// when the lease runs: one that is answered in between may still have
// reached Riot after its window reset (the stragglers of a loaded host).
// The tokens it held unsent are settled (kvStore.settle): the KV window's
// chain may go on (realigned by a count-1 reply) and counts them until then.
func (st *kvStore) rolled(b *bucket, w *window, dropped int, now time.Time) {
	w.rollCarry, w.rolledAt = b.inflight, now
	st.addSettled(b, w, dropped, now)
}

// answered settles the request in the KV window chain it was leased from
// (kvStore.settle), if that is still the chain this process leases from.
func (st *kvStore) answered(b *bucket, w *window, m mark, now time.Time) {
	if m.ep != 0 && m.ep == w.epoch {
		st.addSettled(b, w, 1, now)
	}
}

// opened: the next lease adds the requests sent before the limits were
// known to the KV window (seedIn).
func (st *kvStore) opened(b *bucket, w *window, _ time.Time) { w.seedIn = b.pre }

// learned: the next lease first adds the requests sent before the limits
// were known to the KV windows, then writes the limits, which wakes the
// other processes.
func (st *kvStore) learned(r *route, b *bucket, canon string) {
	b.share = canon
	st.fetch(r, b)
}

// counted: KV holds the count; it is raised if Riot counts more, and the
// local view follows on the next lease. Requests sent before the limits
// were known are added to KV by the next lease (seedIn), not here: a count
// header cannot tell them from tokens leased but not yet sent.
func (st *kvStore) counted(b *bucket, w *window, m mark, p *permit, c int, marked bool) {
	if !m.start.IsZero() && c > w.count {
		st.reconcile(b, w, m.start, p.at, c)
	}
	if m.start.IsZero() && !marked {
		w.seedCount = max(w.seedCount, c)
	}
}

// aligned rounds floor to KV's milliseconds and rolls, moves or ends
// earlier the KV window too (alignKV): KV may be ahead of this process's
// view, and the others learn Riot's end from it.
func (st *kvStore) aligned(b *bucket, w *window, m mark, floor, now time.Time) time.Time {
	floor = time.UnixMilli(floor.UnixMilli())
	st.alignKV(b, w, m, floor, now)
	return floor
}

func (st *kvStore) paused(b *bucket, until time.Time, typ string) { st.putPause(b, until, typ) }

// fetch starts a lease (or probe) for b unless one is under way.
func (st *kvStore) fetch(r *route, b *bucket) {
	if !b.fetching {
		b.fetching = true
		go st.lease(r, b)
	}
}

// idle gives up this process's probe locks on r's budgets whose limits
// are still unknown when it has nothing in flight and nobody waiting
// there (its callers gave up, or the probe got no rate-limit headers):
// another process may probe at once instead of waiting for ProbeTTL.
func (st *kvStore) idle(r *route) {
	release := func(b *bucket) {
		if b.limits == "" && !b.probeUntil.IsZero() && b.inflight == 0 && r.demand(b) == 0 {
			b.probeUntil = time.Time{}
			st.releaseProbe(b)
		}
	}
	release(r.app) // on every answer: no allocation here
	for _, b := range r.order {
		release(b)
	}
}
