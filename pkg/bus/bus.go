// Package bus defines riftflow's NATS subjects and the messages that travel on
// them between the services. It is the contract of the pipeline: every
// service encodes and decodes through these types, and nothing else.
//
// The flow (docs/reliability.md and README.md):
//
//	lol.ingest.request        IngestRequest   → resolver
//	lol.sync.<platform>       SyncCommand     → matchid-lister
//	lol.match.fetch.<region>  FetchCommand    → match-fetcher   (Nats-Msg-Id = match ID)
//	lol.match.fetched.<region> FetchResult    → persister       (success, payload gzip)
//	lol.match.failed.<region>  FetchResult    → persister       (failure outcome)
//
// Every stage has two queues, so interactive work never waits behind a
// backfill: lol.ingest.request (interactive) and lol.ingest.request.background;
// past the resolver, "<subject>.interactive" beside each background subject
// above (SyncFor, FetchFor, FetchedFor, FailedFor). Each queue has its own
// durable consumer and its own workers.
//
//	lol.progress.<puuid>      ProgressEvent   → clients (EVENTS stream, WebSocket)
//	lol.ingest.rejected       Rejection       → clients, logs
//
// All timestamps in messages are explicit about their unit in the field name:
// ...Ms is epoch milliseconds (Riot's gameCreation), ...S is epoch seconds
// (Riot's match-list startTime/endTime); time.Time fields are RFC 3339.
package bus

import (
	"errors"
	"strings"
	"time"
)

// DefaultPrefix is the default first token of every subject.
const DefaultPrefix = "lol"

// Subjects builds subject names under a configurable prefix.
// The zero value uses DefaultPrefix.
type Subjects struct{ Prefix string }

func (s Subjects) p() string {
	if s.Prefix == "" {
		return DefaultPrefix
	}
	return s.Prefix
}

// IngestRequest is the subject users publish IngestRequest messages on.
// It is the interactive queue of the resolver: a user's request is never
// behind a backlog of scheduled ones (IngestFor).
func (s Subjects) IngestRequest() string { return s.p() + ".ingest.request" }

// IngestFor is the ingest subject for a priority: background requests
// (scheduled syncs, `riftflow sync --background`) go to
// "<prefix>.ingest.request.background", a queue of their own with its own
// resolver workers; interactive ones to IngestRequest.
func (s Subjects) IngestFor(p Priority) string {
	if p == Background {
		return s.IngestRequest() + ".background"
	}
	return s.IngestRequest()
}

// IngestRejected carries a Rejection for every request that was refused.
func (s Subjects) IngestRejected() string { return s.p() + ".ingest.rejected" }

// IngestQueued is the subject of the copy of every ingest request the
// INGEST stream stored on ingestSubject (IngestFor): JetStream itself
// publishes it (the stream's RePublish, "<prefix>.ingest.>" onto
// "<prefix>.ingest.queued.>"), with the request's body and headers plus
// Nats-Stream, Nats-Subject (ingestSubject), Nats-Sequence and
// Nats-Time-Stamp (its sequence and time in INGEST). The retry-sweeper
// records each as a pending job.
func (s Subjects) IngestQueued(ingestSubject string) string {
	return s.p() + ".ingest.queued." + strings.TrimPrefix(ingestSubject, s.p()+".ingest.")
}

// IngestQueuedAll matches every IngestQueued subject.
func (s Subjects) IngestQueuedAll() string { return s.p() + ".ingest.queued.>" }

// Sync carries SyncCommands for accounts on one platform ("jp1").
func (s Subjects) Sync(platform string) string { return s.p() + ".sync." + platform }

// SyncFor is the Sync subject for a priority: interactive commands go to
// "<prefix>.sync.<platform>.interactive", background ones to Sync(platform),
// each read by its own lister consumer.
func (s Subjects) SyncFor(platform string, p Priority) string {
	return forPriority(s.Sync(platform), p)
}

// interactiveToken is the last subject token of every interactive queue
// past the resolver.
const interactiveToken = ".interactive"

// forPriority is the queue of a priority past the resolver: subject itself
// for background work, subject + interactiveToken for interactive work.
func forPriority(subject string, p Priority) string {
	if p == Interactive {
		return subject + interactiveToken
	}
	return subject
}

