package ratelimit

import (
	"context"
	"errors"
	"net/http"

	"github.com/riftflow/riftflow/pkg/riot"
)

// CeilingRoute and CeilingMethod name the key-wide ceiling's budget in
// Snapshot, ReadState and KV (<KeyID>._key.win.app.<sec>): a pseudo-route
// that no Riot routing value can be.
const (
	CeilingRoute  = "_key"
	CeilingMethod = "_all"
)

// ceiling is a riot.Limiter that takes a token from the key-wide ceiling
// budget (e's pseudo-route CeilingRoute) before every call, then one from
// next.
type ceiling struct {
	e    *engine
	next riot.Limiter
}

// newCeiling sets the ceiling's fixed limits on e. No header ever changes
// them: the ceiling's permits are settled without headers.
func newCeiling(e *engine, next riot.Limiter, lims []Limit) riot.Limiter {
	if len(lims) == 0 {
		return next
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.route(CeilingRoute)
	e.setLimits(r.app, lims, e.now())
	// The method budget has no window of its own: every call counts in
	// the route's (application) windows only.
	r.method(CeilingMethod).limits = "none"
	return &ceiling{e: e, next: next}
}

// Ceiling returns a limiter that admits a call only within lims, counted
// over every call of this process (whatever its route or method), before
// l's own budgets: riftflow's own ceilings below Riot's
// (RIOT_MAX_PER_SECOND, RIOT_MAX_PER_MINUTE). Windows are fixed and start
// with the first request, as Riot's; refusals, waits and send deadlines
// are the limiter's. No lims: l itself.
func (l *Local) Ceiling(lims []Limit) riot.Limiter { return newCeiling(l.e, l, lims) }

// Ceiling is Local.Ceiling across every process sharing the key: the
// ceiling's windows are KV windows (<KeyID>._key.win.app.<sec>), leased as
// Riot's budgets are, so lims cap the whole key, not each process. Every
// process should be given the same lims; the smallest leasing process's
// limit wins in a window it leases.
func (s *Shared) Ceiling(lims []Limit) riot.Limiter { return newCeiling(s.e, s, lims) }

// Acquire implements riot.Limiter: a ceiling token, then next's permit. A
// refusal by the ceiling is a *riot.Error of KindRateLimited naming c.
func (c *ceiling) Acquire(ctx context.Context, call riot.Call) (riot.Permit, error) {
	cp, err := c.e.acquire(ctx, riot.Call{Route: CeilingRoute, Method: CeilingMethod, Background: call.Background})
	if err != nil {
		var re *riot.Error
		if errors.As(err, &re) {
			re.Op, re.Route = call.Method, call.Route
			re.Msg = "riftflow's own ceiling (RIOT_MAX_PER_SECOND / RIOT_MAX_PER_MINUTE): " + re.Msg
		}
		return nil, err
	}
	p, err := c.next.Acquire(ctx, call)
	if err != nil {
		cp.Cancel()
		return nil, err
	}
	return &ceilingPermit{ceil: cp, p: p}, nil
}

// ceilingPermit is a ceiling token and the call's own permit.
type ceilingPermit struct{ ceil, p riot.Permit }

// Send passes only if both grants are within their send deadlines; when
// one has expired, both are returned.
func (p *ceilingPermit) Send() bool {
	if !p.ceil.Send() {
		p.p.Cancel()
		return false
	}
	if !p.p.Send() {
		p.ceil.Cancel()
		return false
	}
	return true
}

func (p *ceilingPermit) Written() {
	p.ceil.Written()
	p.p.Written()
}

// Done settles both; the ceiling learns nothing from Riot's headers.
func (p *ceilingPermit) Done(status int, h http.Header) {
	p.ceil.Done(status, nil)
	p.p.Done(status, h)
}

func (p *ceilingPermit) Cancel() {
	p.ceil.Cancel()
	p.p.Cancel()
}
