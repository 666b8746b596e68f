package fault_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/riftflow/riftflow/pkg/fault"
)

func TestKindOf(t *testing.T) {
	base := errors.New("boom")
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	byEOF := func(err error) (fault.Kind, bool) {
		if errors.Is(err, io.EOF) {
			return fault.Invalid, true
		}
		return 0, false
	}
	tests := []struct {
		name string
		err  error
		cls  []fault.Classifier
		want fault.Kind
	}{
		{"unclassified is transient", base, nil, fault.Transient},
		{"wrapped", fault.Wrap(fault.Gone, base), nil, fault.Gone},
		{"wrapf", fault.Wrapf(fault.Invalid, "bad %d", 1), nil, fault.Invalid},
		{"outermost wins", fault.Wrap(fault.Invalid, fault.Wrap(fault.Gone, base)), nil, fault.Invalid},
		{"through fmt %w", fmt.Errorf("ctx: %w", fault.Wrap(fault.Gone, base)), nil, fault.Gone},
		{"retry at", fault.RetryAt(base, at), nil, fault.RateLimited},
		{"canceled", fmt.Errorf("x: %w", context.Canceled), nil, fault.Transient},
		{"deadline beats classifier", context.DeadlineExceeded, []fault.Classifier{func(error) (fault.Kind, bool) { return fault.Invalid, true }}, fault.Transient},
		{"classifier", fmt.Errorf("read: %w", io.EOF), []fault.Classifier{byEOF}, fault.Invalid},
		{"classifier does not know it", base, []fault.Classifier{byEOF}, fault.Transient},
		{"classified beats classifier", fault.Wrap(fault.Gone, io.EOF), []fault.Classifier{byEOF}, fault.Gone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fault.KindOf(tt.err, tt.cls...); got != tt.want {
				t.Errorf("KindOf(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestNilStaysNil(t *testing.T) {
	if fault.Wrap(fault.Invalid, nil) != nil {
		t.Error("Wrap(kind, nil) is not nil")
	}
	if fault.RetryAt(nil, time.Now()) != nil {
		t.Error("RetryAt(nil, t) is not nil")
	}
}

func TestRetryAtOf(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	err := fmt.Errorf("fetch: %w", fault.RetryAt(errors.New("429"), at))
	if got := fault.RetryAtOf(err); !got.Equal(at) {
		t.Errorf("RetryAtOf = %v, want %v", got, at)
	}
	if got := fault.RetryAtOf(errors.New("plain")); !got.IsZero() {
		t.Errorf("RetryAtOf(plain) = %v, want zero", got)
	}
	// The outermost classification is the one read, RetryAt included.
	if got := fault.RetryAtOf(fault.Wrap(fault.Transient, err)); !got.IsZero() {
		t.Errorf("RetryAtOf(re-wrapped) = %v, want zero", got)
	}
}

func TestErrorText(t *testing.T) {
	if got := fault.Wrap(fault.Gone, errors.New("no such match")).Error(); got != "no such match" {
		t.Errorf("Error() = %q", got)
	}
	if got := (&fault.Error{Kind: fault.RateLimited}).Error(); got != "rate_limited" {
		t.Errorf("Error() of a bare kind = %q", got)
	}
	base := errors.New("root")
	if !errors.Is(fault.Wrap(fault.Invalid, base), base) {
		t.Error("Wrap hides its cause from errors.Is")
	}
}

func TestKindStringAndRetryable(t *testing.T) {
	for _, tt := range []struct {
		k         fault.Kind
		s         string
		retryable bool
	}{
		{fault.Transient, "transient", true},
		{fault.RateLimited, "rate_limited", true},
		{fault.Invalid, "invalid", false},
		{fault.Gone, "gone", false},
	} {
		if tt.k.String() != tt.s || tt.k.Retryable() != tt.retryable {
			t.Errorf("%d: String %q Retryable %v, want %q %v", tt.k, tt.k.String(), tt.k.Retryable(), tt.s, tt.retryable)
		}
	}
}
