package bus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/riftflow/riftflow/pkg/riot"
)

// Limits on ingest request fields; longer values are rejected, not truncated.
const (
	MaxRequestBytes   = 4096
	MaxRequestIDLen   = 64
	MaxPUUIDLen       = 100 // Riot PUUIDs are 78 characters
	MaxCount          = 1000
	MaxLookbackDays   = 730
	MaxFreeTextLength = 64
)

// IngestRequest is what a user publishes on lol.ingest.request (also built by
// the CLI and by POST /v1/sync). Exactly one of RiotID and PUUID is required.
//
//	{"riot_id":"Hide on bush#KR1","platform":"kr","mode":"latest"}
//
// Design 002's job payload is accepted as is, with its camelCase names
// and without a platform:
//
//	{"puuid":"…","count":20,"lookbackDays":30,"force":false,"requestedBy":"bot"}
//
// lookbackDays and requestedBy are aliases of lookback_days and
// requested_by; giving both spellings with different values is an error.
type IngestRequest struct {
	// RequestID makes the request idempotent; a repeat with the same id is
	// not a second sync. Generated when empty.
	RequestID string `json:"request_id,omitempty"`
	// RiotID is gameName#tagLine.
	RiotID string `json:"riot_id,omitempty"`
	// PUUID skips the account-v1 lookup.
	PUUID string `json:"puuid,omitempty"`
	// Platform is the player's platform routing value (na1, euw1, jp1,
	// ...). Optional: when empty the resolver asks account-v1 for the
	// player's active platform (getActiveRegion, cached in riot-ids for a
	// day) and the job's detail says which it found.
	Platform string `json:"platform,omitempty"`
	// Mode is latest (default) or full.
	Mode Mode `json:"mode,omitempty"`
	// Count caps the matches listed this run; 0 means the configured
	// INGESTION_MAX_MATCHES_PER_RUN.
	Count int `json:"count,omitempty"`
	// LookbackDays is how far a full backfill reaches; 0 means
	// INGESTION_LOOKBACK_DAYS.
	LookbackDays int `json:"lookback_days,omitempty"`
	// Force refetches every listed match even when it is stored already,
	// and overwrites the stored rows (design 002's force flag). The job
	// log records it (jobs.detail.force, jobs.detail.forced).
	Force bool `json:"force,omitempty"`
	// Queue filters by queueId (match-v5 "queue"), Type by match type
	// (ranked, normal, tourney, tutorial).
	Queue *int   `json:"queue,omitempty"`
	Type  string `json:"type,omitempty"`
	// Priority is interactive (default for user requests) or background.
	Priority Priority `json:"priority,omitempty"`
	// Trigger names who asked: cli, http, nats (default), schedule, link, login.
	Trigger string `json:"trigger,omitempty"`
	// RequestedBy names who asked (free text, stored in jobs.requested_by).
	RequestedBy string    `json:"requested_by,omitempty"`
	RequestedAt time.Time `json:"requested_at,omitempty"`

	// LookbackDaysAlias and RequestedByAlias carry design 002's camelCase
	// spellings; Normalize moves them into LookbackDays and RequestedBy.
	LookbackDaysAlias int    `json:"lookbackDays,omitempty"`
	RequestedByAlias  string `json:"requestedBy,omitempty"`
}

// DecodeIngestRequest parses and validates a request body. Unknown fields,
// trailing data, over-long fields, an unknown platform, a Riot ID without
// '#' and similar are errors wrapping ErrBadRequest, with a reason fit to
// show the user.
func DecodeIngestRequest(data []byte) (IngestRequest, error) {
	var r IngestRequest
	if len(data) > MaxRequestBytes {
		return r, fmt.Errorf("%w: request is %d bytes, max %d", ErrBadRequest, len(data), MaxRequestBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return IngestRequest{}, fmt.Errorf("%w: invalid JSON: %v", ErrBadRequest, err)
	}
	if dec.More() {
		return IngestRequest{}, fmt.Errorf("%w: trailing data after the JSON object", ErrBadRequest)
	}
	if err := r.Normalize(); err != nil {
		return IngestRequest{}, err
	}
	return r, nil
}

// Normalize validates r and fills defaults that do not depend on
// configuration (mode latest, priority interactive, lower-case platform).
// Errors wrap ErrBadRequest.
func (r *IngestRequest) Normalize() error {
	if err := r.normalizeAliases(); err != nil {
		return err
	}
	if err := r.normalizePlayer(); err != nil {
		return err
	}
	if err := r.normalizeScope(); err != nil {
		return err
	}
	return r.normalizeOrigin()
}

// badRequest is an ErrBadRequest saying what is wrong.
func badRequest(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadRequest}, a...)...)
}

// normalizeAliases folds the camelCase aliases (lookbackDays, requestedBy)
// into their fields; an alias that disagrees with its field is an error.
func (r *IngestRequest) normalizeAliases() error {
	if r.LookbackDaysAlias != 0 {
		if r.LookbackDays != 0 && r.LookbackDays != r.LookbackDaysAlias {
			return badRequest("lookback_days %d and lookbackDays %d disagree", r.LookbackDays, r.LookbackDaysAlias)
		}
		r.LookbackDays, r.LookbackDaysAlias = r.LookbackDaysAlias, 0
	}
	if r.RequestedByAlias != "" {
		if r.RequestedBy != "" && r.RequestedBy != r.RequestedByAlias {
			return badRequest("requested_by and requestedBy disagree")
		}
		r.RequestedBy, r.RequestedByAlias = r.RequestedByAlias, ""
	}
	return nil
}

