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

// Permit is one reserved request. Exactly one of Done and Cancel must be
// called, or Send must have returned false.
//
// A grant carries a send deadline: the latest time at which the request
// may go on the wire and still be counted by Riot in the windows the
// limiter counted it in. The Client calls Send in its HTTP transport
// immediately before the request is written (after the limiter's wait,
// the breaker and the connection pool), so a request granted in time but
// sent late (CPU starvation, CFS throttling, a GC pause) is never sent on
// that grant.
type Permit interface {
	// Send reports whether the request may be written now. It is called
	// once, immediately before the request goes on the wire. false means
	// the grant's deadline has passed: the permit has already been
	// returned to its budget (as Cancel does; neither Done nor Cancel may
	// follow) and the request must not be sent; the caller acquires a new
	// permit, in a later window.
	Send() bool
	// Written reports that the request has been written to the
	// connection (on NewTransport's connections when the socket took the
	// Write that called Send; elsewhere httptrace WroteRequest): the time
	// since Send is how long this process takes to put a checked request
	// on the wire, which the limiter keeps its deadlines clear of.
	// Optional; at most once, only after a Send that returned true, and
	// possibly after Done (the answer can overtake the report).
	Written()
	// Done reports Riot's answer: the status code (0 when no answer came:
	// timeout or connection error) and the response headers (nil if none),
	// from which the limiter learns X-App-Rate-Limit, X-Method-Rate-Limit,
	// their -Count headers, Retry-After and X-Rate-Limit-Type.
	Done(status int, h http.Header)
	// Cancel returns the reservation unused (the request was never sent).
	Cancel()
}
