package ratelimit

import (
	"net/http"
	"sync"
	"time"

	"github.com/riftflow/riftflow/pkg/riot"
)

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
	// sent: Send let the request go (mu). It stays set once Written has
	// taken sentAt's lag sample, so that Done knows a request that got no
	// answer may still reach Riot.
	sent bool
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
// can, unless Riot's window is known open already (winVal.Open). If that
// fails (the KV window moved on, or KV is unreachable), the grant is
// returned as expired (fail closed). Sent, the request is on time for
// the moved start and recorded so, like an on-time first send: the
// window is open, and no later send of this process (in the same KV
// epoch) or of another moves it again.
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
	for i, l := range late {
		start, err := e.st.opening(l.b, l.w, l.m, l.start)
		if err != nil {
			e.o.Logger.Debug("ratelimit: late first send not recorded; grant returned", "route", p.r.name, "err", err)
			e.mu.Lock()
			p.expire()
			e.mu.Unlock()
			return false
		}
		late[i].start = start
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	now = e.now()
	if len(late) > 0 && !p.deadline.IsZero() && !now.Before(p.deadline) {
		p.expire()
		return false
	}
	for _, l := range late {
		if !l.w.start.Equal(l.m.start) {
			continue
		}
		if l.start.After(l.w.lateStart) {
			l.w.lateStart = l.start
		}
		// Sent within half the margin of the start as it now is: Riot's
		// window is open (winVal.Open), and neither this process's next
		// sends in the window nor another's late first one move it again.
		l.w.sentFor, l.w.sentEp = l.w.start, l.m.epoch
		e.st.observe(event{kind: eventSent, b: l.b, w: l.w, m: l.m, at: now})
	}
	p.sentAt, p.sent = now, true
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
// First is judged per start and, for Shared, per KV epoch: a start that
// moved within the epoch after this process sent (its own late first
// send, seen again on its next lease) is not a window to open again.
// A window whose start moved since p's grant was realigned by a count-1
// reply: Riot's window is open, nothing to move. Callers hold mu.
func (e *engine) lateOpens(p *permit, now time.Time) []lateOpen {
	var out []lateOpen
	for _, x := range []struct {
		b     *bucket
		marks []mark
	}{{p.r.app, p.appMarks}, {p.mb, p.mMarks}} {
		for i, w := range x.b.windows {
			if i >= len(x.marks) {
				continue
			}
			m := x.marks[i]
			if m.start.IsZero() || !w.start.Equal(m.start) || w.sentFor.Equal(w.start) || (m.epoch != 0 && w.sentEp == m.epoch) {
				continue
			}
			half := e.margin(x.b, w) / 2
			if !now.After(w.start.Add(half)) {
				w.sentFor, w.sentEp = w.start, m.epoch
				e.st.observe(event{kind: eventSent, b: x.b, w: w, m: m, at: now})
				continue
			}
			start := now.Add(-half)
			start = time.UnixMilli(start.Add(time.Millisecond - 1).UnixMilli())
			out = append(out, lateOpen{b: x.b, w: w, m: m, start: start})
		}
	}
	return out
}

// Written implements riot.Permit: the time since Send is a sample of this
// process's send lag, which the send allowance keeps clear (one sample per
// request; the request stays sent for Done).
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
				e.st.observe(event{kind: eventSpent, w: w, n: -1})
			default: // its window moved on: the token is gone, never sent
				e.st.observe(event{kind: eventAnswered, b: x.b, w: w, m: x.marks[i], at: e.now()})
			}
		}
	}
	e.dispatch(p.r, e.now())
	e.st.observe(event{kind: eventIdle, r: p.r})
}

// Done implements riot.Permit: it releases the in-flight slot, learns
// limits and counts from h, and applies a 429's pause. A request that
// went on the wire (Send) and got no answer (status 0: a timeout, a reset
// after the write) keeps its slot for Options.UnansweredTTL: it may still
// reach Riot and count in a later window.
func (p *permit) Done(status int, h http.Header) {
	p.once.Do(func() { p.e.done(p, status, h) })
}

func (e *engine) done(p *permit, status int, h http.Header) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	if status == 0 && p.sent {
		// Written, never answered: it may still reach Riot, late, and
		// count in a later window. It stays in flight for UnansweredTTL.
		until := now.Add(e.o.UnansweredTTL)
		p.r.app.unanswered = append(p.r.app.unanswered, unanswered{until: until, marks: p.appMarks})
		p.mb.unanswered = append(p.mb.unanswered, unanswered{until: until, marks: p.mMarks})
		e.dispatch(p.r, now)
		e.st.observe(event{kind: eventIdle, r: p.r})
		return
	}
	p.r.app.inflight--
	p.mb.inflight--
	e.answered(p.r.app, p.appMarks, now)
	e.answered(p.mb, p.mMarks, now)
	if status == 0 || h == nil {
		if status != 0 {
			e.timed(p, now)
		}
		e.dispatch(p.r, now)
		e.st.observe(event{kind: eventIdle, r: p.r})
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
	e.st.observe(event{kind: eventIdle, r: p.r})
}

// answered tells the store that the request marked marks in b's windows
// was answered at now. Callers hold mu.
func (e *engine) answered(b *bucket, marks []mark, now time.Time) {
	for i, w := range b.windows {
		if i < len(marks) {
			e.st.observe(event{kind: eventAnswered, b: b, w: w, m: marks[i], at: now})
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
