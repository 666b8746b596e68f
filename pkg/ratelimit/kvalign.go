// Corrections of KV windows from Riot's answers: -Count headers above
// KV's count (reconcile), count-1 replies (alignKV) and late first sends
// (opening).

package ratelimit

import (
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// reconcile raises a window's global count in KV to c, a -Count header
// above what KV knows (another user of the key, drift, or requests sent
// before the limits were known). counted is the window start the request
// was counted in (zero if none: then the current window is raised, or a
// new one started at at, the request's grant time).
func (st *kvStore) reconcile(b *bucket, w *window, counted, at time.Time, c int) {
	key := st.winKey(b, w)
	length, limit, margin := w.length, w.limit, st.e.margin(b, w)
	_, offErr := st.clock()
	go func() {
		ctx, cancel := st.ctx()
		defer cancel()
		for range 10 {
			now := st.e.now()
			ent, err := st.kv.Get(ctx, key)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				if !counted.IsZero() {
					return
				}
				v, _ := json.Marshal(winVal{Start: at.UnixMilli(), Limit: limit, Granted: c, Carried: c})
				if _, err := st.kv.Create(ctx, key, v); errors.Is(err, jetstream.ErrKeyExists) {
					continue
				}
				return
			}
			if err != nil {
				return
			}
			var cur winVal
			_ = json.Unmarshal(ent.Value(), &cur)
			next := cur
			switch {
			case cur.Start == 0 || !now.Before(cur.end(length, margin, offErr)):
				if !counted.IsZero() {
					return // that window is over
				}
				next = winVal{Start: at.UnixMilli(), Limit: limit, Granted: c, Carried: c}
			case !counted.IsZero() && cur.Start != counted.UnixMilli():
				return
			case cur.Granted >= c:
				return
			default:
				// Riot counts requests no lease of this window holds:
				// carried in, never settled here (winVal.Carried).
				next.Granted, next.Carried = c, cur.Carried+c-cur.Granted
			}
			v, _ := json.Marshal(next)
			if _, err := st.kv.Update(ctx, key, v, ent.Revision()); !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
				return
			}
		}
	}()
}

// alignKV applies a count-1 reply for the request marked m to the KV window
// of w's length (see engine.alignToRiot): if KV still holds the window m's
// request was counted in and it started before floor, it is rolled to
// floor keeping every token not settled before m's grant (winVal.Done),
// or, if its length has not passed, moved to floor keeping its count; if
// it holds a later window started before floor, that window moves to
// floor with its count. A window starting at or after floor is left
// alone.
func (st *kvStore) alignKV(b *bucket, w *window, m mark, floor, now time.Time) {
	roll := now.Sub(m.start) >= w.length // as engine.alignToRiot
	sec := strconv.FormatInt(int64(w.length/time.Second), 10)
	key := st.winKey(b, w)
	counted, fl := m.start.UnixMilli(), floor.UnixMilli()
	// Riot's window began with m's request, by now: it ends by now +
	// length (plus this process's clock error), rounded up to the ms.
	_, offErr := st.clock()
	riotEnd := now.Add(w.length + offErr + time.Millisecond - 1).UnixMilli()
	granted := m.at.Add(-offErr).UnixMilli() // m's grant, at the earliest
	go func() {
		ctx, cancel := st.ctx()
		defer cancel()
		moved := true
		wrote, _ := st.casWin(ctx, key, func(cur *winVal) bool {
			cur.Ep = cur.epoch() // kept when the start moves
			moved = true
			switch {
			case cur.Start == counted && !roll && (cur.End < riotEnd || cur.Start < fl):
				// m's window, young: record Riot's end (engine.alignToRiot)
				// and move the start to floor if it is before.
				cur.End = max(cur.End, riotEnd)
				cur.Start, moved = max(cur.Start, fl), cur.Start < fl
			case cur.Start >= fl:
				return false
			case cur.Start == counted && roll:
				// Riot's window began when m's request arrived, after its
				// grant: a token settled before that grant (answered, or
				// dropped unsent) was not in it; every other token of the
				// window may be, whichever process leased it, and stays
				// counted, including those leased but not sent yet.
				settled, later := cur.unsettled(granted)
				cur.Start, cur.Granted, cur.End, cur.Done = fl, max(0, cur.Granted-settled), 0, later
				cur.Carried = min(cur.Carried, cur.Granted)
			case cur.Start > counted:
				cur.Start, cur.End = fl, 0
			default:
				return false
			}
			return true
		})
		if wrote && moved {
			// Tell the others: a process whose view of the window is full
			// would otherwise wait for its own end of it. (Only an end
			// recorded: the others learn it on their next lease.)
			if _, err := st.kv.Put(ctx, st.base(b, "align")+"."+sec, []byte(strconv.FormatInt(fl, 10))); err != nil {
				st.e.o.Logger.Debug("ratelimit: announce realigned window", "key", key, "err", err)
			}
		}
	}()
}

// errMovedOn: the KV window a grant came from has been replaced.
var errMovedOn = errors.New("ratelimit: the KV window of the grant has moved on")

// opening moves the start of the KV window that m's request was counted
// in to at least start, synchronously (permit.Send): the request may open
// Riot's window as late as that, and no process may start the next
// window before this one's end counted from there. A window whose Open
// is at or before start is left alone: Riot's window is open, this
// request lands in it. It returns the KV window's start after the
// change. The window must still be m's (its epoch, not ended);
// otherwise, or when KV fails, the request is not sent.
func (st *kvStore) opening(b *bucket, w *window, m mark, start time.Time) (time.Time, error) {
	st.e.mu.Lock()
	key := st.winKey(b, w)
	st.e.mu.Unlock()
	ctx, cancel := st.ctx()
	defer cancel()
	ms := start.UnixMilli()
	ok := false
	var from, got int64
	moved, err := st.casWin(ctx, key, func(cur *winVal) bool {
		ok = cur.epoch() == m.epoch || cur.Start == m.start.UnixMilli()
		from, got = cur.Start, cur.Start
		if !ok || cur.Start >= ms || (cur.Open != 0 && cur.Open <= ms) {
			// Riot's window is open already (winVal.Open): this request
			// lands in it, it cannot open a later one.
			return false
		}
		cur.Ep, cur.Start, got = cur.epoch(), ms, ms
		return true
	})
	if moved {
		st.e.o.Logger.Debug("ratelimit: late first send moves the window", "key", key, "by_ms", ms-from)
	}
	if err != nil {
		return time.Time{}, err
	}
	if !ok {
		return time.Time{}, errMovedOn
	}
	return time.UnixMilli(got), nil
}

// sentOnTime records in the KV window of w that Riot's window is open
// (winVal.Open): the request marked m, this process's first in w, was sent
// on time at at. Asynchronous and best effort: until it lands, another
// process's late first send still moves the window (the safe side).
func (st *kvStore) sentOnTime(b *bucket, w *window, m mark, at time.Time) {
	if m.epoch == 0 {
		return
	}
	key := st.winKey(b, w)
	ms := at.UnixMilli()
	go func() {
		ctx, cancel := st.ctx()
		defer cancel()
		_, err := st.casWin(ctx, key, func(cur *winVal) bool {
			if cur.epoch() != m.epoch || (cur.Open != 0 && cur.Open <= ms) {
				return false
			}
			cur.Ep, cur.Open = m.epoch, ms
			return true
		})
		if err != nil {
			st.e.o.Logger.Debug("ratelimit: record open window", "key", key, "err", err)
		}
	}()
}
