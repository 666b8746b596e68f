package ratelimit

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/riftflow/riftflow/pkg/riot"
)

// Options configures a limiter. The zero value is usable; every field has
// a default.
type Options struct {
	// Now is the clock used for window and pause arithmetic (default
	// time.Now). Waits still sleep on real timers for the computed duration.
	Now func() time.Time
	// MaxWait bounds how long Acquire blocks (default 30 s). A longer wait
	// gives a *riot.Error of riot.KindRateLimited with RetryAt.
	MaxWait time.Duration
	// InitialInFlight is how many requests may be in flight on a budget
	// whose limits are not yet known (before its first response carrying
	// rate-limit headers). Default 1.
	InitialInFlight int
	// InitialMargin is the time added to the end of every window of a
	// route until the first burst of grants on that route has been timed
	// (default 1 s). After that the margin is measured, not configured:
	// the smoothed shortest round trip (grant to answer) of each burst
	// plus four times its mean deviation, as TCP sizes its retransmission
	// timeout (RFC 6298), at least 1 ms and at most a quarter of the
	// window (engine.timed). It absorbs the time between our window's
	// start and Riot's (the first request's trip) and the jitter of later
	// trips (see docs/rate-limiting.md).
	InitialMargin time.Duration
	// SendAllowance is the least time kept between a grant's send
	// deadline and the end of the windows it was counted in (default
	// 100 ms, one CFS period of a Kubernetes CPU limit). Every grant
	// carries a deadline, the earliest start + length of the windows it
	// was counted in minus the allowance, and a request is written only if
	// Permit.Send, called immediately before it goes on the wire, finds
	// the deadline not passed (the riot.Client does). The allowance is
	// the larger of this and the longest time this process took, in the
	// last 30 to 60 s, from Send to the request written (Permit.Written),
	// at most a quarter of the window; no window grants during its last
	// allowance.
	SendAllowance time.Duration
	// RetryAfterMargin is added to a 429's Retry-After (default 500 ms).
	RetryAfterMargin time.Duration
	// BackoffStart and BackoffMax shape the exponential pause after a 429
	// with a service, server, unknown or missing X-Rate-Limit-Type, and
	// after a 429 without Retry-After (defaults 1 s and 60 s). The backoff
	// doubles per 429 and resets on the next non-429 answer.
	BackoffStart time.Duration
	BackoffMax   time.Duration
	// Logger receives pauses, learned limits and KV trouble (default
	// slog.Default()).
	Logger *slog.Logger
	// LimitShare, in (0, 1), makes the limiter use only this fraction of
	// every learned limit (at least 1 per window) and ignore the -Count
	// headers, which count every user of the key: a fixed per-process
	// split of a key's budget, the baseline that Shared is measured
	// against. 0 or 1: the whole limit.
	LimitShare float64
}

