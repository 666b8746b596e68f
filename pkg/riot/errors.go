package riot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

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

// String returns the kind's name, e.g. "rate_limited".
func (k Kind) String() string {
	switch k {
	case KindRateLimited:
		return "rate_limited"
	case KindServer:
		return "server"
	case KindTransport:
		return "transport"
	case KindNotFound:
		return "not_found"
	case KindBadRequest:
		return "bad_request"
	case KindKeyRejected:
		return "key_rejected"
	case KindDecode:
		return "decode"
	case KindBreakerOpen:
		return "breaker_open"
	}
	return "unknown"
}

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

func (c *Client) transportError(ctx context.Context, req request, status int, err error) *Error {
	msg := "transport"
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		msg = fmt.Sprintf("timeout after %s", c.timeout)
	case errors.Is(err, io.ErrUnexpectedEOF):
		msg = "truncated body"
	}
	return &Error{Kind: KindTransport, Op: req.method, Route: req.route, Status: status,
		Msg: msg, Err: redact(err, c.apiKey)}
}

// statusError maps a non-2xx answer to an *Error (https://developer.riotgames.com/docs/portal#web-apis_response-codes).
func (c *Client) statusError(req request, status int, h http.Header, body []byte, rlBackoff time.Duration) *Error {
	e := &Error{Op: req.method, Route: req.route, Status: status, Msg: c.errorMessage(body)}
	now := c.now()
	ra, hasRA := parseRetryAfter(h.Get("Retry-After"), now)
	switch {
	case status == http.StatusTooManyRequests:
		e.Kind = KindRateLimited
		e.LimitType = h.Get("X-Rate-Limit-Type")
		if hasRA {
			e.RetryAt = now.Add(ra + RetryAfterMargin)
		} else {
			e.RetryAt = now.Add(rlBackoff)
		}
	case status >= 500:
		e.Kind = KindServer
		// A 503 may say when to come back (RFC 9110 §10.2.3); callers wait
		// at least that long (RetryDelay), never less than their backoff.
		if hasRA {
			e.RetryAt = now.Add(ra)
		}
	case status == http.StatusNotFound:
		e.Kind = KindNotFound
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		e.Kind = KindKeyRejected
	case status >= 400:
		e.Kind = KindBadRequest
	default: // 1xx/3xx: not something Riot sends
		e.Kind = KindUnknown
	}
	return e
}

// parseRetryAfter parses Retry-After as delay-seconds (integer or decimal)
// or an HTTP date. It reports false for a missing, negative or unparsable
// value, which must never be read as "now".
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s < 0 || math.IsNaN(s) || s > 86400 {
			return 0, false
		}
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// errorMessage extracts Riot's {"status":{"message":...}} text, if any,
// shortened and with the key removed in case an echo ever contains it.
func (c *Client) errorMessage(body []byte) string {
	var env struct {
		Status struct {
			Message string `json:"message"`
		} `json:"status"`
	}
	if len(body) == 0 || json.Unmarshal(body, &env) != nil {
		return ""
	}
	m := strings.ReplaceAll(env.Status.Message, c.apiKey, "[redacted]")
	if len(m) > 200 {
		m = m[:200] + "…"
	}
	return m
}

// redact hides the key should an underlying error ever print it. The
// result still matches the original's sentinels with errors.Is
// (ErrCrossHostRedirect, context.DeadlineExceeded), but errors.As cannot
// reach the original, whose text holds the key.
func redact(err error, key string) error {
	if err == nil || key == "" || !strings.Contains(err.Error(), key) {
		return err
	}
	return &redactedError{msg: strings.ReplaceAll(err.Error(), key, "[redacted]"), cause: err}
}

type redactedError struct {
	msg   string
	cause error
}

func (e *redactedError) Error() string { return e.msg }

// Is reports whether the original error matches target.
func (e *redactedError) Is(target error) bool { return errors.Is(e.cause, target) }

// GoString keeps %#v from printing the original.
func (e *redactedError) GoString() string { return fmt.Sprintf("riot.redactedError(%q)", e.msg) }
