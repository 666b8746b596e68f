package tick

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestEveryCallsUntilCancel: fn runs repeatedly, not at the start, and
// never again once Every has returned.
func TestEveryCallsUntilCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	var n atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, time.Millisecond, func() {
			if n.Add(1) == 3 {
				cancel()
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not return after its context ended")
	}
	got := n.Load()
	if got < 3 {
		t.Fatalf("fn ran %d times before the cancel, want 3", got)
	}
	time.Sleep(5 * time.Millisecond)
	if n.Load() != got {
		t.Fatal("fn ran after Every returned")
	}

	n.Store(0)
	short, stop := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer stop()
	Every(short, time.Hour, func() { n.Add(1) })
	if n.Load() != 0 {
		t.Fatal("fn ran before the first interval")
	}
}

func TestSleep(t *testing.T) {
	if err := Sleep(t.Context(), time.Millisecond); err != nil {
		t.Fatalf("Sleep(1ms) = %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on an ended context = %v, want context.Canceled", err)
	}
	if err := Sleep(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep(0) on an ended context = %v, want context.Canceled", err)
	}
	if err := Sleep(t.Context(), -time.Second); err != nil {
		t.Fatalf("Sleep(-1s) = %v, want nil", err)
	}
	if time.Since(start) > time.Minute {
		t.Fatal("Sleep waited past its context's end")
	}
}
