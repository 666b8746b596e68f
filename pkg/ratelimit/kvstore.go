package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

type kvStore struct {
	e  *engine
	kv jetstream.KeyValue
	o  SharedOptions
	// offset is the NATS server's clock minus Options.Now, in ns
	// (syncClock); samples are the latest measurements.
	offset  atomic.Int64
	offErr  atomic.Int64 // the offset's error bound: half the chosen sample's round trip, ns
	samples []clockSample
	// afterProbeRead, when set (tests only), runs in startProbe between the
	// KV read and applying its result, to order a concurrent release there.
	afterProbeRead func()
}

// kvWindow is what kvStore keeps of one window beside the engine's view:
// the tokens this process leased from the KV window and what it still owes
// to it. Only kvStore reads or writes it (callers hold mu).
type kvWindow struct {
	leased int // tokens this process holds in the window starting at window.start
	seedIn int // this process's requests sent before the limits were known; added to KV by the next lease
	// seedCount is the -Count Riot reported for such a request: the next
	// lease raises the KV window to at least this, so a budget another
	// user of the key already spent is not leased again.
	seedCount int
	// margin is the margin stored with the KV window: the largest
	// measured margin of the processes that leased from it (engine.margin).
	margin time.Duration
	// rollCarry is how many requests of the budget were in flight when
	// the window rolled at rolledAt: the next lease adds them to the new
	// KV window (kvStore.rolled).
	rollCarry int
	rolledAt  time.Time
	// epoch names the chain of KV windows this process's tokens in the
	// window were leased from (winVal.Ep); pend counts those of its
	// requests answered (or tokens dropped unsent) not yet written to the
	// KV window's settled list (kvStore.settle).
	epoch int64
	pend  settleVal
}

// kvBucket is what kvStore keeps of one budget: its lease, settlement and
// probe state. Only kvStore reads or writes it (callers hold mu).
type kvBucket struct {
	fetching bool // a lease or probe is under way (kvStore.fetch)
	settling bool // a settlement write is under way (kvStore.settle)
	// storeRetry: the KV store failed; no lease or probe is tried before
	// this time. storeDown marks the outage for logging.
	storeRetry time.Time
	storeDown  bool
	// While no process knows the limits: probeUntil is the end of this
	// process's probe lock (it may send InitialInFlight requests);
	// probeWait the end of another process's lock (wait for its limits).
	probeUntil, probeWait time.Time
	// probeFreed counts the releases of another process's probe lock seen
	// in the watch. A probe that read the lock as held before a release
	// must not wait for it after (kvStore.startProbe compares it).
	probeFreed uint64
	// share holds learned limits to write to KV after the next lease has
	// seeded the KV windows with the requests sent before they were known.
	share string
}

var badKeyChars = regexp.MustCompile(`[^-_=.a-zA-Z0-9]`)

// kvToken makes a route or method ID safe inside a KV key.
func kvToken(s string) string {
	s = badKeyChars.ReplaceAllString(s, "_")
	for strings.Contains(s, "..") {
		s = strings.ReplaceAll(s, "..", "._")
	}
	s = strings.Trim(s, ".")
	if s == "" {
		return "_"
	}
	return s
}

// winKey is the KV key of b's window w: <base>.<length in s>. Callers hold mu.
func (st *kvStore) winKey(b *bucket, w *window) string {
	return st.base(b, "win") + "." + strconv.FormatInt(int64(w.length/time.Second), 10)
}

func (st *kvStore) base(b *bucket, kind string) string {
	k := st.o.KeyID + "." + kvToken(b.route) + "." + kind + "."
	if b.method == "" {
		return k + "app"
	}
	return k + "m." + kvToken(b.method)
}

type winVal struct {
	Start   int64 `json:"s"` // window start, Unix ms
	Limit   int   `json:"l"`
	Granted int   `json:"g"` // tokens handed out (leased) in this window by all processes
	// Margin is the largest measured margin (ms) of the processes that
	// leased from the window; every process judges the window's end as
	// start + length + max(its own margin, Margin).
	Margin int64 `json:"m,omitempty"`
	// End (Unix ms, 0 if unknown) is the latest end of Riot's window that
	// a count-1 reply proved (engine.alignToRiot), plus the error bound of
	// the writer's clock offset: the window may roll then, if that is
	// earlier than start + length + margin.
	End int64 `json:"e,omitempty"`
	// Ep is the window's epoch: its Start when it was created. A count-1
	// reply that moves or rolls it (alignKV) keeps Ep: the window's count
	// still holds tokens leased under the earlier start.
	Ep int64 `json:"ep,omitempty"`
	// Done lists tokens of this window (counted in Granted) that are
	// settled: their requests were answered, or the tokens were dropped
	// unsent, at or before T. A roll (alignKV) keeps in the new window
	// every token not settled before the request that began Riot's window
	// was granted: only those can be in Riot's window.
	Done []settleVal `json:"d,omitempty"`
	// Prev is the epoch of the window this one replaced when that one
	// was recent enough for its requests to still be in flight
	// (winVal.carryOut); 0 if none. A process whose tokens were leased
	// from epoch Prev finds them counted here already (leaseOne).
	Prev int64 `json:"pe,omitempty"`
	// Carried is how many of Granted are not this window's own leases:
	// requests of earlier windows carried in (the predecessor's unsettled
	// tokens, a process's requests in flight at its roll, requests sent
	// before the limits were known) and raises to Riot's count. They are
	// never settled here, and are not carried on again.
	Carried int `json:"c,omitempty"`
	// Open (Unix ms, 0 if unknown) is when Riot's window was known to be
	// open: a process sent its first request of the window on time (within
	// half its margin of Start), or the window was started by a lease that
	// counted requests already answered. A later late first send of
	// another process then cannot be the one that opens Riot's window, so
	// it does not move Start (kvStore.opening).
	Open int64 `json:"o,omitempty"`
}

