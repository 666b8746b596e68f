package ratelimit

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"time"

	"github.com/riftflow/riftflow/pkg/config"
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
	// UnansweredTTL is how long a request that went on the wire and was
	// never answered (a timeout, a connection reset after the write) still
	// counts as in flight (default 10 s, riot.DefaultTimeout). Riot counts
	// a request when it arrives, and one given up on may still be in the
	// network or in Riot's buffers: until then it is carried into every
	// window that rolls, as an unanswered request is (eventRolled), instead
	// of landing uncounted in a later one.
	UnansweredTTL time.Duration
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

// defaults gives each unset (zero or negative) option its default, and a
// LimitShare outside (0, 1] the whole limit.
func (o *Options) defaults() {
	config.Fill(o, Options{Now: time.Now, MaxWait: 30 * time.Second, InitialInFlight: 1, InitialMargin: time.Second,
		RetryAfterMargin: 500 * time.Millisecond, SendAllowance: 100 * time.Millisecond, UnansweredTTL: 10 * time.Second,
		BackoffStart: time.Second, BackoffMax: 60 * time.Second, Logger: slog.Default(), LimitShare: 1})
	if o.LimitShare > 1 {
		o.LimitShare = 1
	}
}

// ErrKeyRejected is wrapped by the error Acquire returns once the key has
// been rejected (RejectKey, or a 401/403 seen by any replica).
var ErrKeyRejected = errors.New("ratelimit: API key rejected")

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
