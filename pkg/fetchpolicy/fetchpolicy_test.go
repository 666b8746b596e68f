package fetchpolicy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/riot"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	p := Policy{}.WithDefaults()
	nf := &riot.Error{Kind: riot.KindNotFound, Status: 404}
	five := &riot.Error{Kind: riot.KindServer, Status: 503}
	ago := func(d time.Duration) int64 { return now.Add(-d).UnixMilli() }
	for _, tc := range []struct {
		name    string
		cmd     bus.FetchCommand
		err     error
		action  Action
		outcome bus.Outcome
		reason  string
	}{
		{"404 of a match of unknown age: retried", bus.FetchCommand{Kind: bus.KindMatch, Attempt: 1}, nf, Retry, bus.TemporaryFailure, "404"},
		{"404 of a fresh timeline: retried", bus.FetchCommand{Kind: bus.KindTimeline, Attempt: 1, GameCreationMs: ago(time.Hour)}, nf, Retry, bus.TemporaryFailure, "404"},
		{"404 of a day-old timeline: final at once", bus.FetchCommand{Kind: bus.KindTimeline, Attempt: 1, GameCreationMs: ago(24 * time.Hour)}, nf,
			Final, bus.PermanentlyUnfetchable, "gave up after 1 attempts"},
		{"fifth 404: final", bus.FetchCommand{Kind: bus.KindMatch, Attempt: 7, NotFound: 4}, nf, Final, bus.PermanentlyUnfetchable, "gave up after 7"},
		{"404 listed past retention: outside retention", bus.FetchCommand{Kind: bus.KindMatch, Attempt: 1,
			ListedAfterS: now.Add(-733 * 24 * time.Hour).Unix()}, nf, Final, bus.OutsideRetentionWindow, "reaching past"},
		{"503: retried", bus.FetchCommand{Kind: bus.KindMatch, Attempt: 2}, five, Retry, bus.TemporaryFailure, "503"},
		{"fifth 503 in a row: pending", bus.FetchCommand{Kind: bus.KindMatch, Attempt: 5}, five, Pending, bus.TemporaryFailure, PendingReason},
		{"503s after a 404 count from it", bus.FetchCommand{Kind: bus.KindMatch, Attempt: 5, NotFound: 1, NotFoundAt: 2}, five, Retry, bus.TemporaryFailure, "503"},
		{"any other error: a transport failure", bus.FetchCommand{Kind: bus.KindMatch, Attempt: 1}, errors.New("reset"), Retry, bus.TemporaryFailure, "reset"},
	} {
		d := p.Decide(tc.cmd, tc.err, now)
		if d.Action != tc.action || d.Outcome != tc.outcome || !strings.Contains(d.Reason, tc.reason) {
			t.Errorf("%s: %+v", tc.name, d)
		}
		if d.Action == Retry && !d.RetryAt.After(now) {
			t.Errorf("%s: retry at %v", tc.name, d.RetryAt)
		}
	}
}

func TestSweep(t *testing.T) {
	now := time.Now()
	p := Policy{StaleAfter: 10 * time.Minute, RetryMax: time.Hour}
	for _, tc := range []struct {
		row  Row
		want SweepAction
	}{
		{Row{Status: "unfetched", Since: now}, Republish},
		{Row{Status: "temporary_failure", RetryCount: 5, NotFound: 5, Since: now}, MakeFinal},
		{Row{Status: "temporary_failure", RetryCount: 7, Since: now.Add(-30 * time.Minute)}, Wait}, // 40 min after 2 sweep retries
		{Row{Status: "temporary_failure", RetryCount: 7, Since: now.Add(-41 * time.Minute)}, Republish},
		{Row{Status: "temporary_failure", RetryCount: 40, Since: now.Add(-59 * time.Minute)}, Wait}, // capped at 1 h
	} {
		if got, _ := p.Sweep(tc.row, now); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.row, got, tc.want)
		}
	}
}