// normalizePlayer checks who the request is for: its request id, exactly
// one of a Riot ID (canonical form) and a PUUID, and a platform routing
// value (upper case) if given.
func (r *IngestRequest) normalizePlayer() error {
	if len(r.RequestID) > MaxRequestIDLen {
		return badRequest("request_id longer than %d bytes", MaxRequestIDLen)
	}
	if !idChars(r.RequestID) {
		return badRequest("request_id may hold only letters, digits, '-' and '_'")
	}
	switch {
	case r.RiotID == "" && r.PUUID == "":
		return badRequest("one of riot_id or puuid is required")
	case r.RiotID != "" && r.PUUID != "":
		return badRequest("give riot_id or puuid, not both")
	}
	if r.RiotID != "" {
		id, err := riot.ParseRiotID(r.RiotID)
		if err != nil {
			return badRequest("%v", err)
		}
		r.RiotID = id.String()
	}
	if r.PUUID != "" {
		if len(r.PUUID) > MaxPUUIDLen {
			return badRequest("puuid longer than %d bytes", MaxPUUIDLen)
		}
		if !idChars(r.PUUID) {
			return badRequest("puuid has a character outside [A-Za-z0-9_-]")
		}
	}
	if r.Platform != "" {
		p, err := riot.ParsePlatform(r.Platform)
		if err != nil {
			return badRequest("%v", err)
		}
		r.Platform = string(p)
	}
	return nil
}

// normalizeScope checks which matches the request asks for (mode, count,
// lookback_days, queue, type) and its priority, filling the defaults of
// mode and priority.
func (r *IngestRequest) normalizeScope() error {
	if !defaultOrOneOf(&r.Mode, ModeLatest, ModeFull) {
		return badRequest("mode %q: want latest or full", truncate(string(r.Mode), 16))
	}
	if r.Count < 0 || r.Count > MaxCount {
		return badRequest("count %d out of range 0..%d", r.Count, MaxCount)
	}
	if r.LookbackDays < 0 || r.LookbackDays > MaxLookbackDays {
		return badRequest("lookback_days %d out of range 0..%d", r.LookbackDays, MaxLookbackDays)
	}
	if r.Queue != nil && (*r.Queue < 0 || *r.Queue > 100000) {
		return badRequest("queue %d out of range", *r.Queue)
	}
	switch r.Type {
	case "", "ranked", "normal", "tourney", "tutorial":
	default:
		return badRequest("type %q: want ranked, normal, tourney or tutorial", truncate(r.Type, 16))
	}
	if !defaultOrOneOf(&r.Priority, Interactive, Background) {
		return badRequest("priority %q: want interactive or background", truncate(string(r.Priority), 16))
	}
	return nil
}

// normalizeOrigin checks the free-text trigger and requested_by (bounded,
// UTF-8) and lower-cases the trigger ("nats" when empty); the recovery
// trigger is refused.
func (r *IngestRequest) normalizeOrigin() error {
	for name, v := range map[string]string{"trigger": r.Trigger, "requested_by": r.RequestedBy} {
		if len(v) > MaxFreeTextLength || !utf8.ValidString(v) {
			return badRequest("%s longer than %d bytes or not UTF-8", name, MaxFreeTextLength)
		}
	}
	if r.Trigger == "" {
		r.Trigger = "nats"
	}
	r.Trigger = strings.ToLower(r.Trigger)
	if r.Trigger == TriggerRecovery {
		// The lister closes the abandoned sync of a recovery command; only
		// the retry-sweeper, which publishes SyncCommands directly, may ask.
		return badRequest("trigger %q is reserved for riftflow's crash recovery", TriggerRecovery)
	}
	return nil
}

// idChars reports whether s holds only ASCII letters, digits, '-' and '_'
// (request ids and PUUIDs).
func idChars(s string) bool {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// defaultOrOneOf sets an empty *v to the first of allowed (the default) and
// reports whether *v is one of allowed.
func defaultOrOneOf[T ~string](v *T, allowed ...T) bool {
	if *v == "" {
		*v = allowed[0]
	}
	return slices.Contains(allowed, *v)
}

// StoredRequestID is the request id of an ingest request published without
// one: "req-<stored ms>-<seq>", from the time (Unix milliseconds) and
// sequence at which the INGEST stream stored it, so the resolver, across
// redeliveries, and the retry-sweeper, from the request's republished
// copy, name it alike.
func StoredRequestID(stored time.Time, seq uint64) string {
	return fmt.Sprintf("req-%d-%d", stored.UnixMilli(), seq)
}

// TriggerRecovery is the trigger of the SyncCommands the retry-sweeper
// sends for syncs it found stuck; an IngestRequest may not carry it.
const TriggerRecovery = "recovery"

// NewRejection builds the Rejection for a request that failed to decode or
// was refused, echoing at most 256 bytes of the raw payload.
func NewRejection(requestID, subject string, code int, reason error, raw []byte, now time.Time) Rejection {
	return Rejection{RequestID: requestID, Reason: reason.Error(), Code: code, Subject: subject,
		Raw: truncate(string(raw), 256), At: now}
}
