package ratelimit

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// leaseJob asks KV for tokens in one window of a budget: what this process
// knows of the window, read under mu, for leaseOne to run without it.
type leaseJob struct {
	w      *window
	key    string
	length time.Duration
	limit  int
	want   int // tokens wanted: local demand, at most MaxLease
	seedIn int // the window's seedIn when the job was made
	// seedCount is a -Count seen before the limits were known: the window
	// is raised to at least this.
	seedCount int
	carry     int // requests in flight from the previous window, added once to the new one
	rollCarry int // the window's rollCarry that carry took
	// localStart is the window start this process knew; inflight its
	// requests in flight. If KV holds a later start of another epoch that
	// is still running, another process's window replaced ours and does
	// not count them: they are added. (A window of the same epoch that a
	// count-1 reply realigned kept them, alignKV.)
	localStart time.Time
	inflight   int
	epoch      int64 // the epoch this process's tokens were leased from
	// margin judges the stored window's end; shareMargin (this process's
	// measured margin, 0 before any answer was timed) is stored with it.
	margin, shareMargin time.Duration
	offErr              time.Duration // the error bound of this process's clock offset
	// allow is this process's send allowance (engine.allowance): no token
	// is taken from a window within allow of its nominal end, where a
	// grant's send deadline would already have passed.
	allow time.Duration
}

// leased is what leaseOne did for a job: the KV window as stored (its Ep
// set) and the tokens taken from it, or the KV error.
type leased struct {
	stored winVal
	tokens int
	err    error
}

