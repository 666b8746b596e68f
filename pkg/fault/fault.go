// Package fault classifies errors by what a consumer should do about them.
//
// Every stage of the pipeline meets the same four kinds of failure, whatever
// the dependency that produced it:
//
//   - Transient: the dependency is down, busy or restarting (a Postgres
//     connection loss, statement timeout, read-only standby or full disk; a
//     Riot 5xx; a NATS timeout). Retrying later, with backoff, succeeds.
//   - RateLimited: the dependency said when to come back (a Riot 429 with
//     Retry-After). Retrying before that time is wasted or harmful.
//   - Invalid: the input itself is wrong (undecodable JSON, a row Postgres
//     rejects for its data). Retrying the same input can never succeed, so
//     it is recorded with the reason and never retried.
//   - Gone: the thing asked for does not exist (a Riot 404). It is recorded
//     as gone.
//
// An error is classified where it is made (Wrap, Wrapf, RetryAt, or at a
// package's boundary: every pkg/store method returns its Postgres errors
// classified) and read where it is settled (KindOf). An error nobody classified is Transient: when in doubt, a
// message is retried, never dropped.
package fault

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Kind is what a consumer should do about an error.
type Kind uint8

const (
	// Transient errors are retried with capped exponential backoff. It is
	// the kind of every unclassified error.
	Transient Kind = iota
	// RateLimited errors are retried at Error.RetryAt (or with backoff when
	// it is zero).
	RateLimited
	// Invalid errors are recorded with their reason and never retried.
	Invalid
	// Gone errors are recorded as gone and never retried.
	Gone
)

// String is "transient", "rate_limited", "invalid" or "gone": the value of
// the error.kind attribute on logs, spans and metrics.
func (k Kind) String() string {
	switch k {
	case RateLimited:
		return "rate_limited"
	case Invalid:
		return "invalid"
	case Gone:
		return "gone"
	}
	return "transient"
}

// Retryable reports whether an error of kind k is worth retrying.
func (k Kind) Retryable() bool { return k == Transient || k == RateLimited }

// Error is an error with its kind and, for RateLimited, the time at which
// the dependency said to come back.
type Error struct {
	Kind Kind
	// RetryAt is the earliest useful retry (RateLimited; may be zero).
	RetryAt time.Time
	Err     error
}

func (e *Error) Error() string {
	if e.Err == nil {
		return e.Kind.String()
	}
	return e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Wrap returns err classified as kind (nil for a nil err). An err that is
// already classified is re-classified: the outermost Wrap wins.
func Wrap(kind Kind, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Kind: kind, Err: err}
}

// Wrapf is Wrap(kind, fmt.Errorf(format, args...)).
func Wrapf(kind Kind, format string, args ...any) error {
	return &Error{Kind: kind, Err: fmt.Errorf(format, args...)}
}

// RetryAt returns err classified as RateLimited until t.
func RetryAt(err error, t time.Time) error {
	if err == nil {
		return nil
	}
	return &Error{Kind: RateLimited, RetryAt: t, Err: err}
}

// Classifier maps an error it recognises to a kind; ok is false for an
// error it knows nothing about.
type Classifier func(err error) (k Kind, ok bool)

// KindOf returns err's kind: the outermost *Error in its chain, else the
// first classifier that recognises it, else Transient. Context
// cancellation and deadlines are Transient (the work was interrupted, not
// refused).
func KindOf(err error, classifiers ...Classifier) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return Transient
	}
	for _, c := range classifiers {
		if k, ok := c(err); ok {
			return k
		}
	}
	return Transient
}

// RetryAtOf returns the RetryAt of the outermost *Error in err's chain, or
// the zero time.
func RetryAtOf(err error) time.Time {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAt
	}
	return time.Time{}
}
