package stagetest

// Helpers for any test, with or without a stage: waiting on a channel,
// decoding JSON, capturing logs, a free port, a scheduler clock.

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/freeport"
)

// Next is the next value on ch, or a test failure after a minute.
func Next[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("gave up waiting for %s", what)
		panic("unreachable")
	}
}

// Writer is an io.Writer onto t.Log when the test runs with -v, and a
// sink otherwise.
func Writer(t testing.TB) io.Writer { return TestLog{t} }

// TestLog writes each line to T.Log when the test runs with -v, and
// nowhere otherwise.
type TestLog struct{ T testing.TB }

func (w TestLog) Write(p []byte) (int, error) {
	if testing.Verbose() {
		w.T.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// Decode is raw decoded as JSON into a T, or a test failure.
func Decode[T any](t testing.TB, raw []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return v
}

// Logs is an io.Writer for a test's logger that many goroutines may write
// to, and the test read.
type Logs struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *Logs) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// Count is how many times s was written so far.
func (l *Logs) Count(s string) int { return strings.Count(l.String(), s) }

// Reset forgets everything written so far.
func (l *Logs) Reset() { l.mu.Lock(); defer l.mu.Unlock(); l.b.Reset() }

// NextMonday is the first Monday 00:00 UTC at least a week after t: a
// clock for scheduler tests that no cron time has passed yet.
func NextMonday(t time.Time) time.Time {
	d := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC).AddDate(0, 0, 7)
	for d.Weekday() != time.Monday {
		d = d.AddDate(0, 0, 1)
	}
	return d
}

// FreePort is a free loopback TCP port (freeport.Get), or a test failure.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := freeport.Get()
	if err != nil {
		t.Fatal(err)
	}
	return port
}