// carryOut is how many of v's tokens a window starting at now after v
// must count (KV's side of the carry): every token granted in v whose
// request may reach Riot in Riot's next window, whichever process leased
// it. Those are the tokens not settled (winVal.Done) by the earliest time
// Riot's window may have ended, Start + length (or End, if a count-1
// reply proved an earlier end) less margin: a request answered after that
// may have arrived after Riot's window reset, the straggler that opens
// Riot's next window. Tokens v carried in itself are not carried on. ok
// is false, and nothing is carried, once a whole window length has passed
// since end, v's end as the caller judges it (winVal.end): its requests
// are answered, or unanswered past any window they could share with the
// new one's.
func (v winVal) carryOut(now, end time.Time, length, margin time.Duration) (n int, ok bool) {
	if !now.Before(end.Add(length)) {
		return 0, false
	}
	riotEnd := time.UnixMilli(v.Start).Add(length)
	if e := v.riotEnd(); !e.IsZero() && e.Before(riotEnd) {
		riotEnd = e
	}
	settled, _ := v.unsettled(riotEnd.Add(-max(margin, v.margin())).UnixMilli())
	return max(0, v.Granted-v.Carried-settled), true
}

func (v winVal) epoch() int64 {
	if v.Ep != 0 {
		return v.Ep
	}
	return v.Start
}

// end is when the window may roll for a process whose margin is margin
// and whose clock offset's error bound is offErr.
func (v winVal) end(length, margin, offErr time.Duration) time.Time {
	end := time.UnixMilli(v.Start).Add(length + max(margin, time.Duration(v.Margin)*time.Millisecond))
	if v.End > 0 {
		if c := time.UnixMilli(v.End).Add(offErr); c.Before(end) {
			end = c
		}
	}
	return end
}

type pauseVal struct {
	Until int64  `json:"u"` // Unix ms
	Type  string `json:"t"`
}

func (st *kvStore) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), st.o.KVTimeout)
}

// shareLimits writes learned limits for the other processes (after pause,
// if any: a 429 that taught them) and, if this process held the probe
// lock, releases it. Called without e.mu.
func (st *kvStore) shareLimits(b *bucket, canon string, probed bool, pause *pauseVal) {
	key := st.base(b, "limits")
	ctx, cancel := st.ctx()
	defer cancel()
	if pause != nil {
		st.writePause(ctx, b, *pause)
	}
	if _, err := st.kv.Put(ctx, key, []byte(canon)); err != nil {
		st.e.o.Logger.Warn("ratelimit: share limits", "key", key, "err", err)
	}
	if probed {
		st.deleteProbe(ctx, b)
	}
}

func (st *kvStore) putPause(b *bucket, until time.Time, typ string) {
	pv := pauseVal{Until: until.UnixMilli(), Type: typ}
	go func() {
		ctx, cancel := st.ctx()
		defer cancel()
		st.writePause(ctx, b, pv)
	}()
}

// writePause writes b's pause to KV; failures are logged (the pause still
// applies locally).
func (st *kvStore) writePause(ctx context.Context, b *bucket, pv pauseVal) {
	key := st.base(b, "pause")
	v, _ := json.Marshal(pv)
	if _, err := st.kv.Put(ctx, key, v); err != nil {
		st.e.o.Logger.Warn("ratelimit: share pause", "key", key, "err", err)
	}
}

// casWin reads the KV window at key, lets edit change it (false: leave it
// as it is) and writes it back with compare-and-set, again on a conflict,
// up to 10 times. It reports whether it wrote; err is a KV error or too
// much contention.
func (st *kvStore) casWin(ctx context.Context, key string, edit func(*winVal) bool) (bool, error) {
	for range 10 {
		ent, err := st.kv.Get(ctx, key)
		if err != nil {
			return false, err
		}
		var cur winVal
		if json.Unmarshal(ent.Value(), &cur) != nil || !edit(&cur) {
			return false, nil
		}
		v, _ := json.Marshal(cur)
		_, err = st.kv.Update(ctx, key, v, ent.Revision())
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return err == nil, err
		}
	}
	return false, errors.New("ratelimit: too much CAS contention on " + key)
}

