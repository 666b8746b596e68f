// Package fetchpolicy is the one place of riftflow's fetch retry rules
// (design 000 with Riot's retention), used by the match-fetcher for each
// failed attempt (Decide) and by the retry-sweeper for each due ledger row
// (Sweep); the ledger's SQL takes its threshold from Policy.MaxAttempts
// (store.SettlePending).
//
// The rules:
//   - retention, before any request: a match older than MatchRetention, or
//     the timeline of a match older than TimelineRetention, is
//     outside_retention_window (Expired);
//   - a 404 for a match listed in a window that began more than
//     NotFoundGrace before the retention limit is outside_retention_window
//     at once (NotFoundExpired: Riot lists expired IDs and 404s them);
//   - a 404 for a fetch whose match is known to be older than FreshFor (a
//     timeline: its match was fetched; a sweeper re-publish: the ledger
//     knows) is permanently_unfetchable at once: only a match that may
//     be fresh (Riot has not published it yet) gets the retries;
//   - any other 404 is a failed attempt; MaxAttempts 404s make the fetch
//     permanently_unfetchable;
//   - MaxAttempts failures other than 404 in a row (5xx, timeouts) end the
//     fetcher's retries: the fetch is pending (temporary_failure, left to
//     the retry-sweeper), never final;
//   - attempt N+1 follows failed attempt N after Backoff[N-1] (30 s, 60 s,
//     120 s, 300 s, the last repeating), or a 5xx's Retry-After when later;
//   - the sweeper re-publishes a due row StaleAfter after its last attempt,
//     StaleAfter·2^k after its k-th sweep retry for a pending fetch (at most
//     RetryMax), and makes a row with MaxAttempts 404s final.
package fetchpolicy

import (
	"errors"
	"fmt"
	"time"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/riot"
)

// Defaults of Policy.
const (
	DefaultMaxAttempts       = 5
	DefaultMatchRetention    = 730 * 24 * time.Hour
	DefaultTimelineRetention = 365 * 24 * time.Hour
	DefaultFreshFor          = 6 * time.Hour
	DefaultStaleAfter        = 10 * time.Minute
	DefaultRetryMax          = 6 * time.Hour
	// NotFoundGrace is how far before the retention limit a listing window
	// must begin for its 404s to count as expiry (NotFoundExpired).
	NotFoundGrace = 24 * time.Hour
	// PendingReason starts the ledger error of a pending fetch.
	PendingReason = "left to the retry-sweeper"
)

// DefaultBackoff is design 000's schedule.
var DefaultBackoff = []time.Duration{30 * time.Second, 60 * time.Second, 120 * time.Second, 300 * time.Second}

// Policy holds the numbers of the rules; zero fields take the defaults
// (WithDefaults).
type Policy struct {
	Backoff           []time.Duration
	MaxAttempts       int
	MatchRetention    time.Duration
	TimelineRetention time.Duration
	// FreshFor is how young a match must be for its 404 to be retried
	// (FETCH_NOT_FOUND_FRESH, default 6 h).
	FreshFor   time.Duration
	StaleAfter time.Duration
	RetryMax   time.Duration
}

// WithDefaults fills zero (or negative) fields with the defaults.
func (p Policy) WithDefaults() Policy {
	config.Fill(&p, Policy{Backoff: DefaultBackoff, MaxAttempts: DefaultMaxAttempts, MatchRetention: DefaultMatchRetention,
		TimelineRetention: DefaultTimelineRetention, FreshFor: DefaultFreshFor, StaleAfter: DefaultStaleAfter, RetryMax: DefaultRetryMax})
	return p
}

// Action is what follows a failed attempt.
type Action int

const (
	// Retry: attempt N+1 at Decision.RetryAt.
	Retry Action = iota
	// Pending: the fetcher's retries end; temporary_failure for the sweeper.
	Pending
	// Final: Decision.Outcome (permanently_unfetchable or
	// outside_retention_window).
	Final
)

// Decision is Decide's answer.
type Decision struct {
	Action  Action
	Outcome bus.Outcome // Final: the outcome; Retry and Pending: temporary_failure
	Reason  string      // the ledger's error text
	RetryAt time.Time   // Retry: when attempt N+1 may run
	// Cmd is the failed command with this failure counted (NotFound,
	// NotFoundAt for a 404): what the result reports and, with Attempt+1,
	// the next attempt.
	Cmd bus.FetchCommand
}

// Decide decides what follows attempt cmd.Attempt of cmd failing with err
// at now: a 404 (riot.KindNotFound), a 5xx (KindServer) or a transport
// failure (KindTransport; an error that is not a *riot.Error counts as
// one). Rate-limit waits, key rejections and permanent client errors are
// not failed attempts and are not decided here.
func (p Policy) Decide(cmd bus.FetchCommand, err error, now time.Time) Decision {
	p = p.WithDefaults()
	var re *riot.Error
	if !errors.As(err, &re) {
		re = &riot.Error{Kind: riot.KindTransport, Err: err}
	}
	reason := re.Error()
	d := Decision{Cmd: cmd, Outcome: bus.TemporaryFailure, Reason: reason}
	if re.Kind == riot.KindNotFound {
		d.Cmd.NotFound++
		d.Cmd.NotFoundAt = cmd.Attempt
		switch {
		case p.NotFoundExpired(d.Cmd, now):
			d.Action, d.Outcome = Final, bus.OutsideRetentionWindow
			d.Reason = "404 for a match listed in a window reaching past the match retention (Riot lists expired IDs and 404s them)"
			return d
		case cmd.GameCreationMs > 0 && now.Sub(time.UnixMilli(cmd.GameCreationMs)) > p.FreshFor:
			// Riot publishes a match and its timeline minutes after the
			// game: a 404 for an older one will not change.
			d.Action, d.Outcome = Final, bus.PermanentlyUnfetchable
			d.Reason = fmt.Sprintf("gave up after %d attempts: %s (the match is %s old; only a match younger than %s is asked again after a 404)",
				cmd.Attempt, reason, now.Sub(time.UnixMilli(cmd.GameCreationMs)).Round(time.Minute), p.FreshFor)
			return d
		case d.Cmd.NotFound >= p.MaxAttempts:
			d.Action, d.Outcome = Final, bus.PermanentlyUnfetchable
			d.Reason = fmt.Sprintf("gave up after %d attempts: %s", cmd.Attempt, reason)
			return d
		}
	} else if Streak(cmd) >= p.MaxAttempts {
		d.Action = Pending
		d.Reason = fmt.Sprintf("%s after %d attempts: %s", PendingReason, cmd.Attempt, reason)
		return d
	}
	d.Action, d.RetryAt = Retry, p.NextAttemptAt(cmd.Attempt, re, now)
	return d
}

