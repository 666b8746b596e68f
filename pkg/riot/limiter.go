package riot

import (
	"context"
	"net/http"
	"strconv"
	"time"
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

// Kind classifies a Riot call's failure for retry decisions.
type Kind int

const (
	// KindUnknown is an error the client could not classify; not retried.
	KindUnknown Kind = iota
	// KindRateLimited: a 429, or the limiter would make the call wait past
	// the caller's deadline. Retry at RetryAt; never counts as a failed attempt.
	KindRateLimited
	// KindServer: 5xx. Retryable with backoff.
	KindServer
	// KindTransport: timeout, connection refused or reset, truncated body.
	// Retryable with backoff.
	KindTransport
	// KindNotFound: 404. Not retried in a loop (unknown-resource calls count
	// toward a blacklist); callers may allow a few delayed retries.
	KindNotFound
	// KindBadRequest: 400, 405, 415 and other 4xx. Permanent.
	KindBadRequest
	// KindKeyRejected: 401 or 403: missing, invalid, expired or blacklisted
	// key. Permanent, and every further call with the key is refused.
	KindKeyRejected
	// KindDecode: a 200 whose body is not the expected JSON. Permanent.
	KindDecode
	// KindBreakerOpen: the routing host's circuit breaker is open. Retryable.
	KindBreakerOpen
)

// Error is every error returned by the Riot client and the limiter.
// It never contains the API key.
type Error struct {
	Kind   Kind
	Op     string // method ID, e.g. "match-v5.getMatch"
	Route  string // routing value, e.g. "asia"
	Status int    // HTTP status, 0 if no answer
	// RetryAt is when a retry may be made (KindRateLimited, KindBreakerOpen,
	// and KindServer when a 5xx carried Retry-After);
	// zero if unknown.
	RetryAt time.Time
	// LimitType is X-Rate-Limit-Type on a 429: application, method, service,
	// server, or "" when Riot sent none (an underlying-service limit).
	LimitType string
	Msg       string
	Err       error
}

func (e *Error) Error() string {
	s := "riot " + e.Op
	if e.Route != "" {
		s += " (" + e.Route + ")"
	}
	if e.Status != 0 {
		s += ": " + http.StatusText(e.Status) + " " + strconv.Itoa(e.Status)
	}
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Retryable reports whether a later attempt may succeed.
func (e *Error) Retryable() bool {
	switch e.Kind {
	case KindRateLimited, KindServer, KindTransport, KindBreakerOpen:
		return true
	}
	return false
}

// RetryDelay is how long to wait before retrying after e: until RetryAt
// when Riot or the limiter gave one, and never less than min.
func (e *Error) RetryDelay(now time.Time, min time.Duration) time.Duration {
	if !e.RetryAt.IsZero() {
		if d := e.RetryAt.Sub(now); d > min {
			return d
		}
	}
	return min
}
