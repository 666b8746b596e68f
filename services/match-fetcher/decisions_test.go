package matchfetcher

import (
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/riot"
)

// now is the injected clock of these tests.
var now = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func daysAgo(d float64) time.Time { return now.Add(-time.Duration(d * 24 * float64(time.Hour))) }

// defaults is the configuration New fills in when nothing is configured
// (FETCH_BACKOFF, FETCH_MAX_ATTEMPTS, *_RETENTION_DAYS unset).
func defaults(t *testing.T) Config {
	t.Helper()
	return Config{Backoff: DefaultBackoff, FetchAttempts: config.FetchAttempts{MaxAttempts: 5},
		Retention: config.Retention{MatchRetention: 730}, TimelineRetention: 365}
}

func TestExpired(t *testing.T) {
	c := defaults(t)
	for _, tc := range []struct {
		name    string
		kind    bus.Kind
		created time.Time
		want    bool
		reason  string
	}{
		{"unknown date is never expired", bus.KindMatch, time.Time{}, false, ""},
		{"unknown timeline date", bus.KindTimeline, time.Time{}, false, ""},
		{"fresh match", bus.KindMatch, daysAgo(1), false, ""},
		{"match at 729 days", bus.KindMatch, daysAgo(729), false, ""},
		{"match exactly 730 days", bus.KindMatch, daysAgo(730), false, ""},
		{"match 730 days and a minute", bus.KindMatch, daysAgo(730).Add(-time.Minute), true, "keeps matches 730 days"},
		{"match 1000 days", bus.KindMatch, daysAgo(1000), true, "1000 days old"},
		{"timeline at 364 days", bus.KindTimeline, daysAgo(364), false, ""},
		{"timeline at 366 days", bus.KindTimeline, daysAgo(366), true, "keeps timelines 365 days"},
		{"match at 366 days is still fetched", bus.KindMatch, daysAgo(366), false, ""},
		{"future date (clock skew)", bus.KindTimeline, now.Add(time.Hour), false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ms int64
			if !tc.created.IsZero() {
				ms = tc.created.UnixMilli()
			}
			got, reason := c.Expired(tc.kind, ms, now)
			if got != tc.want || !strings.Contains(reason, tc.reason) || (!got && reason != "") {
				t.Fatalf("Expired(%s, %v) = %v %q, want %v containing %q", tc.kind, tc.created, got, reason, tc.want, tc.reason)
			}
		})
	}
	// Configured retention (MATCH_RETENTION_DAYS) is honoured.
	short := c
	short.MatchRetention = 10
	if got, _ := short.Expired(bus.KindMatch, daysAgo(11).UnixMilli(), now); !got {
		t.Fatal("an 11-day-old match must be expired under a 10-day retention")
	}
}

func TestNotFoundExpired(t *testing.T) {
	c := defaults(t)
	for _, tc := range []struct {
		name string
		cmd  bus.FetchCommand
		want bool
	}{
		{"no listing window: a failed attempt", bus.FetchCommand{Kind: bus.KindMatch}, false},
		{"window within retention", bus.FetchCommand{Kind: bus.KindMatch, ListedAfterS: daysAgo(365).Unix()}, false},
		{"window starting exactly at retention", bus.FetchCommand{Kind: bus.KindMatch, ListedAfterS: daysAgo(730).Unix()}, false},
		// A full 730-day backfill, fetched a while after listing: the window
		// touches retention but its matches were created after it began.
		{"730-day backfill fetched hours later", bus.FetchCommand{Kind: bus.KindMatch, ListedAfterS: daysAgo(730).Add(-5 * time.Hour).Unix()}, false},
		{"window reaching past retention", bus.FetchCommand{Kind: bus.KindMatch, ListedAfterS: daysAgo(732).Unix()}, true},
		{"a timeline 404 is never a listing artefact", bus.FetchCommand{Kind: bus.KindTimeline, ListedAfterS: daysAgo(900).Unix()}, false},
	} {
		if got := c.NotFoundExpired(tc.cmd, now); got != tc.want {
			t.Errorf("%s: NotFoundExpired = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestBackoffAfter(t *testing.T) {
	c := defaults(t)
	want := map[int]time.Duration{0: 30 * time.Second, 1: 30 * time.Second, 2: 60 * time.Second, 3: 120 * time.Second,
		4: 300 * time.Second, 5: 300 * time.Second, 9: 300 * time.Second}
	for n, d := range want {
		if got := c.BackoffAfter(n); got != d {
			t.Errorf("BackoffAfter(%d) = %v, want %v", n, got, d)
		}
	}
	// The seed's schedule: the delays before attempts 2..5 sum to 8.5 minutes.
	var total time.Duration
	for n := 1; n < c.MaxAttempts; n++ {
		total += c.BackoffAfter(n)
	}
	if total != 510*time.Second {
		t.Errorf("total backoff over %d attempts = %v, want 8m30s", c.MaxAttempts, total)
	}
	fast := Config{Backoff: []time.Duration{time.Second}}
	if fast.BackoffAfter(4) != time.Second {
		t.Error("a one-entry schedule repeats its entry")
	}
	if (Config{}).BackoffAfter(1) != 0 {
		t.Error("no schedule: no delay")
	}
}

// TestNextAttemptAt: the backoff schedule, unless a 5xx's Retry-After asks
// for longer; a shorter Retry-After never shortens the schedule.
func TestNextAttemptAt(t *testing.T) {
	c := defaults(t)
	plain := &riot.Error{Kind: riot.KindServer, Status: 500}
	long := &riot.Error{Kind: riot.KindServer, Status: 503, RetryAt: now.Add(10 * time.Minute)}
	short := &riot.Error{Kind: riot.KindServer, Status: 503, RetryAt: now.Add(5 * time.Second)}
	for _, tc := range []struct {
		attempt int
		err     *riot.Error
		want    time.Duration
	}{{1, plain, 30 * time.Second}, {3, plain, 120 * time.Second}, {1, long, 10 * time.Minute},
		{4, long, 10 * time.Minute}, {1, short, 30 * time.Second}} {
		if got := c.NextAttemptAt(tc.attempt, tc.err, now).Sub(now); got != tc.want {
			t.Errorf("attempt %d after %d (RetryAt %v): in %v, want %v", tc.attempt, tc.err.Status, tc.err.RetryAt, got, tc.want)
		}
	}
}