// SyncAll matches every Sync subject.
func (s Subjects) SyncAll() string { return s.p() + ".sync.>" }

// Fetch carries FetchCommands for one regional route ("asia").
func (s Subjects) Fetch(region string) string { return s.p() + ".match.fetch." + region }

// FetchFor is the Fetch subject for a priority: interactive fetches go to
// "<prefix>.match.fetch.<region>.interactive", a queue of their own, so a
// user's request never waits behind a background backlog; background
// fetches to Fetch(region).
func (s Subjects) FetchFor(region string, p Priority) string {
	return forPriority(s.Fetch(region), p)
}

// FetchAll matches every Fetch subject.
func (s Subjects) FetchAll() string { return s.p() + ".match.fetch.>" }

// FetchRetry is the subject of a scheduled (delayed) FetchCommand; token
// must be unique per pending schedule. Schedules live in the FETCH stream
// and fire onto Fetch(region).
func (s Subjects) FetchRetry(region, token string) string {
	return s.p() + ".match.retry." + region + "." + token
}

// FetchRetryAll matches every FetchRetry subject.
func (s Subjects) FetchRetryAll() string { return s.p() + ".match.retry.>" }

// Fetched carries successful FetchResults for one region.
func (s Subjects) Fetched(region string) string { return s.p() + ".match.fetched." + region }

// Failed carries unsuccessful FetchResults for one region.
func (s Subjects) Failed(region string) string { return s.p() + ".match.failed." + region }

// FetchedFor and FailedFor are Fetched and Failed for a priority: the
// results of interactive fetches go to "<subject>.interactive", read by the
// persister's interactive consumer, so they are stored while a backfill's
// results still queue.
func (s Subjects) FetchedFor(region string, p Priority) string {
	if p == Interactive {
		return s.Fetched(region) + interactiveToken
	}
	return s.Fetched(region)
}

// FailedFor: see FetchedFor.
func (s Subjects) FailedFor(region string, p Priority) string {
	if p == Interactive {
		return s.Failed(region) + interactiveToken
	}
	return s.Failed(region)
}

// ResultsAll matches every Fetched and Failed subject (the persister's input).
func (s Subjects) ResultsAll() []string {
	return []string{s.p() + ".match.fetched.>", s.p() + ".match.failed.>"}
}

// Progress carries ProgressEvents for one account.
func (s Subjects) Progress(puuid string) string { return s.p() + ".progress." + puuid }

// ProgressAll matches every Progress subject.
func (s Subjects) ProgressAll() string { return s.p() + ".progress.>" }

// Dead is the prefix of the dead-letter subjects: a message a consumer gave
// up on is kept on "<prefix>.dead.<stream>" (natsx.DeadLetter).
func (s Subjects) Dead() string { return s.p() + ".dead" }

// WeeklyReport announces stored weekly reports.
func (s Subjects) WeeklyReport() string { return s.p() + ".report.weekly" }

// InboxPrefix is the reply-subject prefix of a NATS user's connections,
// "_INBOX_<user>" instead of the shared "_INBOX": each service user may
// subscribe only to its own inboxes (streams.Grants), so no user can read
// another's JetStream replies.
func InboxPrefix(user string) string { return "_INBOX_" + user }

// Mode says how far back a sync lists matches.
type Mode string

const (
	// ModeLatest lists the newest count matches whatever their age
	// (design 002's "latest N"): from the account's cursor when it has
	// one (only matches newer than the last sync), else with no lower
	// bound. lookback_days does not apply.
	ModeLatest Mode = "latest"
	// ModeFull backfills lookback_days (INGESTION_LOOKBACK_DAYS), bounded by
	// count (INGESTION_MAX_MATCHES_PER_RUN) and Riot's ~1000-match list cap.
	ModeFull Mode = "full"
)

// Priority orders Riot calls when the rate budget is short.
type Priority string

const (
	// Interactive: a user asked for this player now. Served first.
	Interactive Priority = "interactive"
	// Background: scheduled syncs and backfills.
	Background Priority = "background"
)

// Kind is what a fetch is for: the MatchDto or the TimelineDto of a match.
type Kind string

const (
	KindMatch    Kind = "match"
	KindTimeline Kind = "timeline"
)

