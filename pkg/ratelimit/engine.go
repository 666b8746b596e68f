package ratelimit

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/riftflow/riftflow/pkg/riot"
)

// window is one fixed window of a budget.
type window struct {
	length time.Duration
	limit  int
	start  time.Time // zero: not started
	count  int       // requests counted in this window (Local: granted; Shared: the key's global count as last seen)
	// riotEnd, when set, is the latest end that a count-1 reply proved for
	// Riot's window that this one mirrors: that reply's answer time plus
	// the length (Riot's window began when the request arrived, before the
	// answer). The window may roll then instead of at start + length +
	// margin (engine.end). With Shared it is shared through KV ("e").
	riotEnd time.Time
	// sentFor is the start of the window in which this process last sent
	// a request (permit.Send): equal to start once it has sent in this
	// window. sentEp is, for Shared, the KV epoch of that window
	// (kvWindow.epoch): a start that moved within the epoch (a late first
	// send, a count-1 reply) is still a window this process has sent in.
	// lateStart is the later start that a late first send gave the window
	// (Riot's window may open only then); engine.end counts from it.
	sentFor, lateStart time.Time
	sentEp             int64
	kv                 kvWindow // kvStore's state of the window; zero for Local
}

// bucket is one budget: the app budget of a route or one method's.
type bucket struct {
	route, method string   // method "" for the app budget
	rtt           *rttStat // the route's round trips
	windows       []*window
	limits        string // canonical learned limits, "" if not learned
	inflight      int
	// unanswered are requests counted in inflight that went on the wire
	// and got no answer: they stay in flight until their time
	// (Options.UnansweredTTL), then settle (engine.settleUnanswered).
	unanswered  []unanswered
	pre         int // requests granted while the limits were unknown
	pausedUntil time.Time
	pauseType   string
	backoff     time.Duration
	kv          kvBucket // kvStore's state of the budget; zero for Local
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

// unanswered is a request written and never answered (permit.Done with
// no status): in flight until until.
type unanswered struct {
	until time.Time
	marks []mark
}

// settleUnanswered ends b's unanswered requests whose time has passed:
// they leave inflight and are settled as answered then. Callers hold mu.
func (e *engine) settleUnanswered(b *bucket, now time.Time) {
	kept := b.unanswered[:0]
	for _, u := range b.unanswered {
		if now.Before(u.until) {
			kept = append(kept, u)
			continue
		}
		b.inflight--
		e.answered(b, u.marks, now)
	}
	clear(b.unanswered[len(kept):])
	b.unanswered = kept
}

// nextUnanswered is when the first of b's unanswered requests settles
// (zero if none).
func (b *bucket) nextUnanswered() time.Time {
	var t time.Time
	for _, u := range b.unanswered {
		if t.IsZero() || u.until.Before(t) {
			t = u.until
		}
	}
	return t
}

// check reports whether b can take one more request at now. It rolls
// expired windows.
func (e *engine) check(b *bucket, now time.Time) (int, time.Time) {
	if len(b.unanswered) > 0 {
		e.settleUnanswered(b, now)
	}
	if now.Before(b.pausedUntil) {
		return blocked, b.pausedUntil
	}
	if b.limits == "" {
		if b.inflight >= e.o.InitialInFlight {
			// An answer wakes the waiters; an unanswered request's slot
			// frees at its time.
			return blocked, b.nextUnanswered()
		}
		return e.st.unknown(b, now)
	}
	res, until := okGrant, time.Time{}
	for _, w := range b.windows {
		if !w.start.IsZero() && !now.Before(e.end(b, w)) {
			w.start, w.count, w.riotEnd, w.lateStart = time.Time{}, 0, time.Time{}, time.Time{}
			// Requests still in flight at the rollover may reach Riot after
			// its window reset and count in its next one: they count in
			// ours too, or a window granted in full could overshoot by the
			// stragglers (eventRolled).
			e.st.observe(event{kind: eventRolled, b: b, w: w, at: now})
		}
		if !w.start.IsZero() && !now.Before(e.closes(w, now)) {
			// Closed: a grant now would carry a deadline already passed
			// (permit.Send). Nothing more until the window rolls.
			e.st.observe(event{kind: eventClosed, b: b, w: w, at: now})
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
	epoch    int64     // the window's KV epoch at the grant (kvWindow.epoch; 0 for Local)
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
		e.st.observe(event{kind: eventSpent, w: w, n: 1})
		marks[i] = mark{start: w.start, ord: w.count - w.held(), inflight: inflight, at: now, epoch: w.kv.epoch}
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
	return e.wait(ctx, r, mb, w, start, deadline)
}

// wait blocks until w, queued on mb at start, is granted, until deadline
// (after deadline − start of real time), or until ctx ends; it returns
// w's permit, or the error for Acquire with w off its queue. Called
// without mu.
func (e *engine) wait(ctx context.Context, r *route, mb *bucket, w *waiter, start, deadline time.Time) (riot.Permit, error) {
	c := w.c
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
	e.st.observe(event{kind: eventIdle, r: r})
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
