package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// releaseProbe deletes b's probe lock in KV (asynchronously); the other
// processes see the delete in their watch and may probe at once.
func (st *kvStore) releaseProbe(b *bucket) {
	go func() {
		ctx, cancel := st.ctx()
		defer cancel()
		st.deleteProbe(ctx, b)
	}()
}

// deleteProbe deletes b's probe lock in KV.
func (st *kvStore) deleteProbe(ctx context.Context, b *bucket) {
	key := st.base(b, "probe")
	if err := st.kv.Delete(ctx, key); err != nil {
		st.e.o.Logger.Debug("ratelimit: release probe lock", "key", key, "err", err)
	}
}

type probeVal struct {
	Proc  string `json:"p"`
	Until int64  `json:"u"` // Unix ms
}

// probeResult is what kvStore.probe found: the limits another process
// shared, or the probe lock (held by us until until, or by another
// process until until), or a KV error.
type probeResult struct {
	limits []Limit
	held   bool
	until  time.Time
	err    error
}

// probe is the conservative start of a budget whose limits this process
// does not know. If another process shared them (<kid>.<route>.limits.*) it
// returns them; otherwise it takes the probe lock <kid>.<route>.probe.* for
// ProbeTTL, or reports who holds it until when. Without the lock, N
// processes starting together would each send a first request that no KV
// window counts (up to N−1 over the limit in the first window).
func (st *kvStore) probe(b *bucket) probeResult {
	ctx, cancel := st.ctx()
	defer cancel()
	ent, err := st.kv.Get(ctx, st.base(b, "limits"))
	if err == nil {
		if ls := ParseLimits(string(ent.Value())); len(ls) > 0 {
			return probeResult{limits: ls}
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return probeResult{err: err}
	}
	key := st.base(b, "probe")
	for range 10 {
		now := st.e.now()
		until := time.UnixMilli(now.Add(st.o.ProbeTTL).UnixMilli())
		v, _ := json.Marshal(probeVal{Proc: st.o.ProcID, Until: until.UnixMilli()})
		ent, err := st.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			_, err = st.kv.Create(ctx, key, v)
			if err == nil {
				return probeResult{held: true, until: until}
			}
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue
			}
			return probeResult{err: err}
		}
		if err != nil {
			return probeResult{err: err}
		}
		var cur probeVal
		if json.Unmarshal(ent.Value(), &cur) == nil && cur.Proc != st.o.ProcID && now.Before(time.UnixMilli(cur.Until)) {
			return probeResult{until: time.UnixMilli(cur.Until)}
		}
		// Ours, expired (its holder died or never got an answer) or garbage.
		_, err = st.kv.Update(ctx, key, v, ent.Revision())
		if err == nil {
			return probeResult{held: true, until: until}
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return probeResult{err: err}
		}
	}
	return probeResult{err: errors.New("ratelimit: probe lock: too much CAS contention")}
}

// startProbe runs probe for b and applies its result. It runs in its own
// goroutine; b.kv.fetching is set and e.mu is not held. freed is b.kv.probeFreed
// before the probe read KV: if the watch has seen the lock released since,
// a "held by another" answer is stale, and b probes again at once instead
// of waiting out a lock that no longer exists.
func (st *kvStore) startProbe(r *route, b *bucket, freed uint64) {
	e := st.e
	res := st.probe(b)
	if st.afterProbeRead != nil {
		st.afterProbeRead()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	switch {
	case b.limits != "": // learned meanwhile (watch or own answer)
	case len(res.limits) > 0:
		e.setLimits(b, res.limits, now)
	case res.err != nil:
		// KV unreachable: fail closed (no probe), try again later.
		if !b.kv.storeDown {
			e.o.Logger.Warn("ratelimit: kv unreachable; not probing unknown limits until it answers", "route", b.route, "bucket", b.name(), "err", res.err)
		}
	case res.held:
		b.kv.probeUntil = res.until
	case b.kv.probeFreed == freed:
		b.kv.probeWait = res.until
	}
	st.storeResult(b, res.err != nil, now)
	b.kv.fetching = false
	e.dispatch(r, now)
}

// unknown: one process at a time probes an unknown budget (kvStore.probe),
// so N processes starting together send one request before the limits are
// known, not N; none probes without the store (fail closed).
func (st *kvStore) unknown(b *bucket, now time.Time) (int, time.Time) {
	switch {
	case now.Before(b.kv.probeUntil):
		return okGrant, time.Time{} // this process holds the probe lock
	case now.Before(b.kv.storeRetry):
		return blocked, b.kv.storeRetry
	case now.Before(b.kv.probeWait):
		return blocked, b.kv.probeWait
	}
	return needLease, time.Time{}
}

// idle gives up this process's probe locks on r's budgets whose limits
// are still unknown when it has nothing in flight and nobody waiting
// there (its callers gave up, or the probe got no rate-limit headers):
// another process may probe at once instead of waiting for ProbeTTL.
func (st *kvStore) idle(r *route) {
	release := func(b *bucket) {
		if b.limits == "" && !b.kv.probeUntil.IsZero() && b.inflight == 0 && r.demand(b) == 0 {
			b.kv.probeUntil = time.Time{}
			st.releaseProbe(b)
		}
	}
	release(r.app) // on every answer: no allocation here
	for _, b := range r.order {
		release(b)
	}
}