func (o *Options) defaults() {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxWait <= 0 {
		o.MaxWait = 30 * time.Second
	}
	if o.InitialInFlight <= 0 {
		o.InitialInFlight = 1
	}
	if o.InitialMargin <= 0 {
		o.InitialMargin = time.Second
	}
	if o.RetryAfterMargin <= 0 {
		o.RetryAfterMargin = 500 * time.Millisecond
	}
	if o.SendAllowance <= 0 {
		o.SendAllowance = 100 * time.Millisecond
	}
	if o.BackoffStart <= 0 {
		o.BackoffStart = time.Second
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = 60 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.LimitShare <= 0 || o.LimitShare > 1 {
		o.LimitShare = 1
	}
}

// rttStat smooths the round trips (grant to answer) of one route's calls
// as TCP does (RFC 6298): srtt += (r−srtt)/8, rttvar += (|srtt−r|−rttvar)/4.
type rttStat struct {
	srtt, rttvar time.Duration
	n            int
}

func (s *rttStat) add(r time.Duration) {
	r = max(r, 0)
	if s.n == 0 {
		s.srtt, s.rttvar = r, r/2
	} else {
		d := s.srtt - r
		if d < 0 {
			d = -d
		}
		s.rttvar += (d - s.rttvar) / 4
		s.srtt += (r - s.srtt) / 8
	}
	s.n++
}

// lagSpan is the period of sendLag's sliding maximum.
const lagSpan = 30 * time.Second

// sendLag is the longest time from Permit.Send to the request written
// (Permit.Written) seen in the current and the previous lagSpan.
type sendLag struct {
	cur, prev time.Duration
	since     time.Time
}

func (l *sendLag) roll(now time.Time) {
	switch d := now.Sub(l.since); {
	case d >= 2*lagSpan:
		l.cur, l.prev, l.since = 0, 0, now
	case d >= lagSpan:
		l.cur, l.prev, l.since = 0, l.cur, l.since.Add(lagSpan)
	}
}

func (l *sendLag) add(d time.Duration, now time.Time) {
	l.roll(now)
	l.cur = max(l.cur, d)
}

func (l *sendLag) max(now time.Time) time.Duration {
	l.roll(now)
	return max(l.cur, l.prev)
}

// allowance is the time before the end of w that a grant's send deadline
// keeps clear (Options.SendAllowance): the larger of the configured floor
// and the longest measured send lag, at most a quarter of the window.
// Callers hold mu.
func (e *engine) allowance(w *window, now time.Time) time.Duration {
	return min(max(e.o.SendAllowance, e.lag.max(now)), w.length/maxMarginDiv)
}

// closes is when w stops granting: start + length − allowance. A grant's
// send deadline is the earliest closes of the windows it was counted in.
// Callers hold mu.
func (e *engine) closes(w *window, now time.Time) time.Time {
	return w.start.Add(w.length - e.allowance(w, now))
}

// minMargin is the resolution of window starts in KV (Unix ms).
const minMargin = time.Millisecond

// margin is srtt + 4·rttvar (above nearly every round trip seen), or
// initial before any answer was timed.
func (s *rttStat) margin(initial time.Duration) time.Duration {
	if s.n == 0 {
		return initial
	}
	return max(s.srtt+4*s.rttvar, minMargin)
}

// now is the limiter's time: Options.Now, plus (Shared) the offset of the
// NATS server's clock from it, so every process judges windows and pauses
// on one clock (kvStore.syncClock).
func (e *engine) now() time.Time { return e.o.Now().Add(e.offset()) }

// offset is the store's clock minus Options.Now (0 for Local).
func (e *engine) offset() time.Duration {
	off, _ := e.st.clock()
	return off
}

// margin is the time added to the end of b's window w before it rolls:
// the route's measured margin, or the larger one stored with the KV window
// by the processes that leased from it (Shared), never more than a quarter
// of the window's length; plus (Shared) the error bound of this process's
// server-clock offset. Callers hold mu.
func (e *engine) margin(b *bucket, w *window) time.Duration {
	m := min(max(b.rtt.margin(e.o.InitialMargin), w.kvMargin), w.length/maxMarginDiv)
	// Shared: this process's estimate of the server clock may be off by up
	// to half a KV round trip.
	_, offErr := e.st.clock()
	return m + offErr
}

// end is when b's window w rolls: start + length + margin, or earlier if a
// count-1 reply proved that Riot's window ends sooner (w.riotEnd, plus the
// error bound of this process's clock offset). Callers hold mu.
func (e *engine) end(b *bucket, w *window) time.Time {
	start := w.start
	if w.lateStart.After(start) {
		start = w.lateStart // a late first send moved Riot's possible start (permit.Send)
	}
	end := start.Add(w.length + e.margin(b, w))
	if !w.riotEnd.IsZero() {
		_, offErr := e.st.clock()
		if c := w.riotEnd.Add(offErr); c.Before(end) {
			end = c
		}
	}
	return end
}

// maxMarginDiv caps the margin at a quarter of the window: one very slow
// answer must not idle a long window for long. A window opened later than
// that by Riot is still caught: the count-1 reply realigns ours
// (engine.alignToRiot). (A tenth let 1 s windows overshoot on a machine at
// load average 27, where round trips of hundreds of ms were measured.)
const maxMarginDiv = 4

// ErrKeyRejected is wrapped by the error Acquire returns once the key has
// been rejected (RejectKey, or a 401/403 seen by any replica).
var ErrKeyRejected = errors.New("ratelimit: API key rejected")

// window is one fixed window of a budget.
type window struct {
	length time.Duration
	limit  int
	start  time.Time // zero: not started
	count  int       // requests counted in this window (local: granted; shared: global as last seen)
	leased int       // shared only: tokens this process holds in the window starting at start
	seedIn int       // shared only: this process's requests sent before the limits were known; added to KV by the next lease
	// seedCount (shared only) is the -Count Riot reported for such a
	// request: the next lease raises the KV window to at least this, so a
	// budget another user of the key already spent is not leased again.
	seedCount int
	// kvMargin (shared only) is the margin stored with the KV window: the
	// largest measured margin of the processes that leased from it.
	kvMargin time.Duration
	// riotEnd, when set, is the latest end that a count-1 reply proved for
	// Riot's window that this one mirrors: that reply's answer time plus
	// the length (Riot's window began when the request arrived, before the
	// answer). The window may roll then instead of at start + length +
	// margin (engine.end). With Shared it is shared through KV ("e").
	riotEnd time.Time
	// rollCarry (shared only) is how many requests of the budget were in
	// flight when the window rolled at rolledAt: the next lease adds them
	// to the new KV window (kvStore.rolled).
	rollCarry int
	rolledAt  time.Time
	// epoch (shared only) names the chain of KV windows this process's
	// tokens in w were leased from (winVal.Ep); pend counts those of its
	// requests answered (or tokens dropped unsent) not yet written to the
	// KV window's settled list (kvStore.settle).
	epoch int64
	pend  settleVal
	// sentFor is the start of the window in which this process last sent
	// a request (permit.Send): equal to start once it has sent in this
	// window. lateStart is the later start that a late first send gave
	// the window (Riot's window may open only then); engine.end counts
	// from it.
	sentFor, lateStart time.Time
}

// bucket is one budget: the app budget of a route or one method's.
type bucket struct {
	route, method string   // method "" for the app budget
	rtt           *rttStat // the route's round trips
	windows       []*window
	limits        string // canonical learned limits, "" if not learned
	inflight      int
	pre           int // requests granted while the limits were unknown
	pausedUntil   time.Time
	pauseType     string
	backoff       time.Duration
	fetching      bool // shared: a lease request is under way
	settling      bool // shared: a settlement write is under way (kvStore.settle)
	// storeRetry (shared): the KV store failed; no lease or probe is
	// tried before this time. storeDown marks the outage for logging.
	storeRetry time.Time
	storeDown  bool
	// Shared, while no process knows the limits: probeUntil is the end of
	// this process's probe lock (it may send InitialInFlight requests);
	// probeWait the end of another process's lock (wait for its limits).
	probeUntil, probeWait time.Time
	// probeFreed counts the releases of another process's probe lock seen
	// in the watch. A probe that read the lock as held before a release
	// must not wait for it after (kvStore.startProbe compares it).
	probeFreed uint64
	// share holds learned limits to write to KV after the next lease has
	// seeded the KV windows with the requests sent before they were known.
	share string
	// hi and lo queue waiters (method buckets only): interactive, background.
	hi, lo list.List
}

func (b *bucket) name() string {
	if b.method == "" {
		return "app"
	}
	return b.method
}

type route struct {
	name    string
	app     *bucket
	methods map[string]*bucket
	order   []*bucket // methods in creation order, for round robin
	rr      int
	timer   *time.Timer
	timerAt time.Time
	rtt     rttStat // round trips of the route's calls, for the margin
	// The current burst (engine.timed): its grant time and its shortest
	// answered trip so far.
	burstAt   time.Time
	burstMin  time.Duration
	burstSeen bool
}

type waiter struct {
	c     riot.Call
	b     *bucket
	e     *list.Element
	ready chan struct{}
	p     *permit
}

// engine is the limiter of Local and Shared. What differs between them is
// where budgets are counted: st, a memStore for Local, a kvStore for Shared.
type engine struct {
	o        Options
	mu       sync.Mutex
	routes   map[string]*route
	st       store
	rejected int // HTTP status that rejected the key, 0 if none
	met      *metrics
	lag      sendLag // Send to written, for the send allowance
}

func newEngine(o Options) *engine {
	o.defaults()
	e := &engine{o: o, routes: map[string]*route{}}
	e.st = memStore{}
	e.met = newMetrics(e)
	return e
}

// Local is a riot.Limiter for one process. Use Shared when several
// processes use the same API key.
type Local struct{ e *engine }

// NewLocal returns a limiter whose budgets live in this process only.
func NewLocal(o Options) *Local { return &Local{newEngine(o)} }

// Acquire implements riot.Limiter.
func (l *Local) Acquire(ctx context.Context, c riot.Call) (riot.Permit, error) {
	return l.e.acquire(ctx, c)
}

// Snapshot returns the state of every budget, for status output.
func (l *Local) Snapshot() []BucketState { return l.e.snapshot() }

// RejectKey records that Riot rejected the key (status 401 or 403): every
// later Acquire fails with riot.KindKeyRejected.
func (l *Local) RejectKey(status int) {
	l.e.mu.Lock()
	first := l.e.rejectKey(status)
	l.e.mu.Unlock()
	if first {
		l.e.met.keyRejected(status, "local")
	}
}

// Counters returns this process's request counters (granted, 429s by
// type, refusals, time waited) per route and method.
func (l *Local) Counters() []CallStats { return l.e.met.counters() }

// ClearKeyRejection clears a rejection (RejectKey): Acquire grants again.
func (l *Local) ClearKeyRejection() {
	l.e.mu.Lock()
	l.e.acceptKey()
	l.e.mu.Unlock()
}

// KeyRejected reports whether the key was rejected, and the status that did.
func (l *Local) KeyRejected() (bool, int) {
	l.e.mu.Lock()
	defer l.e.mu.Unlock()
	return l.e.rejected != 0, l.e.rejected
}

// rejectKey records status as the key's rejection and wakes every queued
// waiter without a grant: they return riot.KindKeyRejected, and nothing
// queued before the rejection is sent with the key afterwards. Callers
// hold mu. It reports whether this was the first rejection.
func (e *engine) rejectKey(status int) bool {
	first := e.rejected == 0
	e.rejected = status
	for _, r := range e.routes {
		for _, b := range r.order {
			for _, q := range []*list.List{&b.hi, &b.lo} {
				for el := q.Front(); el != nil; el = el.Next() {
					close(el.Value.(*waiter).ready)
				}
				q.Init()
			}
		}
	}
	return first
}

// acceptKey clears a rejection; it reports whether there was one. Callers
// hold mu. (rejectKey emptied the queues, so no waiter needs waking.)
func (e *engine) acceptKey() bool {
	was := e.rejected != 0
	e.rejected = 0
	return was
}

func (e *engine) route(name string) *route {
	r := e.routes[name]
	if r == nil {
		r = &route{name: name, methods: map[string]*bucket{}}
		r.app = &bucket{route: name, rtt: &r.rtt}
		e.routes[name] = r
	}
	return r
}

func (r *route) method(m string) *bucket {
	b := r.methods[m]
	if b == nil {
		b = &bucket{route: r.name, method: m, rtt: &r.rtt}
		r.methods[m] = b
		r.order = append(r.order, b)
	}
	return b
}

// check outcomes.
const (
	okGrant   = iota
	blocked   // blocked until a time (until) or, if until is zero, an event (a response)
	needLease // shared: a lease must be fetched from KV
)

// check reports whether b can take one more request at now. It rolls
// expired windows.
func (e *engine) check(b *bucket, now time.Time) (int, time.Time) {
	if now.Before(b.pausedUntil) {
		return blocked, b.pausedUntil
	}
	if b.limits == "" {
		if b.inflight >= e.o.InitialInFlight {
			return blocked, time.Time{}
		}
		return e.st.unknown(b, now)
	}
	res, until := okGrant, time.Time{}
	for _, w := range b.windows {
		if !w.start.IsZero() && !now.Before(e.end(b, w)) {
			dropped := max(w.leased, 0)
			w.start, w.count, w.leased, w.riotEnd, w.lateStart = time.Time{}, 0, 0, time.Time{}, time.Time{}
			// Requests still in flight at the rollover may reach Riot after
			// its window reset and count in its next one: they count in
			// ours too, or a window granted in full could overshoot by the
			// stragglers (store.rolled).
			e.st.rolled(b, w, dropped, now)
		}
		if !w.start.IsZero() && !now.Before(e.closes(w, now)) {
			// Closed: a grant now would carry a deadline already passed
			// (permit.Send). Nothing more until the window rolls.
			if end := e.end(b, w); res != blocked || end.After(until) {
				res, until = blocked, end
			}
			continue
		}
		wres, wuntil := e.st.reserve(b, w, e.end(b, w), now)
		switch {
		case wres == blocked && (res != blocked || wuntil.After(until)):
			res, until = blocked, wuntil
		case wres == needLease && res == okGrant:
			res = needLease
		}
	}
	return res, until
}

// mark is where one granted request stands in one window of its budget:
// the window's start, the request's ordinal in it (the window's granted
// count up to and including it: local count, or for Shared the KV count as
// last seen minus the tokens this process still holds unsent), and how
// many other requests of the budget were in flight when it was granted.
// A count-1 reply (Riot's window began with this request) uses them to
// tell which requests may share Riot's new window (engine.learn).
type mark struct {
	start    time.Time
	ord      int
	inflight int
	at       time.Time // the grant time
	ep       int64     // the window's epoch at the grant (shared; 0 in memory)
}

func (e *engine) take(b *bucket, now time.Time) []mark {
	inflight := b.inflight
	b.inflight++
	if b.limits == "" {
		b.pre++
	}
	marks := make([]mark, len(b.windows))
	for i, w := range b.windows {
		if w.start.IsZero() {
			w.start = now
		}
		e.st.spend(w, 1)
		marks[i] = mark{start: w.start, ord: w.count - max(w.leased, 0), inflight: inflight, at: now, ep: w.epoch}
	}
	return marks
}

// acquire implements riot.Limiter for both limiters.
func (e *engine) acquire(ctx context.Context, c riot.Call) (riot.Permit, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	start := e.now()
	deadline := start.Add(e.o.MaxWait)
	if d, ok := ctx.Deadline(); ok {
		// ctx's deadline is on this host's clock; ours may be the store's.
		if dd := start.Add(time.Until(d)); dd.Before(deadline) {
			deadline = dd
		}
	}
	e.mu.Lock()
	if e.rejected != 0 {
		st := e.rejected
		e.mu.Unlock()
		return nil, &riot.Error{Kind: riot.KindKeyRejected, Op: c.Method, Route: c.Route, Status: st, Msg: "key rejected earlier", Err: ErrKeyRejected}
	}
	r := e.route(c.Route)
	mb := r.method(c.Method)
	if at := e.earliest(r, mb, start); at.After(deadline) {
		e.mu.Unlock()
		e.met.rateLimited(c, "deadline")
		return nil, e.waitErr(c, at, deadline)
	}
	w := &waiter{c: c, b: mb, ready: make(chan struct{})}
	if c.Background {
		w.e = mb.lo.PushBack(w)
	} else {
		w.e = mb.hi.PushBack(w)
	}
	e.dispatch(r, start)
	if w.p != nil {
		e.mu.Unlock()
		e.met.waited(c, 0)
		return w.p, nil
	}
	e.mu.Unlock()

	t := time.NewTimer(deadline.Sub(start))
	defer t.Stop()
	var err error
	select {
	case <-w.ready:
	case <-t.C:
	case <-ctx.Done():
		err = ctx.Err()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	if w.p != nil {
		if err != nil { // granted while ctx ended: give it back
			e.cancel(w.p)
			return nil, err
		}
		e.met.waited(c, now.Sub(start))
		return w.p, nil
	}
	if e.rejected != 0 {
		// Woken by rejectKey (already off its queue).
		return nil, &riot.Error{Kind: riot.KindKeyRejected, Op: c.Method, Route: c.Route, Status: e.rejected, Msg: "key rejected while waiting", Err: ErrKeyRejected}
	}
	l := &mb.lo
	if !c.Background {
		l = &mb.hi
	}
	l.Remove(w.e)
	e.st.idle(r)
	if err != nil {
		return nil, err
	}
	at := e.earliest(r, mb, now)
	if !at.After(now) {
		// Budget exists but others are ahead: guess one short window.
		at = now.Add(e.shortest(r, mb))
	}
	e.met.rateLimited(c, "deadline")
	return nil, e.waitErr(c, at, deadline)
}

func (e *engine) waitErr(c riot.Call, at, deadline time.Time) error {
	// RetryAt is for callers, on this host's clock.
	return &riot.Error{Kind: riot.KindRateLimited, Op: c.Method, Route: c.Route, RetryAt: at.Add(-e.offset()),
		Msg: fmt.Sprintf("rate limit wait until %s passes deadline %s", at.Format(time.RFC3339Nano), deadline.Format(time.RFC3339Nano))}
}

// earliest is the earliest time the app and method budgets could grant,
// ignoring queued waiters (now if they can grant now).
func (e *engine) earliest(r *route, mb *bucket, now time.Time) time.Time {
	at := now
	for _, b := range []*bucket{r.app, mb} {
		if res, until := e.check(b, now); res == blocked && until.After(at) {
			at = until
		}
	}
	return at
}

func (e *engine) shortest(r *route, mb *bucket) time.Duration {
	d := time.Second
	for _, b := range []*bucket{r.app, mb} {
		if len(b.windows) > 0 {
			d = max(d, b.windows[0].length)
		}
	}
	return d
}

// dispatch grants queued waiters of r in priority order while budget lasts
// and arms r's timer for the next time something may change. Callers hold mu.
func (e *engine) dispatch(r *route, now time.Time) {
	if e.rejected != 0 {
		return // rejectKey woke the waiters; nothing is granted any more
	}
	var wake time.Time
	note := func(t time.Time) {
		if !t.IsZero() && (wake.IsZero() || t.Before(wake)) {
			wake = t
		}
	}
	for _, hi := range []bool{true, false} {
		for {
			progressed := false
			appBlocked := false
			n := len(r.order)
			for i := 0; i < n; i++ {
				mb := r.order[(r.rr+i)%n]
				q := &mb.lo
				if hi {
					q = &mb.hi
				}
				if q.Len() == 0 {
					continue
				}
				ares, auntil := e.check(r.app, now)
				if ares != okGrant {
					appBlocked = true
					if ares == needLease {
						e.st.fetch(r, r.app)
					}
					note(auntil)
					break
				}
				mres, muntil := e.check(mb, now)
				if mres != okGrant {
					if mres == needLease {
						e.st.fetch(r, mb)
					}
					note(muntil)
					continue
				}
				w := q.Remove(q.Front()).(*waiter)
				if r.app.inflight == 0 {
					r.newBurst(now)
				}
				w.p = &permit{e: e, r: r, mb: mb, c: w.c, at: now, appMarks: e.take(r.app, now), mMarks: e.take(mb, now)}
				w.p.deadline = e.deadline(w.p, now)
				e.met.granted(w.c)
				close(w.ready)
				progressed = true
				r.rr = (r.rr + i + 1) % n
				break
			}
			if appBlocked {
				// Interactive waiters blocked on the app budget hold back
				// background ones too.
				e.arm(r, wake, now)
				return
			}
			if !progressed {
				break
			}
		}
	}
	e.arm(r, wake, now)
}

func (e *engine) arm(r *route, wake, now time.Time) {
	if wake.IsZero() {
		return
	}
	if r.timer != nil && !r.timerAt.IsZero() && !r.timerAt.After(wake) && r.timerAt.After(now) {
		return // an earlier or equal wake-up is already armed
	}
	d := wake.Sub(now) + time.Millisecond
	if r.timer == nil {
		r.timer = time.AfterFunc(d, func() {
			e.mu.Lock()
			r.timerAt = time.Time{}
			e.dispatch(r, e.now())
			e.mu.Unlock()
		})
	} else {
		r.timer.Reset(d)
	}
	r.timerAt = wake
}

// permit is one reserved request.
type permit struct {
	e        *engine
	r        *route
	mb       *bucket
	c        riot.Call
	at       time.Time // when granted
	appMarks []mark    // where it stands in each app window it was counted in
	mMarks   []mark
	once     sync.Once
	// deadline is the latest time Send lets the request go (zero: none,
	// for a request granted while its limits were unknown): the earliest
	// closes of the windows it was counted in. sentAt is when Send let it
	// go (mu).
	deadline, sentAt time.Time
}

// deadline is p's send deadline, granted at now: the earliest closes of
// the windows p was counted in (zero if none). Callers hold mu.
func (e *engine) deadline(p *permit, now time.Time) time.Time {
	var d time.Time
	for _, b := range []*bucket{p.r.app, p.mb} {
		for _, w := range b.windows {
			if w.start.IsZero() {
				continue
			}
			if c := e.closes(w, now); d.IsZero() || c.Before(d) {
				d = c
			}
		}
	}
	return d
}

// Send implements riot.Permit: the request may go on the wire if its send
// deadline has not passed on the limiter's clock. A request that checked
// in time reaches Riot before the windows it was counted in end, as long
// as it is written within the send allowance (Options.SendAllowance).
// Past the deadline the permit is returned to its budget as by Cancel and
// Send reports false: the caller must not send it, and acquires again.
//
// A request that is the first this process sends in one of its windows,
// more than half the margin after the window's start, may be the one
// that opens Riot's window, late: Riot's window would then end after ours
// and a next window of ours would grant into it. Send first moves the
// window's start (for Shared, in KV, with compare-and-set, before the
// request goes) to now − margin/2, so that it ends no earlier than Riot's
// can. If that fails (the KV window moved on, or KV is unreachable), the
// grant is returned as expired (fail closed).
func (p *permit) Send() bool {
	e := p.e
	e.mu.Lock()
	now := e.now()
	if !p.deadline.IsZero() && !now.Before(p.deadline) {
		p.expire()
		e.mu.Unlock()
		return false
	}
	late := e.lateOpens(p, now)
	e.mu.Unlock()
	for _, l := range late {
		if err := e.st.opening(l.b, l.w, l.m, l.start); err != nil {
			e.o.Logger.Debug("ratelimit: late first send not recorded; grant returned", "route", p.r.name, "err", err)
			e.mu.Lock()
			p.expire()
			e.mu.Unlock()
			return false
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	now = e.now()
	if len(late) > 0 && !p.deadline.IsZero() && !now.Before(p.deadline) {
		p.expire()
		return false
	}
	for _, l := range late {
		if l.w.start.Equal(l.m.start) && l.start.After(l.w.lateStart) {
			l.w.lateStart, l.w.sentFor = l.start, l.w.start
		}
	}
	p.sentAt = now
	return true
}

// expire returns p unsent (Send past its deadline). Callers hold mu.
func (p *permit) expire() {
	p.once.Do(func() {
		p.e.met.expired(p.c)
		p.e.cancel(p)
	})
}

// lateOpen is a window that a late first send opens (permit.Send): its
// start must move to start.
type lateOpen struct {
	b     *bucket
	w     *window
	m     mark
	start time.Time
}

// lateOpens marks p's windows as sent in by this process and returns
// those where p is this process's first request, sent more than half the
// margin after the window's start (rounded up to KV's milliseconds).
// A window whose start moved since p's grant was realigned by a count-1
// reply: Riot's window is open, nothing to move. Callers hold mu.
func (e *engine) lateOpens(p *permit, now time.Time) []lateOpen {
	var out []lateOpen
	for _, x := range []struct {
		b     *bucket
		marks []mark
	}{{p.r.app, p.appMarks}, {p.mb, p.mMarks}} {
		for i, w := range x.b.windows {
			if i >= len(x.marks) || x.marks[i].start.IsZero() || !w.start.Equal(x.marks[i].start) || w.sentFor.Equal(w.start) {
				continue
			}
			half := e.margin(x.b, w) / 2
			if !now.After(w.start.Add(half)) {
				w.sentFor = w.start
				continue
			}
			start := now.Add(-half)
			start = time.UnixMilli(start.Add(time.Millisecond - 1).UnixMilli())
			out = append(out, lateOpen{b: x.b, w: w, m: x.marks[i], start: start})
		}
	}
	return out
}

// Written implements riot.Permit: the time since Send is a sample of this
// process's send lag, which the send allowance keeps clear.
func (p *permit) Written() {
	e := p.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if !p.sentAt.IsZero() {
		now := e.now()
		e.lag.add(now.Sub(p.sentAt), now)
		p.sentAt = time.Time{}
	}
}

// Cancel implements riot.Permit: the reservation returns to the budget.
func (p *permit) Cancel() {
	p.once.Do(func() {
		p.e.mu.Lock()
		defer p.e.mu.Unlock()
		p.e.cancel(p)
	})
}

func (e *engine) cancel(p *permit) {
	for _, x := range []struct {
		b     *bucket
		marks []mark
	}{{p.r.app, p.appMarks}, {p.mb, p.mMarks}} {
		x.b.inflight--
		for i, w := range x.b.windows {
			switch {
			case i >= len(x.marks):
			case w.start.Equal(x.marks[i].start):
				e.st.spend(w, -1)
			default: // its window moved on: the token is gone, never sent
				e.st.answered(x.b, w, x.marks[i], e.now())
			}
		}
	}
	e.dispatch(p.r, e.now())
	e.st.idle(p.r)
}

// Done implements riot.Permit: it releases the in-flight slot, learns
// limits and counts from h, and applies a 429's pause.
func (p *permit) Done(status int, h http.Header) {
	p.once.Do(func() { p.e.done(p, status, h) })
}

func (e *engine) done(p *permit, status int, h http.Header) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	p.r.app.inflight--
	p.mb.inflight--
	e.answered(p.r.app, p.appMarks, now)
	e.answered(p.mb, p.mMarks, now)
	if status == 0 || h == nil {
		if status != 0 {
			e.timed(p, now)
		}
		e.dispatch(p.r, now)
		e.st.idle(p.r)
		return
	}
	e.learn(p.r.app, p, p.appMarks, h.Get("X-App-Rate-Limit"), h.Get("X-App-Rate-Limit-Count"), now)
	e.learn(p.mb, p, p.mMarks, h.Get("X-Method-Rate-Limit"), h.Get("X-Method-Rate-Limit-Count"), now)
	// Timed after learn: a count reply is judged with the margin the
	// windows were judged with when the request was granted.
	e.timed(p, now)
	if status == http.StatusTooManyRequests {
		e.on429(p, h, now)
	} else if status < 500 {
		p.mb.backoff = 0
		p.r.app.backoff = 0
	}
	e.dispatch(p.r, now)
	e.st.idle(p.r)
}

// answered tells the store that the request marked marks in b's windows
// was answered at now. Callers hold mu.
func (e *engine) answered(b *bucket, marks []mark, now time.Time) {
	for i, w := range b.windows {
		if i < len(marks) {
			e.st.answered(b, w, marks[i], now)
		}
	}
}

// timed notes p's round trip (grant to answer) for its route's margin if
// p belongs to the route's current burst: the requests granted at the
// same instant as one granted while nothing was in flight. A burst opens
// Riot's window when its first request arrives, so the burst's shortest
// trip is the sample (route.newBurst adds it when the next burst starts);
// the longer trips are queueing behind it, which says nothing about when
// a window opens. Callers hold mu.
func (e *engine) timed(p *permit, now time.Time) {
	r := p.r
	if !p.at.Equal(r.burstAt) {
		return
	}
	if d := now.Sub(p.at); !r.burstSeen || d < r.burstMin {
		r.burstMin, r.burstSeen = d, true
	}
}

// newBurst starts a burst at now (a grant with nothing in flight on the
// route), after adding the previous burst's shortest trip to the margin
// estimate. Callers hold mu.
func (r *route) newBurst(now time.Time) {
	if r.burstSeen {
		r.rtt.add(r.burstMin)
	}
	r.burstAt, r.burstMin, r.burstSeen = now, 0, false
}

// demand is the number of queued waiters that b's grants would serve.
func (r *route) demand(b *bucket) int {
	if b != r.app {
		return b.hi.Len() + b.lo.Len()
	}
	n := 0
	for _, m := range r.order {
		n += m.hi.Len() + m.lo.Len()
	}
	return n
}

// learn applies a response's limit and count headers to b.
func (e *engine) learn(b *bucket, p *permit, marks []mark, limH, cntH string, now time.Time) {
	lims := ParseLimits(limH)
	cnts := ParseLimits(cntH)
	if e.o.LimitShare < 1 {
		cnts = nil // a fixed split only knows its own requests
	}
	if len(lims) > 0 {
		if canon := FormatLimits(lims); canon != b.limits {
			e.setLimits(b, lims, p.at)
			e.st.learned(p.r, b, canon)
		}
	}
	for i, w := range b.windows {
		c, ok := countFor(cnts, w.length)
		if !ok {
			continue
		}
		var m mark // where p stands in the window it was counted in; zero start if none
		if i < len(marks) {
			m = marks[i]
		}
		if c == 1 && !m.start.IsZero() {
			e.alignToRiot(b, w, m, now)
		}
		if !m.start.IsZero() && !w.start.Equal(m.start) {
			continue // the request was counted in an earlier window
		}
		e.st.counted(b, w, m, p, c, len(marks) > 0)
	}
}

// alignToRiot applies a count-1 reply: Riot's window began with request p,
// when it arrived, somewhere between its grant and now. Riot's window ends
// at most one window length after now, so the window of ours that holds
// Riot's must not end before that: it must start no earlier than
// floor = now − margin. Nothing else is implied, and budget is never given
// up beyond what the reply proves:
//
//   - p was counted in our window w (w.start == m.start), w started
//     before floor and its length has passed (p is a straggler, granted at
//     the end of w): the requests granted in w before p reached Riot's
//     previous window, not the one p began. w is rolled: it restarts at
//     floor counting only what may be in Riot's new window (p, those
//     granted after p, and those in flight when p was granted; with
//     Shared, the KV window keeps every token of every process not
//     settled before p's grant, kvStore.alignKV: this process's view
//     follows on its next lease). Keeping w's count while moving
//     its start (the old rule) idled every process for a whole window
//     when p was a straggler granted at the end of a full window.
//   - The same in a young window (its length has not passed): the
//     requests granted before p may still be on their way, so the count
//     is kept and w only moves to floor, which costs at most p's trip.
//   - p was counted in an earlier window and w (already running) started
//     before floor: p is a straggler that Riot counted in the window that
//     w mirrors; w moves to floor keeping its count, which costs at most
//     p's round trip.
//
// Callers hold mu.
func (e *engine) alignToRiot(b *bucket, w *window, m mark, now time.Time) {
	floor := e.st.aligned(b, w, m, now.Add(-e.margin(b, w)), now)
	young := w.start.Equal(m.start) && now.Sub(w.start) < w.length
	if young {
		// p was counted in w and Riot's window began with p, at or before
		// now: it ends by now + length, and so may w (engine.end), which
		// spares the rest of the margin.
		if c := now.Add(w.length); c.After(w.riotEnd) {
			w.riotEnd = c
		}
	}
	if w.start.IsZero() || !floor.After(w.start) {
		return // w starts late enough (or starts at the next grant, after now)
	}
	if young {
		// The requests granted before p may still be on their way (other
		// processes' too), so they may all be in Riot's new window. Keep
		// the count; this costs at most p's round trip.
		w.start = floor
		return
	}
	if w.start.Equal(m.start) {
		w.start, w.count, w.riotEnd = floor, rolledCount(w.count, m), time.Time{}
		return
	}
	if w.start.After(m.start) {
		w.start, w.riotEnd = floor, time.Time{}
	}
}

// rolledCount is what a window holding count requests keeps when a count-1
// reply for the request marked m rolls it: the requests that may have
// reached Riot's new window (m's request, those granted after it, those in
// flight when it was granted), never more than count.
func rolledCount(count int, m mark) int {
	return min(count, 1+max(0, count-m.ord)+m.inflight)
}

// setLimits replaces b's windows, keeping the state of windows whose length
// is unchanged. Callers hold mu.
func (e *engine) setLimits(b *bucket, lims []Limit, at time.Time) {
	old := b.windows
	b.windows = make([]*window, 0, len(lims))
	for _, l := range lims {
		var w *window
		for _, o := range old {
			if o.length == l.Window {
				w = o
			}
		}
		if w == nil {
			w = &window{length: l.Window}
			e.st.opened(b, w, at)
		}
		w.limit = l.N
		if e.o.LimitShare < 1 {
			w.limit = max(1, int(float64(l.N)*e.o.LimitShare))
		}
		b.windows = append(b.windows, w)
	}
	if b.limits != "" {
		e.o.Logger.Info("ratelimit: limits changed", "route", b.route, "bucket", b.name(), "from", b.limits, "to", FormatLimits(lims))
	}
	b.limits = FormatLimits(lims)
	b.pre = 0
}

func (e *engine) on429(p *permit, h http.Header, now time.Time) {
	typ := strings.ToLower(strings.TrimSpace(h.Get("X-Rate-Limit-Type")))
	ra, hasRA := parseRetryAfter(h.Get("Retry-After"))
	e.met.limited429(p.c, typ)
	var b *bucket
	var d time.Duration
	switch typ {
	case "application", "method":
		b = p.mb
		if typ == "application" {
			b = p.r.app
		}
		if hasRA {
			d = ra + e.o.RetryAfterMargin
			break
		}
		fallthrough // no Retry-After: back off, never "retry now"
	default: // service, server, unknown, missing
		if b == nil {
			b = p.mb
		}
		if b.backoff == 0 {
			b.backoff = e.o.BackoffStart
		} else {
			b.backoff = min(b.backoff*2, e.o.BackoffMax)
		}
		d = b.backoff
		if hasRA {
			d = max(d, ra+e.o.RetryAfterMargin)
		}
	}
	until := now.Add(d)
	e.pause(b, until, typ)
	e.met.paused(b.route, b.name(), typ, d)
	e.st.paused(b, until, typ)
}

func (e *engine) pause(b *bucket, until time.Time, typ string) {
	if until.After(b.pausedUntil) {
		b.pausedUntil, b.pauseType = until, typ
		e.o.Logger.Warn("ratelimit: paused", "route", b.route, "bucket", b.name(), "type", typ, "until", until)
	}
}

// BucketState is one budget's state, for status output.
type BucketState struct {
	Route string
	// Method is the method ID, or "app" for the application budget.
	Method   string
	Windows  []WindowState
	InFlight int
	// Waiting counts queued Acquire calls (interactive, background); zero
	// for the app budget.
	WaitingInteractive, WaitingBackground int
	// PausedUntil is set while a 429 pause runs; PauseType is its
	// X-Rate-Limit-Type ("" if none was sent).
	PausedUntil time.Time
	PauseType   string
}

// WindowState is one window of a budget. Count is the requests counted in
// the current window (including in flight; for Shared, the key's global
// count as last seen); ResetsAt is zero when no window is running.
type WindowState struct {
	Limit    int
	Length   time.Duration
	Count    int
	ResetsAt time.Time
}

// Used is Count/Limit of the tightest window, 0..1+ (0 if unknown).
func (s BucketState) Used() float64 {
	u := 0.0
	for _, w := range s.Windows {
		if w.Limit > 0 && !w.ResetsAt.IsZero() {
			u = max(u, float64(w.Count)/float64(w.Limit))
		}
	}
	return u
}

func (e *engine) snapshot() []BucketState {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	var out []BucketState
	add := func(b *bucket) {
		s := BucketState{Route: b.route, Method: b.name(), InFlight: b.inflight,
			WaitingInteractive: b.hi.Len(), WaitingBackground: b.lo.Len()}
		if now.Before(b.pausedUntil) {
			s.PausedUntil, s.PauseType = b.pausedUntil, b.pauseType
		}
		for _, w := range b.windows {
			ws := WindowState{Limit: w.limit, Length: w.length}
			if !w.start.IsZero() {
				if end := e.end(b, w); end.After(now) {
					ws.Count, ws.ResetsAt = w.count, end
				}
			}
			s.Windows = append(s.Windows, ws)
		}
		out = append(out, s)
	}
	for _, r := range e.routes {
		add(r.app)
		for _, b := range r.order {
			add(b)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Route < out[j].Route })
	return out
}
