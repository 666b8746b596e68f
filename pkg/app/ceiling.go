package app

import (
	"context"
	"time"

	"golang.org/x/time/rate"

	"github.com/riftflow/riftflow/pkg/riot"
)

// Ceilings are design 002's own per-second and per-minute limits, set
// below Riot's (RIOT_MAX_PER_SECOND, RIOT_MAX_PER_MINUTE; 0 = none). They
// count every Riot request of this process, whatever the route or method,
// before the rate limiter that follows Riot's headers: with N replicas of
// a service, give each its share.
type Ceilings struct {
	PerSecond int `env:"RIOT_MAX_PER_SECOND" envDefault:"0"`
	PerMinute int `env:"RIOT_MAX_PER_MINUTE" envDefault:"0"`
}

// ceilingLimiter enforces Ceilings in front of another riot.Limiter.
type ceilingLimiter struct {
	next    riot.Limiter
	buckets []*rate.Limiter
	maxWait time.Duration
	now     func() time.Time
}

// WithCeilings wraps next with c's ceilings (token buckets of golang.org/x/time/rate,
// a burst of one window's count); a wait longer than maxWait or ctx's
// deadline is a *riot.Error of KindRateLimited with RetryAt, as the
// Limiter contract asks. No ceiling set: next itself.
func WithCeilings(next riot.Limiter, c Ceilings, maxWait time.Duration) riot.Limiter {
	l := &ceilingLimiter{next: next, maxWait: maxWait, now: time.Now}
	if c.PerSecond > 0 {
		l.buckets = append(l.buckets, rate.NewLimiter(rate.Limit(c.PerSecond), c.PerSecond))
	}
	if c.PerMinute > 0 {
		l.buckets = append(l.buckets, rate.NewLimiter(rate.Every(time.Minute/time.Duration(c.PerMinute)), c.PerMinute))
	}
	if len(l.buckets) == 0 {
		return next
	}
	return l
}

// Acquire implements riot.Limiter.
func (l *ceilingLimiter) Acquire(ctx context.Context, c riot.Call) (riot.Permit, error) {
	now := l.now()
	var wait time.Duration
	res := make([]*rate.Reservation, 0, len(l.buckets))
	for _, b := range l.buckets {
		r := b.ReserveN(now, 1)
		res = append(res, r)
		wait = max(wait, r.DelayFrom(now))
	}
	cancel := func() {
		for _, r := range res {
			r.CancelAt(now)
		}
	}
	if dl, ok := ctx.Deadline(); wait > l.maxWait || (ok && now.Add(wait).After(dl)) {
		cancel()
		return nil, &riot.Error{Kind: riot.KindRateLimited, Op: c.Method, RetryAt: now.Add(wait),
			Msg: "riftflow's own ceiling (RIOT_MAX_PER_SECOND / RIOT_MAX_PER_MINUTE)"}
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-ctx.Done():
			cancel()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	return l.next.Acquire(ctx, c)
}