// lease fetches tokens from KV for every window of b that needs them, then
// dispatches r. It runs in its own goroutine; b.kv.fetching is set. While b's
// limits are unknown it takes the probe lock instead (startProbe). When b
// has limits to share, it writes them after the windows are seeded.
func (st *kvStore) lease(r *route, b *bucket) {
	e := st.e
	e.mu.Lock()
	if b.limits == "" {
		freed := b.kv.probeFreed
		e.mu.Unlock()
		st.startProbe(r, b, freed)
		return
	}
	share, probed := b.kv.share, !b.kv.probeUntil.IsZero()
	b.kv.share = ""
	var pause *pauseVal
	if share != "" {
		b.kv.probeUntil, b.kv.probeWait = time.Time{}, time.Time{}
		if now := e.now(); now.Before(b.pausedUntil) {
			// The answer that taught the limits may have been a 429: its
			// pause must be in KV before the limits wake the others.
			pause = &pauseVal{Until: b.pausedUntil.UnixMilli(), Type: b.pauseType}
		}
	}
	jobs := st.leaseJobs(r, b)
	e.mu.Unlock()

	results := make([]leased, len(jobs))
	for i, j := range jobs {
		res := &results[i]
		res.stored, res.tokens, res.err = st.leaseOne(j)
	}
	if share != "" {
		st.shareLimits(b, share, probed, pause)
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	failed := false
	for i, j := range jobs {
		if err := results[i].err; err != nil {
			failed = true
			if !b.kv.storeDown {
				e.o.Logger.Warn("ratelimit: kv unreachable; granting only tokens already leased until it answers", "route", b.route, "bucket", b.name(), "err", err)
			}
			continue
		}
		st.applyLease(b, j, results[i], now)
	}
	st.storeResult(b, failed, now)
	b.kv.fetching = false
	if b.kv.share != "" {
		st.fetch(r, b) // learned while this lease ran
	}
	e.dispatch(r, now)
}

// leaseJobs makes a job for every window of b that has no leased token
// left and is not spent. Callers hold mu.
func (st *kvStore) leaseJobs(r *route, b *bucket) []*leaseJob {
	e := st.e
	// No demand (limits just learned): the lease only seeds the windows;
	// a token taken then would be held unsent and carried at the roll.
	want := min(r.demand(b), st.o.MaxLease)
	var jobs []*leaseJob
	for _, w := range b.windows {
		if !w.start.IsZero() && (w.kv.leased > 0 || w.count >= w.limit) {
			continue
		}
		carry, rollCarry := 0, 0
		if w.start.IsZero() {
			// The window rolled: this process's requests in flight then
			// may land in Riot's next window, so they count in the new one
			// (kvStore.rolled), unless a whole window has passed since.
			// seedIn already holds the pre-limit ones.
			if e.now().Sub(w.kv.rolledAt) < w.length {
				rollCarry = w.kv.rollCarry
			}
			carry = max(0, max(rollCarry, b.inflight)-w.kv.seedIn)
		}
		var shareMargin time.Duration
		if b.rtt.n > 0 {
			shareMargin = b.rtt.margin(0)
		}
		jobs = append(jobs, &leaseJob{w: w, key: st.winKey(b, w),
			length: w.length, limit: w.limit, want: want, seedIn: w.kv.seedIn, seedCount: w.kv.seedCount, carry: carry, rollCarry: rollCarry,
			margin: e.margin(b, w), shareMargin: shareMargin, offErr: time.Duration(st.offErr.Load()), localStart: w.start, inflight: b.inflight, epoch: w.kv.epoch,
			allow: e.allowance(w, e.now())})
	}
	return jobs
}

// applyLease brings the window of job j up to the KV window res read and
// adds the tokens it took. The seeds and carry the job wrote are cleared
// unless they grew meanwhile. Callers hold mu.
func (st *kvStore) applyLease(b *bucket, j *leaseJob, res leased, now time.Time) {
	w, start := j.w, time.UnixMilli(res.stored.Start)
	if w.kv.seedIn == j.seedIn {
		w.kv.seedIn = 0
	}
	if w.kv.seedCount == j.seedCount {
		w.kv.seedCount = 0
	}
	if w.kv.rollCarry == j.rollCarry {
		w.kv.rollCarry = 0
	}
	if !w.start.Equal(start) {
		// Tokens held unsent under the old start are dropped; the
		// window's epoch, if it is the same, still counts them.
		if res.stored.Ep == w.kv.epoch {
			st.addSettled(b, w, w.held(), now)
		}
		w.start, w.kv.leased, w.riotEnd = start, 0, time.Time{}
	}
	if res.stored.Ep != w.kv.epoch {
		// A new epoch: the old one's settlements have nowhere to go.
		w.kv.epoch, w.kv.pend = res.stored.Ep, settleVal{}
	}
	if riotEnd := res.stored.riotEnd(); riotEnd.After(w.riotEnd) {
		// Riot's end as another process proved it; the stored value
		// holds the writer's clock error already (engine.end adds ours).
		w.riotEnd = riotEnd
	}
	w.kv.leased += res.tokens
	w.count = max(w.count, res.stored.Granted)
	w.kv.margin = res.stored.margin()
}

// leaseSize is how many tokens a lease wanting want takes from a window
// with rem tokens left: min(want, rem, max(1, rem/LeaseDivisor)), at least 0.
func (st *kvStore) leaseSize(want, rem int) int {
	return max(0, min(want, rem, max(1, rem/st.o.LeaseDivisor)))
}

// fresh is the KV window that j starts at now when none is running: it
// counts j's seeds and carry, the tokens of prev (the window it replaces,
// nil if none) that may still be in flight (winVal.carryOut), and the
// tokens taken, also returned. j's own carry is not added again when prev
// is the epoch it was leased from: prev's unsettled tokens hold it. ms is
// the margin stored with the new window (ms).
func (st *kvStore) fresh(j *leaseJob, prev *winVal, now time.Time, ms int64) (next winVal, tokens int) {
	own, carried, from := j.carry, 0, int64(0)
	if prev != nil {
		if n, ok := prev.carryOut(now, prev.end(j.length, j.margin, j.offErr), j.length, j.margin); ok {
			carried, from = n, prev.epoch()
			if from == j.epoch {
				own = 0
			}
		}
	}
	seeded := max(j.seedIn+own+carried, j.seedCount)
	tokens = st.leaseSize(j.want, j.limit-seeded)
	if carried > 0 {
		st.e.o.Logger.Debug("ratelimit: new window counts requests of the one it replaces", "key", j.key, "carried", carried, "replaced_epoch", from, "seeded", seeded)
	}
	next = winVal{Start: now.UnixMilli(), Limit: j.limit, Granted: seeded + tokens, Margin: ms, Ep: now.UnixMilli(), Prev: from, Carried: seeded}
	if j.seedIn > 0 {
		// Requests sent before the limits were known, answered: Riot's
		// window is open (winVal.Open).
		next.Open = next.Start
	}
	return next, tokens
}

// leaseOne takes up to j.want tokens from one window in KV with CAS,
// starting a new window when the stored one has ended. It returns the
// window as stored (its Ep set) and the tokens taken.
func (st *kvStore) leaseOne(j *leaseJob) (winVal, int, error) {
	ctx, cancel := st.ctx()
	defer cancel()
	ms := j.shareMargin.Milliseconds()
	if j.shareMargin > 0 {
		ms = max(ms, 1)
	}
	for range 50 {
		now := st.e.now()
		ent, err := st.kv.Get(ctx, j.key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			next, k := st.fresh(j, nil, now, ms)
			v, _ := json.Marshal(next)
			_, err := st.kv.Create(ctx, j.key, v)
			if err == nil {
				return next, k, nil
			}
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue
			}
			return winVal{}, 0, err
		}
		if err != nil {
			return winVal{}, 0, err
		}
		var cur winVal
		prev := &cur
		if err := json.Unmarshal(ent.Value(), &cur); err != nil {
			cur, prev = winVal{}, nil // garbage: start a new window
		}
		var next winVal
		var k int
		if cur.Start == 0 || !now.Before(cur.end(j.length, j.margin, j.offErr)) {
			if cur.Start == 0 {
				prev = nil
			}
			next, k = st.fresh(j, prev, now, ms)
		} else {
			add := j.seedIn
			// This process's requests in flight are counted in the window's
			// epoch they were leased from; a window of that epoch that a
			// count-1 reply rolled (alignKV) kept them, unless settled, and
			// so did a window that replaced that epoch (winVal.Prev).
			if cur.epoch() != j.epoch && (cur.Prev == 0 || cur.Prev != j.epoch) {
				add += j.carry
				if !j.localStart.IsZero() && cur.Start > j.localStart.UnixMilli() {
					add += j.inflight
				}
			}
			raised := max(cur.Granted+add, j.seedCount)
			k = st.leaseSize(j.want, j.limit-raised)
			if !now.Before(time.UnixMilli(cur.Start).Add(j.length - j.allow)) {
				k = 0 // closed: a token taken now could not be sent (engine.closes)
			}
			if k == 0 && raised == cur.Granted {
				cur.Ep = cur.epoch()
				return cur, 0, nil // spent: nothing to write
			}
			// Written even with no token left: the seeds must reach KV.
			next = cur
			next.Ep, next.Limit, next.Granted, next.Margin = cur.epoch(), j.limit, raised+k, max(cur.Margin, ms)
			next.Carried = cur.Carried + raised - cur.Granted
		}
		v, _ := json.Marshal(next)
		_, err = st.kv.Update(ctx, j.key, v, ent.Revision())
		if err == nil {
			return next, k, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return winVal{}, 0, err
		}
	}
	return winVal{}, 0, errors.New("ratelimit: lease: too much CAS contention")
}

// fetch starts a lease (or probe) for b unless one is under way.
func (st *kvStore) fetch(r *route, b *bucket) {
	if !b.kv.fetching {
		b.kv.fetching = true
		go st.lease(r, b)
	}
}