// Outcome is a fetch's ledger status (match_fetches.status).
type Outcome string

const (
	Unfetched              Outcome = "unfetched"
	Success                Outcome = "success"
	TemporaryFailure       Outcome = "temporary_failure"
	PermanentlyUnfetchable Outcome = "permanently_unfetchable"
	OutsideRetentionWindow Outcome = "outside_retention_window"
)

// Final reports whether no further attempt will be made for the outcome.
func (o Outcome) Final() bool {
	return o == Success || o == PermanentlyUnfetchable || o == OutsideRetentionWindow
}

// SyncCommand asks the matchid-lister to sync one resolved account.
// Published by the resolver on Sync(platform) with Nats-Msg-Id = RequestID.
type SyncCommand struct {
	RequestID string    `json:"request_id"`
	PUUID     string    `json:"puuid"`
	GameName  string    `json:"game_name,omitempty"`
	TagLine   string    `json:"tag_line,omitempty"`
	Platform  string    `json:"platform"` // platform routing value, e.g. "jp1"
	Region    string    `json:"region"`   // regional routing value, e.g. "asia"
	Mode      Mode      `json:"mode"`
	Count     int       `json:"count"`             // max matches to list this run (≥1)
	Lookback  int       `json:"lookback_days"`     // full mode: days back from now
	Queue     *int      `json:"queue,omitempty"`   // match-v5 queue filter (queueId)
	Type      string    `json:"type,omitempty"`    // match-v5 type filter
	Priority  Priority  `json:"priority"`          // interactive | background
	Trigger   string    `json:"trigger,omitempty"` // cli, http, nats, schedule, link, login, recovery
	Requested time.Time `json:"requested_at"`
	// Force refetches and overwrites listed matches that are stored already.
	Force bool `json:"force,omitempty"`
	// RequestedBy is the requester's free-text name (jobs.requested_by).
	RequestedBy string `json:"requested_by,omitempty"`
	// PlatformFound is true when the request named no platform and the
	// resolver found Platform through account-v1 getActiveRegion (recorded
	// in jobs.detail.platform_found).
	PlatformFound bool `json:"platform_found,omitempty"`
}

// FetchCommand asks the match-fetcher to fetch one MatchDto or TimelineDto.
// The lister publishes Kind=match with Nats-Msg-Id = MatchID; the fetcher
// publishes Kind=timeline after a successful match fetch with Nats-Msg-Id =
// MatchID+"/timeline". A scheduled retry carries Attempt+1 and a Nats-Msg-Id
// of the form MatchID/kind/aN, so dedup never swallows it.
type FetchCommand struct {
	MatchID string `json:"match_id"`
	Kind    Kind   `json:"kind"`
	Region  string `json:"region"` // regional routing value from the match ID prefix
	// Attempt is the 1-based number of the failed-or-not attempt this
	// delivery makes. Rate-limit waits do not increase it.
	Attempt int `json:"attempt"`
	// NotFound counts 404 answers so far (freshly listed matches get a few
	// delayed retries before they are permanently_unfetchable).
	NotFound int `json:"not_found,omitempty"`
	// NotFoundAt is the attempt Riot last answered 404 (0: none, or not
	// known, as on a retry-sweeper re-publish). The failures other than
	// 404 after it are the streak that hands a fetch to the retry-sweeper.
	NotFoundAt int `json:"not_found_at,omitempty"`
	// GameCreationMs is the match's gameCreation (epoch ms) when known
	// (always for timelines, from an earlier fetch or the request); 0 if unknown.
	GameCreationMs int64 `json:"game_creation_ms,omitempty"`
	// ListedAfterS is a lower bound on the match's start (epoch seconds): the
	// startTime of the match-list window it was listed in; 0 if unknown.
	ListedAfterS int64    `json:"listed_after_s,omitempty"`
	RequestID    string   `json:"request_id,omitempty"`
	PUUID        string   `json:"puuid,omitempty"` // the account whose sync listed it
	Priority     Priority `json:"priority,omitempty"`
	// Force marks a refetch of a stored match (a forced sync, or a replay
	// by `riftflow retry`): its Nats-Msg-Ids carry DedupSuffix so the
	// stream's duplicate window does not swallow it.
	Force bool `json:"force,omitempty"`
	// Hold is the token of the message schedule this command was delivered
	// from ("" for any other command): the fetch ledger's held_by while the
	// schedule waited. A command whose fetch is held by another schedule
	// makes no Riot call.
	Hold string `json:"hold,omitempty"`
	// PrevHold is the Hold of the command that made this command's
	// schedule ("" when none): until this command's own hold is recorded
	// the fetch may still show its predecessor's, which does not turn it
	// away (a schedule can fire before its hold is written).
	PrevHold string `json:"prev_hold,omitempty"`
}

