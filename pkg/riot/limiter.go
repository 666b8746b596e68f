package riot

import (
	"context"
	"net/http"
)

// Call names one Riot request for rate limiting.
type Call struct {
	// Route is the routing value the request goes to: a platform ("jp1")
	// or a regional route ("asia"). Riot keeps separate application and
	// method budgets per route.
	Route string
	// Method is the endpoint's method ID as in the OpenAPI spec, e.g.
	// "match-v5.getMatch", "match-v5.getMatchIdsByPUUID",
	// "account-v1.getByRiotId", "league-v4.getLeagueEntriesByPUUID".
	Method string
	// Background marks calls that may wait behind interactive ones
	// (backfill, scheduled syncs). Interactive calls are served first.
	Background bool
}

// Limiter decides when a Call may be sent. pkg/ratelimit implements it, both
// per process and shared by every process that uses one API key.
type Limiter interface {
	// Acquire blocks until one request for c may be sent and reserves it.
	// It returns an *Error of KindRateLimited with RetryAt set, without
	// reserving anything, when the wait would pass ctx's deadline or the
	// limiter's own maximum wait, so a caller can reschedule instead of
	// holding resources. It returns ctx.Err() when ctx ends first.
	Acquire(ctx context.Context, c Call) (Permit, error)
}

// Permit is one reserved request. Exactly one of its methods must be called.
type Permit interface {
	// Done reports Riot's answer: the status code (0 when no answer came:
	// timeout or connection error) and the response headers (nil if none),
	// from which the limiter learns X-App-Rate-Limit, X-Method-Rate-Limit,
	// their -Count headers, Retry-After and X-Rate-Limit-Type.
	Done(status int, h http.Header)
	// Cancel returns the reservation unused (the request was never sent).
	Cancel()
}
