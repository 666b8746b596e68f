package ratelimit

import (
	"time"
)

// settleVal is a batch of N settled tokens, all settled by T (Unix ms on
// the server clock, rounded up, plus the writer's clock error bound).
type settleVal struct {
	T int64 `json:"t"`
	N int   `json:"n"`
}

// maxDone bounds winVal.Done: beyond it the two oldest batches merge into
// one with the later time (later is safe: it settles fewer at a roll).
const maxDone = 16

// addSettled counts n of this process's tokens in w (epoch w.kv.epoch) as
// settled at now and starts writing them to KV. Callers hold mu.
func (st *kvStore) addSettled(b *bucket, w *window, n int, now time.Time) {
	if n <= 0 || w.kv.epoch == 0 {
		return
	}
	_, offErr := st.clock()
	t := now.Add(offErr + time.Millisecond - 1).UnixMilli()
	w.kv.pend.N += n
	w.kv.pend.T = max(w.kv.pend.T, t)
	if !b.kv.settling {
		b.kv.settling = true
		go st.settle(b)
	}
}

// settleBatch is how long settle waits to gather answers into one write
// per window: a settlement written late only makes a roll in that time
// keep a token it could have freed.
const settleBatch = 5 * time.Millisecond

// settleJob is one settlement write: sv to the KV window at key, if it
// is still of epoch epoch (the one the tokens were leased from).
type settleJob struct {
	key     string
	epoch   int64
	settled settleVal
}

// settle writes b's pending settlements (kvWindow.pend) to their KV windows
// until none is left; b.kv.settling is set. A write that fails, or finds the
// KV window in another epoch, drops them: an unsettled token only makes a
// later roll keep more (the safe side), and a new epoch starts from zero.
func (st *kvStore) settle(b *bucket) {
	for {
		time.Sleep(settleBatch) // gather the answers of one burst into one write
		st.e.mu.Lock()
		var jobs []settleJob
		for _, w := range b.windows {
			if w.kv.pend.N > 0 {
				jobs = append(jobs, settleJob{st.winKey(b, w), w.kv.epoch, w.kv.pend})
				w.kv.pend = settleVal{}
			}
		}
		if len(jobs) == 0 {
			b.kv.settling = false
			st.e.mu.Unlock()
			return
		}
		st.e.mu.Unlock()
		for _, j := range jobs {
			st.settleOne(j.key, j.epoch, j.settled)
		}
	}
}

// settleOne appends sv to the settled list of the KV window at key if it
// is still of epoch epoch, merging the two oldest batches beyond maxDone.
func (st *kvStore) settleOne(key string, epoch int64, sv settleVal) {
	ctx, cancel := st.ctx()
	defer cancel()
	_, err := st.casWin(ctx, key, func(cur *winVal) bool {
		if cur.epoch() != epoch {
			return false
		}
		cur.Ep = epoch
		cur.Done = append(cur.Done, sv)
		if len(cur.Done) > maxDone {
			a, b := cur.Done[0], cur.Done[1]
			cur.Done = append([]settleVal{{T: max(a.T, b.T), N: a.N + b.N}}, cur.Done[2:]...)
		}
		return true
	})
	if err != nil {
		st.e.o.Logger.Debug("ratelimit: settle tokens", "key", key, "err", err)
	}
}

// unsettled splits v.Done at t (Unix ms): it returns how many tokens were
// settled at or before t and the batches settled later.
func (v winVal) unsettled(t int64) (int, []settleVal) {
	n := 0
	var later []settleVal
	for _, d := range v.Done {
		if d.T <= t {
			n += d.N
		} else {
			later = append(later, d)
		}
	}
	return n, later
}

// release settles, synchronously, every token this process holds unsent
// and every settlement still pending (Shared.Close): a process that stops
// returns its leases, so the next KV window does not carry them as
// requests in flight (winVal.carryOut). Write failures are logged by
// settleOne; the tokens are then carried once, as a crashed process's.
func (st *kvStore) release() {
	var jobs []settleJob
	st.e.mu.Lock()
	now := st.e.now()
	_, offErr := st.clock()
	t := now.Add(offErr + time.Millisecond - 1).UnixMilli()
	for _, r := range st.e.routes {
		for _, b := range append([]*bucket{r.app}, r.order...) {
			for _, w := range b.windows {
				sv := w.kv.pend
				if n := w.held(); n > 0 {
					w.kv.leased = 0
					sv.N += n
					sv.T = max(sv.T, t)
				}
				w.kv.pend = settleVal{}
				if sv.N > 0 && w.kv.epoch != 0 {
					jobs = append(jobs, settleJob{st.winKey(b, w), w.kv.epoch, sv})
				}
			}
		}
	}
	st.e.mu.Unlock()
	for _, j := range jobs {
		st.settleOne(j.key, j.epoch, j.settled)
	}
}
