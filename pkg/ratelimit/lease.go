package ratelimit

import (
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

type leaseJob struct {
	w      *window
	key    string
	length time.Duration
	limit  int
	want   int
	seedIn int
	// seedCount is a -Count seen before the limits were known: the window
	// is raised to at least this.
	seedCount int
	carry     int // requests in flight from the previous window, added once to the new one
	rolled    int // the window's rollCarry that carry took
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
	// results
	start    time.Time
	got, g   int
	kvMargin time.Duration
	riotEnd  time.Time // the window's End, zero if none
	ep       int64     // the window's epoch (winVal.Ep)
	err      error
}

// lease fetches tokens from KV for every window of b that needs them, then
// dispatches r. It runs in its own goroutine; b.fetching is set. While b's
// limits are unknown it takes the probe lock instead (startProbe). When b
// has limits to share, it writes them after the windows are seeded.
func (st *kvStore) lease(r *route, b *bucket) {
	e := st.e
	e.mu.Lock()
	if b.limits == "" {
		freed := b.probeFreed
		e.mu.Unlock()
		st.startProbe(r, b, freed)
		return
	}
	share, probed := b.share, !b.probeUntil.IsZero()
	b.share = ""
	var pause *pauseVal
	if share != "" {
		b.probeUntil, b.probeWait = time.Time{}, time.Time{}
		if now := e.now(); now.Before(b.pausedUntil) {
			// The answer that taught the limits may have been a 429: its
			// pause must be in KV before the limits wake the others.
			pause = &pauseVal{Until: b.pausedUntil.UnixMilli(), Type: b.pauseType}
		}
	}
	demand := b.hi.Len() + b.lo.Len()
	if b == r.app {
		demand = 0
		for _, m := range r.order {
			demand += m.hi.Len() + m.lo.Len()
		}
	}
	want := min(max(demand, 1), st.o.MaxLease)
	var jobs []*leaseJob
	for _, w := range b.windows {
		if !w.start.IsZero() && (w.leased > 0 || w.count >= w.limit) {
			continue
		}
		carry, rolled := 0, 0
		if w.start.IsZero() {
			// The window rolled: this process's requests in flight then
			// may land in Riot's next window, so they count in the new one
			// (kvStore.rolled), unless a whole window has passed since.
			// seedIn already holds the pre-limit ones.
			if e.now().Sub(w.rolledAt) < w.length {
				rolled = w.rollCarry
			}
			carry = max(0, max(rolled, b.inflight)-w.seedIn)
		}
		var shareMargin time.Duration
		if b.rtt.n > 0 {
			shareMargin = b.rtt.margin(0)
		}
		jobs = append(jobs, &leaseJob{w: w, key: st.base(b, "win") + "." + strconv.FormatInt(int64(w.length/time.Second), 10),
			length: w.length, limit: w.limit, want: want, seedIn: w.seedIn, seedCount: w.seedCount, carry: carry, rolled: rolled,
			margin: e.margin(b, w), shareMargin: shareMargin, offErr: time.Duration(st.offErr.Load()), localStart: w.start, inflight: b.inflight, epoch: w.epoch,
			allow: e.allowance(w, e.now())})
	}
	e.mu.Unlock()

	for _, j := range jobs {
		var v winVal
		v, j.got, j.err = st.leaseOne(j)
		j.start, j.g, j.kvMargin, j.riotEnd, j.ep = time.UnixMilli(v.Start), v.Granted, v.margin(), v.riotEnd(), v.Ep
	}
	if share != "" {
		st.shareLimits(b, share, probed, pause)
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	failed := false
	for _, j := range jobs {
		w := j.w
		if j.err != nil {
			failed = true
			if !b.storeDown {
				e.o.Logger.Warn("ratelimit: kv unreachable; granting only tokens already leased until it answers", "route", b.route, "bucket", b.name(), "err", j.err)
			}
			continue
		}
		if w.seedIn == j.seedIn {
			w.seedIn = 0
		}
		if w.seedCount == j.seedCount {
			w.seedCount = 0
		}
		if w.rollCarry == j.rolled {
			w.rollCarry = 0
		}
		if !w.start.Equal(j.start) {
			// Tokens held unsent under the old start are dropped; the
			// window's epoch, if it is the same, still counts them.
			if j.ep == w.epoch {
				st.addSettled(b, w, max(w.leased, 0), now)
			}
			w.start, w.leased, w.riotEnd = j.start, 0, time.Time{}
		}
		if j.ep != w.epoch {
			// A new epoch: the old one's settlements have nowhere to go.
			w.epoch, w.pend = j.ep, settleVal{}
		}
		if j.riotEnd.After(w.riotEnd) {
			// Riot's end as another process proved it; the stored value
			// holds the writer's clock error already (engine.end adds ours).
			w.riotEnd = j.riotEnd
		}
		w.leased += j.got
		w.count = max(w.count, j.g)
		w.kvMargin = j.kvMargin
	}
	st.storeResult(b, failed, now)
	b.fetching = false
	if b.share != "" {
		st.fetch(r, b) // learned while this lease ran
	}
	e.dispatch(r, now)
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
		size := func(rem int) int { return max(0, min(j.want, rem, max(1, rem/st.o.LeaseDivisor))) }
		ent, err := st.kv.Get(ctx, j.key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			g0 := max(j.seedIn+j.carry, j.seedCount)
			k := size(j.limit - g0)
			next := winVal{Start: now.UnixMilli(), Limit: j.limit, Granted: g0 + k, Margin: ms, Ep: now.UnixMilli()}
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
		if err := json.Unmarshal(ent.Value(), &cur); err != nil {
			cur = winVal{} // garbage: start a new window
		}
		var next winVal
		var k int
		if cur.Start == 0 || !now.Before(cur.end(j.length, j.margin, j.offErr)) {
			g0 := max(j.seedIn+j.carry, j.seedCount)
			k = size(j.limit - g0)
			next = winVal{Start: now.UnixMilli(), Limit: j.limit, Granted: g0 + k, Margin: ms, Ep: now.UnixMilli()}
		} else {
			add := j.seedIn
			// This process's requests in flight are counted in the window's
			// epoch they were leased from; a window of that epoch that a
			// count-1 reply rolled (alignKV) kept them, unless settled.
			if cur.epoch() != j.epoch {
				add += j.carry
				if !j.localStart.IsZero() && cur.Start > j.localStart.UnixMilli() {
					add += j.inflight
				}
			}
			raised := max(cur.Granted+add, j.seedCount)
			k = size(j.limit - raised)
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
	if !b.fetching {
		b.fetching = true
		go st.lease(r, b)
	}
}