// storeResult records whether b's last KV operation failed: after a
// failure b waits StoreRetry before the next (engine.check blocks it
// meanwhile). Callers hold mu.
func (st *kvStore) storeResult(b *bucket, failed bool, now time.Time) {
	if failed {
		b.kv.storeDown, b.kv.storeRetry = true, now.Add(st.o.StoreRetry)
		return
	}
	if b.kv.storeDown {
		st.e.o.Logger.Info("ratelimit: kv answers again", "route", b.route, "bucket", b.name())
	}
	b.kv.storeDown, b.kv.storeRetry = false, time.Time{}
}

func (v winVal) margin() time.Duration { return time.Duration(v.Margin) * time.Millisecond }

// riotEnd is End as a time (zero if none).
func (v winVal) riotEnd() time.Time {
	if v.End == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v.End)
}

// held is how many tokens this process holds unsent in w: leased from
// KV and not granted yet (0 for Local).
func (w *window) held() int { return max(w.kv.leased, 0) }

// The store interface, as kvStore implements it (its KV operations are
// above and in lease.go, probe.go, settle.go and kvalign.go).

func (st *kvStore) clock() (time.Duration, time.Duration) {
	return time.Duration(st.offset.Load()), time.Duration(st.offErr.Load())
}

// reserve grants from tokens this process leased; a window spent in KV
// blocks until its end; otherwise a lease is needed, unless the store
// failed lately: then only leased tokens (counted in KV) are spent (fail
// closed) until StoreRetry has passed.
func (st *kvStore) reserve(b *bucket, w *window, end, now time.Time) (int, time.Time) {
	switch {
	case !w.start.IsZero() && w.kv.leased > 0:
		return okGrant, time.Time{}
	case !w.start.IsZero() && w.count >= w.limit:
		return blocked, end
	case now.Before(b.kv.storeRetry):
		return blocked, b.kv.storeRetry
	}
	return needLease, time.Time{}
}

// observe applies an event to the KV side of the budget (kvWindow,
// kvBucket) and starts the KV writes it needs.
func (st *kvStore) observe(ev event) {
	switch ev.kind {
	case eventSpent:
		// count, the KV view, already includes the leased tokens; a
		// cancelled one returns to this process's lease.
		ev.w.kv.leased -= ev.n
	case eventRolled:
		st.rolled(ev.b, ev.w, ev.at)
	case eventSent:
		st.sentOnTime(ev.b, ev.w, ev.m, ev.at)
	case eventClosed:
		// Tokens held unsent can no longer be sent: settled now, before
		// the window's end, so that the process starting the next KV
		// window does not carry them as if in flight (winVal.carryOut).
		if n := ev.w.held(); n > 0 {
			ev.w.kv.leased = 0
			st.addSettled(ev.b, ev.w, n, ev.at)
		}
	case eventAnswered:
		st.answered(ev.b, ev.w, ev.m, ev.at)
	case eventOpened:
		// The next lease adds the requests sent before the limits were
		// known to the KV window (seedIn).
		ev.w.kv.seedIn = ev.b.pre
	case eventLearned:
		st.learned(ev.r, ev.b, ev.canon)
	case eventCounted:
		st.counted(ev.b, ev.w, ev.m, ev.p, ev.n, ev.marked)
	case eventPaused:
		st.putPause(ev.b, ev.at, ev.typ)
	case eventIdle:
		st.idle(ev.r)
	}
}

// rolled: the tokens this process held unsent in w are dropped and
// settled (kvStore.settle): the KV window's chain may go on (realigned by
// a count-1 reply) and counts them until then. The next lease adds this
// process's requests in flight at the rollover to the KV window
// (leaseJob.carry). They are counted now, not when the lease runs: one
// that is answered in between may still have reached Riot after its
// window reset (the stragglers of a loaded host).
func (st *kvStore) rolled(b *bucket, w *window, now time.Time) {
	dropped := w.held()
	w.kv.leased = 0
	w.kv.rollCarry, w.kv.rolledAt = b.inflight, now
	st.addSettled(b, w, dropped, now)
}

// answered settles the request in the KV window chain it was leased from
// (kvStore.settle), if that is still the chain this process leases from
// and the request was not in flight when w rolled here: such a request
// may have reached Riot after its window reset, so it stays unsettled,
// and the process that starts the next KV window carries it
// (winVal.carryOut) as this process's own next lease would (leaseJob.carry).
func (st *kvStore) answered(b *bucket, w *window, m mark, now time.Time) {
	if m.epoch != 0 && m.epoch == w.kv.epoch && !m.at.Before(w.kv.rolledAt) {
		st.addSettled(b, w, 1, now)
	}
}

// learned: the next lease first adds the requests sent before the limits
// were known to the KV windows, then writes the limits, which wakes the
// other processes.
func (st *kvStore) learned(r *route, b *bucket, canon string) {
	b.kv.share = canon
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
		w.kv.seedCount = max(w.kv.seedCount, c)
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
