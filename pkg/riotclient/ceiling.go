package riotclient

import (
	"time"

	"github.com/riftflow/riftflow/pkg/ratelimit"
	"github.com/riftflow/riftflow/pkg/riot"
)

// Ceilings are design 002's own per-second and per-minute limits, set
// below Riot's (RIOT_MAX_PER_SECOND, RIOT_MAX_PER_MINUTE; 0 = none). They
// count every Riot request made with the key, whatever the route or
// method, by every process that shares the rate limiter (as BullMQ's
// global rate limit did): with the shared limiter they are KV windows of
// the key (ratelimit.Shared.Ceiling), so N replicas together stay under
// them; with RIOT_SHARED_RATELIMIT=false, each process alone.
type Ceilings struct {
	PerSecond int `env:"RIOT_MAX_PER_SECOND" envDefault:"0"`
	PerMinute int `env:"RIOT_MAX_PER_MINUTE" envDefault:"0"`
}

// Limits are c's windows: PerSecond per 1 s, PerMinute per 60 s (none
// for a 0).
func (c Ceilings) Limits() []ratelimit.Limit {
	var ls []ratelimit.Limit
	if c.PerSecond > 0 {
		ls = append(ls, ratelimit.Limit{N: c.PerSecond, Window: time.Second})
	}
	if c.PerMinute > 0 {
		ls = append(ls, ratelimit.Limit{N: c.PerMinute, Window: time.Minute})
	}
	return ls
}

// ceilinged is a limiter that can put key-wide ceilings in front of itself
// (ratelimit.Local, ratelimit.Shared).
type ceilinged interface {
	riot.Limiter
	Ceiling([]ratelimit.Limit) riot.Limiter
}

// WithCeilings puts c's ceilings in front of lim's budgets, counted where
// lim counts (every process of the key for ratelimit.Shared); a wait
// longer than the limiter's MaxWait or ctx's deadline is a *riot.Error of
// KindRateLimited with RetryAt. No ceiling set: lim itself.
func WithCeilings(lim ceilinged, c Ceilings) riot.Limiter { return lim.Ceiling(c.Limits()) }
