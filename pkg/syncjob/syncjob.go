// Package syncjob is the one owner of a sync's lifecycle rules (design 001
// and 002): the job and account statuses (Status), the pending job of an
// accepted request (Queued), the refusal of a request (Reject, Rejected),
// the effects of a ledger write that moved syncs (Lifecycle.Advance:
// progress events, lock renewal and release) and the end of a failed sync
// (Lifecycle.Fail).
//
// It holds the row types the store reads and writes for these rules (Job,
// Request, Progress; pkg/store aliases them) and never imports pkg/store,
// so a stage that only refuses requests (the resolver) links no Postgres
// driver.
package syncjob

import (
	"encoding/json"
	"time"

	"github.com/riftflow/riftflow/pkg/bus"
)

// Status is a jobs row's status (pending | running | completed | failed |
// rejected) or an account's sync_status (pending | syncing | completed |
// failed); on the wire, bus.ProgressEvent.Status carries it as a string.
type Status string

const (
	// Pending: accepted, not started (QueueSync); an account with a
	// pending request and no running sync.
	Pending Status = "pending"
	// Running: a job being worked on (jobs rows).
	Running Status = "running"
	// Syncing: an account whose sync runs (accounts.sync_status and
	// progress events).
	Syncing Status = "syncing"
	// Completed: every listed match is stored or final.
	Completed Status = "completed"
	// Failed: the sync or job ended with an error.
	Failed Status = "failed"
	// Rejected: the request was refused before any work (bus.Rejection).
	Rejected Status = "rejected"
)

// Finished reports whether s ends a sync: completed or failed.
func (s Status) Finished() bool { return s == Completed || s == Failed }

// TypeSync is the jobs.type of a sync request.
const TypeSync = "sync"

// Job is a jobs row (design 002's job log).
type Job struct {
	ID          string // request id or scheduled job id
	Type        string // sync | latest_all | rank_daily | weekly_report | recovery | ...
	PUUID       string // "" when not about one account
	Status      Status // pending | running | completed | failed | rejected
	Retries     int    // redeliveries of the sync command plus retried fetches of its matches
	Error       string
	RequestedBy string          // who asked (design 002's requestedBy); "" → NULL
	Detail      json.RawMessage // any JSON object; nil → NULL
	RequestedAt time.Time       // zero → now()
	StartedAt   time.Time       // zero → NULL
	FinishedAt  time.Time       // zero → NULL
	// Position is, for a pending sync, its place in its priority's queue
	// (1: next; QueueSync); 0 otherwise. Read only (Jobs).
	Position int
}

// Request is a sync request accepted but not started yet (design 001's
// "pending"): what the store's QueueSync records.
type Request struct {
	RequestID string
	// PUUID, when known at acceptance ("" for a Riot ID not resolved yet).
	PUUID string
	// RiotID (gameName#tagLine) of a request by Riot ID, kept in
	// jobs.detail.riot_id so `riftflow status --riot-id` finds it.
	RiotID   string
	Platform string // "" when the resolver is to find it
	Mode     string // latest | full
	Trigger  string // cli, http, link, login, schedule, ...
	// Priority is interactive or background: each has its own queue, so
	// positions are counted per priority.
	Priority    string
	Force       bool
	RequestedBy string    // "" → NULL
	RequestedAt time.Time // zero → now
}

// Queued is the pending job of an ingest request accepted by the HTTP API,
// the CLI or the scheduler: puuid is its PUUID when known ("" for a Riot
// ID not resolved yet).
func Queued(req bus.IngestRequest, puuid string) Request {
	return Request{RequestID: req.RequestID, PUUID: puuid, RiotID: req.RiotID, Platform: req.Platform,
		Mode: string(req.Mode), Trigger: req.Trigger, Priority: string(req.Priority), Force: req.Force,
		RequestedBy: req.RequestedBy, RequestedAt: req.RequestedAt}
}

// Progress is a sync whose progress a ledger write changed.
type Progress struct {
	RequestID string
	PUUID     string
	Progress  int    // sync_matches done
	Total     int    // sync_matches listed
	Status    Status // accounts.sync_status: Syncing, Completed or Failed
	// Pending counts, for a sync SettlePending completed, its matches still
	// left to the retry-sweeper (0 otherwise).
	Pending int
}
