package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riftflow/riftflow/pkg/syncjob"
)

// SyncRequest is a sync request accepted but not started yet: syncjob.Request.
type SyncRequest = syncjob.Request

// QueueSync records r as a pending sync job (type sync, status pending):
// from then on the job log (Jobs), the account's status (AccountStatus)
// and `riftflow status` show it, with its place in the queue, until the
// lister starts it (BeginSync: running) or it is refused (rejected). It is
// the one place a pending job is created: the HTTP API and the CLI call it
// when they accept a request, before publishing it. A job with r's id that
// exists already is left unchanged (a repeated request id); the result
// says whether r was recorded.
func (s *Store) QueueSync(ctx context.Context, r SyncRequest) (_ bool, err error) {
	defer classified(&err)
	d := map[string]any{"mode": r.Mode, "trigger": r.Trigger, "priority": r.Priority}
	if r.RiotID != "" {
		d["riot_id"] = r.RiotID
	}
	if r.Platform != "" {
		d["platform"] = r.Platform
	}
	if r.Force {
		d["force"] = true
	}
	detail, _ := json.Marshal(d)
	return s.RecordJobOnce(ctx, Job{ID: r.RequestID, Type: syncjob.TypeSync, PUUID: r.PUUID, Status: syncjob.Pending,
		RequestedBy: r.RequestedBy, Detail: detail, RequestedAt: r.RequestedAt})
}

// queuePositions is a CTE ("queue") of every pending sync job with its
// place in its priority's queue: 1 for the oldest pending request of that
// priority (requested_at, then id), counting the pending rows ahead of it.
// It reads the pending rows only (index jobs_pending_idx).
const queuePositions = `queue AS (
    SELECT id, row_number() OVER (PARTITION BY coalesce(detail->>'priority', 'interactive')
                                  ORDER BY requested_at, id)::int AS position
    FROM jobs WHERE status = 'pending' AND type = 'sync')`

// Queued is a pending sync request of an account, with its place in its
// priority's queue (1: next).
type Queued struct {
	RequestID   string
	Priority    string
	Position    int
	RequestedAt time.Time
}

// queued returns the pending sync requests of the account puuid (or, when
// riotID is set, those by that Riot ID, case-insensitive), oldest first.
func (s *Store) queued(ctx context.Context, puuid, riotID string) ([]Queued, string, error) {
	rows, err := s.pool.Query(ctx, `WITH `+queuePositions+`
SELECT j.id, coalesce(j.detail->>'priority', 'interactive'), q.position, j.requested_at,
    coalesce(j.detail->>'platform', '')
FROM jobs j JOIN queue q USING (id)
WHERE ($1 <> '' AND j.puuid = $1) OR ($2 <> '' AND lower(j.detail->>'riot_id') = lower($2))
ORDER BY j.requested_at, j.id`, puuid, riotID)
	if err != nil {
		return nil, "", fmt.Errorf("store: queued syncs: %w", err)
	}
	var platform string
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Queued, error) {
		var q Queued
		var p string
		err := r.Scan(&q.RequestID, &q.Priority, &q.Position, &q.RequestedAt, &p)
		if platform == "" {
			platform = p
		}
		return q, err
	})
	if err != nil {
		return nil, "", fmt.Errorf("store: queued syncs: %w", err)
	}
	return out, platform, nil
}

// withQueue adds the account's pending requests to st: while the account
// is not syncing, the oldest of them is its sync (status pending, progress
// 0/0); an account not stored yet whose first sync is queued is shown so
// (st.PUUID empty until the resolver has resolved a Riot ID).
func withQueue(st *AccountStatus, q []Queued) {
	st.Queued = q
	if len(q) == 0 || st.SyncStatus == syncjob.Syncing {
		return
	}
	st.SyncStatus, st.SyncRequestID, st.SyncProgress, st.SyncTotal, st.SyncError = syncjob.Pending, q[0].RequestID, 0, 0, ""
}

// RejectQueued ends the pending sync job requestID as rejected with reason
// and code (HTTP-like, kept in jobs.detail.code): a request refused before
// the lister started it (an unknown player 404, an account lookup that kept
// failing 503). A request with no job yet is recorded rejected (type sync),
// so a pending job recorded later for it (QueueSync, from its copy on
// lol.ingest.queued, which may be read after the refusal) stays rejected.
// It reports whether the job was ended or recorded; a job that is not
// pending (started or finished) is left alone.
func (s *Store) RejectQueued(ctx context.Context, requestID, reason string, code int) (_ bool, err error) {
	defer classified(&err)
	tag, err := s.pool.Exec(ctx, `INSERT INTO jobs (id, type, status, error, detail, requested_at, finished_at)
VALUES ($1, 'sync', 'rejected', $2, jsonb_build_object('code', $3::int), now(), now())
ON CONFLICT (id) DO UPDATE SET status = 'rejected', error = EXCLUDED.error, finished_at = EXCLUDED.finished_at,
    detail = coalesce(jobs.detail, '{}') || EXCLUDED.detail
WHERE jobs.status = 'pending'`, requestID, reason, code)
	if err != nil {
		return false, fmt.Errorf("store: reject queued %s: %w", requestID, err)
	}
	return tag.RowsAffected() == 1, nil
}