// Streak is the number of failures other than 404 in a row that cmd's
// failed attempt (not a 404) ends: those since the fetch's last 404
// (NotFoundAt), or, when that is not known (a retry-sweeper re-publish),
// every failure other than 404 it has had (Attempt − NotFound).
func Streak(cmd bus.FetchCommand) int {
	return cmd.Attempt - max(cmd.NotFound, cmd.NotFoundAt)
}

// NextAttemptAt is when a fetch whose attempt number attempt (1-based)
// failed with re is tried again: after the backoff schedule's delay for
// that attempt, or at the Retry-After a 5xx carried when that is later.
func (p Policy) NextAttemptAt(attempt int, re *riot.Error, now time.Time) time.Time {
	return now.Add(re.RetryDelay(now, p.BackoffAfter(attempt)))
}

// BackoffAfter is the delay before attempt n+1 after failed attempt n
// (1-based): Backoff[n-1], the last entry repeating; n < 1 counts as 1;
// 0 without a schedule.
func (p Policy) BackoffAfter(n int) time.Duration {
	if len(p.Backoff) == 0 {
		return 0
	}
	return p.Backoff[min(max(n, 1)-1, len(p.Backoff)-1)]
}

// Expired reports whether a fetch of kind for a match created at
// gameCreationMs (epoch ms; 0 = unknown) is outside Riot's retention at now:
// a match older than MatchRetention, or a timeline of a match older than
// TimelineRetention. reason says why, in days. An unknown date never expires.
func (p Policy) Expired(kind bus.Kind, gameCreationMs int64, now time.Time) (bool, string) {
	if gameCreationMs <= 0 {
		return false, ""
	}
	age := now.Sub(time.UnixMilli(gameCreationMs))
	limit, what := p.MatchRetention, "matches"
	if kind == bus.KindTimeline {
		limit, what = p.TimelineRetention, "timelines"
	}
	if age <= limit {
		return false, ""
	}
	return true, fmt.Sprintf("match is %d days old; Riot keeps %s %d days", int(age.Hours()/24), what, int(limit.Hours()/24))
}

// NotFoundExpired reports whether a 404 for cmd means the match expired
// rather than "not there yet": a match (not a timeline) listed in a window
// whose startTime (ListedAfterS, epoch s) lies more than MatchRetention +
// NotFoundGrace before now. A window that merely touches the retention
// limit (a full sync lists from now − 730 days) says nothing: its matches
// were created after it began.
func (p Policy) NotFoundExpired(cmd bus.FetchCommand, now time.Time) bool {
	return cmd.Kind == bus.KindMatch && cmd.ListedAfterS > 0 &&
		now.Sub(time.Unix(cmd.ListedAfterS, 0)) > p.MatchRetention+NotFoundGrace
}

// SweepAction is what the retry-sweeper does with a due ledger row.
type SweepAction int

const (
	// Republish: publish the fetch again.
	Republish SweepAction = iota
	// Wait: a pending fetch whose sweep backoff is not over.
	Wait
	// MakeFinal: MaxAttempts 404s (the fetcher's final result was lost):
	// permanently_unfetchable with the returned reason.
	MakeFinal
)

// Row is what Sweep reads of a due ledger row.
type Row struct {
	Status     string // temporary_failure or unfetched
	RetryCount int    // failed attempts
	NotFound   int    // failed attempts answered 404
	Since      time.Time
}

// Sweep decides what the sweeper does with row at now.
func (p Policy) Sweep(r Row, now time.Time) (SweepAction, string) {
	p = p.WithDefaults()
	if r.Status != string(bus.TemporaryFailure) {
		return Republish, ""
	}
	if r.NotFound >= p.MaxAttempts {
		return MakeFinal, fmt.Sprintf("gave up after %d attempts, %d of them 404 (sweeper)", r.RetryCount, r.NotFound)
	}
	// A 404 is Riot's answer, not a failed try to reach it: only the
	// other failures space the sweep retries out.
	if r.Since.After(now.Add(-p.PendingDelay(r.RetryCount - r.NotFound))) {
		return Wait, ""
	}
	return Republish, ""
}

// PendingDelay is how long after its last attempt a temporary_failure row
// with retryCount failed attempts other than 404 is due again: StaleAfter
// while the fetcher's own retries may still run (retryCount < MaxAttempts),
// then StaleAfter·2^k for a pending fetch after its k-th sweep retry,
// capped at RetryMax.
func (p Policy) PendingDelay(retryCount int) time.Duration {
	p = p.WithDefaults()
	d := p.StaleAfter
	for k := retryCount - p.MaxAttempts; k > 0 && d < p.RetryMax; k-- {
		d *= 2
	}
	return min(d, p.RetryMax)
}
