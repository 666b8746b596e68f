package app

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"
)

// stage is a Service whose Run returns, once its context ends, after
// drain, with err.
type stage struct {
	drain time.Duration
	err   error
}

func (s stage) Run(ctx context.Context) error {
	<-ctx.Done()
	time.Sleep(s.drain)
	if s.err != nil {
		return s.err
	}
	return ctx.Err()
}

// TestRunUntilDrained: a stop by ctx whose stage drains in time is a nil
// error (its context.Canceled included); a drain longer than the timeout
// and a stage's own error are returned.
func TestRunUntilDrained(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		name    string
		s       stage
		timeout time.Duration
		wantErr bool
	}{
		{"drained", stage{drain: 10 * time.Millisecond}, time.Second, false},
		{"too slow", stage{drain: time.Second}, 50 * time.Millisecond, true},
		{"stage error", stage{err: errors.New("consume failed")}, time.Second, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(20*time.Millisecond, cancel)
			err := runUntilDrained(ctx, ctx, c.s, c.timeout, log)
			if (err != nil) != c.wantErr {
				t.Errorf("err = %v, want error: %v", err, c.wantErr)
			}
		})
	}
}

// TestCloseLastFirstOnce: Close calls what OnClose registered, on the
// Process or a copy of it, last first, and only once.
func TestCloseLastFirstOnce(t *testing.T) {
	p := &Process{closers: &closers{}}
	var got []int
	p.OnClose(func() { got = append(got, 1) })
	cp := *p
	cp.OnClose(func() { got = append(got, 2) })
	p.Close()
	p.Close()
	if want := []int{2, 1}; !slices.Equal(got, want) {
		t.Errorf("closed %v, want %v", got, want)
	}
}