// DedupSuffix is appended to every Nats-Msg-Id derived from c: "" for an
// ordinary fetch, "/f:<request id>" for a forced one, so a refetch is a new
// message while repeats of the same forced request still deduplicate.
func (c FetchCommand) DedupSuffix() string {
	if !c.Force {
		return ""
	}
	return "/f:" + c.RequestID
}

// FetchResult is a fetch's outcome, published by the match-fetcher on
// Fetched(region) (Outcome success, Payload set) or Failed(region).
// The persister turns it into rows and one match_fetches ledger update.
// On the wire it is encoded by EncodeFetchResult and read by
// DecodeFetchResult: an inline payload travels as the message data, as
// Riot's gzip bytes, never as base64 inside JSON.
type FetchResult struct {
	MatchID string  `json:"match_id"`
	Kind    Kind    `json:"kind"`
	Region  string  `json:"region"`
	Outcome Outcome `json:"outcome"`
	Attempt int     `json:"attempt"`
	// Status is the HTTP status of the last Riot answer (0 if none was made).
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"` // reason for a non-success outcome
	// Payload is the raw Riot JSON body, gzip-compressed (success only).
	Payload []byte `json:"payload,omitempty"`
	// PayloadRef, instead of Payload, names the object in the "payloads"
	// JetStream object store that holds a payload too large for one NATS
	// message ("<match>/<kind>/a<attempt>").
	PayloadRef     string    `json:"payload_ref,omitempty"`
	GameCreationMs int64     `json:"game_creation_ms,omitempty"`
	AttemptedAt    time.Time `json:"attempted_at"`
	RequestID      string    `json:"request_id,omitempty"`
	PUUID          string    `json:"puuid,omitempty"`
	// Timeline is what the fetcher's bounded scan read from a TimelineDto
	// payload (success of a timeline fetch only; nil from fetchers before
	// it existed, and the persister then scans the payload itself).
	Timeline *TimelineMeta `json:"timeline,omitempty"`
}

// TimelineMeta is the part of a TimelineDto stored as columns of
// match_timelines.
type TimelineMeta struct {
	FrameIntervalMs int64 `json:"frame_interval_ms"` // info.frameInterval, ms (60000 on Riot's servers)
	FrameCount      int   `json:"frame_count"`       // len(info.frames)
}

// ProgressEvent reports an account sync's progress on Progress(puuid).
type ProgressEvent struct {
	RequestID string `json:"request_id,omitempty"`
	PUUID     string `json:"puuid"`
	Status    string `json:"status"` // pending | syncing | completed | failed
	Progress  int    `json:"progress"`
	Total     int    `json:"total"`
	// Pending counts, on a completed sync, matches whose fetch is still
	// being retried by the retry-sweeper (Riot kept failing); they are
	// stored whenever a retry succeeds.
	Pending int       `json:"pending,omitempty"`
	MatchID string    `json:"match_id,omitempty"`
	Error   string    `json:"error,omitempty"`
	At      time.Time `json:"at"`
}

// Rejection explains why an ingest request was refused (on IngestRejected).
type Rejection struct {
	RequestID string    `json:"request_id,omitempty"`
	Reason    string    `json:"reason"`
	Code      int       `json:"code"` // HTTP-like: 400 bad input, 404 unknown player, 409 already syncing
	Subject   string    `json:"subject,omitempty"`
	Raw       string    `json:"raw,omitempty"` // first 256 bytes of the offending payload
	At        time.Time `json:"at"`
}

// ErrBadRequest marks a request error caused by its content; it is never retried.
var ErrBadRequest = errors.New("bad request")

// truncate returns at most n bytes of s, for echoing bad input safely.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
