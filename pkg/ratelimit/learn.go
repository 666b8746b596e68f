package ratelimit

import (
	"net/http"
	"strings"
	"time"
)

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
			e.st.observe(event{kind: eventLearned, r: p.r, b: b, canon: canon})
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
		e.st.observe(event{kind: eventCounted, b: b, w: w, m: m, p: p, n: c, marked: len(marks) > 0})
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
//     its start would idle every process for a whole window when p is a
//     straggler granted at the end of a full window.
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
			e.st.observe(event{kind: eventOpened, b: b, w: w, at: at})
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
	e.st.observe(event{kind: eventPaused, b: b, at: until, typ: typ})
}

func (e *engine) pause(b *bucket, until time.Time, typ string) {
	if until.After(b.pausedUntil) {
		b.pausedUntil, b.pauseType = until, typ
		e.o.Logger.Warn("ratelimit: paused", "route", b.route, "bucket", b.name(), "type", typ, "until", until)
	}
}
