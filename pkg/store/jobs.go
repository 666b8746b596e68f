package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riftflow/riftflow/pkg/syncjob"
)

// Job is a jobs row (design 002's job log): syncjob.Job.
type Job = syncjob.Job

// jobInsert inserts one jobs row from the 11 parameters RecordJob and
// RecordJobOnce pass (insertArgs).
const jobInsert = `
INSERT INTO jobs (id, type, puuid, status, retries, error, detail, requested_at, started_at, finished_at, requested_by)
VALUES ($1, $2, nullif($3, ''), $4, $5, nullif($6, ''), $7, $8, $9, $10, nullif($11, ''))`

// insertArgs are jobInsert's 11 parameters for j: a zero RequestedAt is
// now, an empty Detail NULL.
func insertArgs(j Job) []any {
	requested := j.RequestedAt
	if requested.IsZero() {
		requested = time.Now()
	}
	var detail any
	if len(j.Detail) > 0 {
		detail = j.Detail
	}
	return []any{j.ID, j.Type, j.PUUID, j.Status, j.Retries, j.Error, detail, requested, ts(j.StartedAt), ts(j.FinishedAt),
		j.RequestedBy}
}

// RecordJob creates job j or, when its id exists, overwrites its status,
// retries, error, detail and timestamps (zero timestamps keep the stored
// ones).
func (s *Store) RecordJob(ctx context.Context, j Job) (err error) {
	defer classified(&err)
	_, err = s.pool.Exec(ctx, jobInsert+`
ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, retries = EXCLUDED.retries, error = EXCLUDED.error,
    detail = coalesce(EXCLUDED.detail, jobs.detail),
    started_at = coalesce(EXCLUDED.started_at, jobs.started_at),
    finished_at = coalesce(EXCLUDED.finished_at, jobs.finished_at)`, insertArgs(j)...)
	if err != nil {
		return fmt.Errorf("store: record job %s: %w", j.ID, err)
	}
	return nil
}

// EndWaitingJob records j (a final status: rejected or failed) for a
// request that never ran: it creates the jobs row, or overwrites one still
// pending (a request queued and never started), merging j.Detail into its
// detail. A job that started or finished already is left unchanged.
// It reports whether j was recorded.
func (s *Store) EndWaitingJob(ctx context.Context, j Job) (_ bool, err error) {
	defer classified(&err)
	tag, err := s.pool.Exec(ctx, jobInsert+`
ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, error = EXCLUDED.error, finished_at = EXCLUDED.finished_at,
    puuid = coalesce(jobs.puuid, EXCLUDED.puuid), detail = coalesce(jobs.detail, '{}') || coalesce(EXCLUDED.detail, '{}')
WHERE jobs.status = 'pending'`, insertArgs(j)...)
	if err != nil {
		return false, fmt.Errorf("store: end waiting job %s: %w", j.ID, err)
	}
	return tag.RowsAffected() > 0, nil
}

// AbandonJobs records as failed, with reason, every job of type jobType
// still running that started before startedBefore: its process exited
// mid-run (a crash leaves no other trace). Returns how many.
func (s *Store) AbandonJobs(ctx context.Context, jobType string, startedBefore time.Time, reason string) (_ int, err error) {
	defer classified(&err)
	tag, err := s.pool.Exec(ctx, `UPDATE jobs SET status = 'failed', error = $3, finished_at = now()
WHERE type = $1 AND status = 'running' AND started_at < $2`, jobType, startedBefore, reason)
	if err != nil {
		return 0, fmt.Errorf("store: abandon %s jobs: %w", jobType, err)
	}
	return int(tag.RowsAffected()), nil
}

// FinishJob sets job id to status (completed, failed or rejected) with
// errMsg ("" → NULL) and finished_at now. ErrNotFound when there is no such
// job.
func (s *Store) FinishJob(ctx context.Context, id string, status syncjob.Status, errMsg string) (err error) {
	defer classified(&err)
	tag, err := s.pool.Exec(ctx, `UPDATE jobs SET status = $2, error = nullif($3, ''), finished_at = now()
WHERE id = $1`, id, status, errMsg)
	if err != nil {
		return fmt.Errorf("store: finish job %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("store: finish job %s: %w", id, ErrNotFound)
	}
	return nil
}

// JobFilter selects jobs; empty fields match everything.
type JobFilter struct {
	Type, PUUID, Status string
	Limit               int // 0 → 100
}

// Jobs returns the jobs matching f, most recently requested first; a
// pending sync carries its Position in the queue.
func (s *Store) Jobs(ctx context.Context, f JobFilter) (_ []Job, err error) {
	defer classified(&err)
	if f.Limit <= 0 {
		f.Limit = 100
	}
	rows, err := s.pool.Query(ctx, `WITH `+queuePositions+`
SELECT id, type, coalesce(puuid, ''), status, retries, coalesce(error, ''), detail, requested_at, started_at, finished_at,
    coalesce(requested_by, ''), coalesce(q.position, 0)
FROM jobs LEFT JOIN queue q USING (id)
WHERE ($1 = '' OR type = $1) AND ($2 = '' OR puuid = $2) AND ($3 = '' OR status = $3)
ORDER BY requested_at DESC, id LIMIT $4`, f.Type, f.PUUID, f.Status, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("store: jobs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Job, error) {
		var j Job
		var started, finished *time.Time
		var detail []byte
		err := r.Scan(&j.ID, &j.Type, &j.PUUID, &j.Status, &j.Retries, &j.Error, &detail, &j.RequestedAt,
			&started, &finished, &j.RequestedBy, &j.Position)
		j.Detail, j.StartedAt, j.FinishedAt = detail, deref(started), deref(finished)
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: jobs: %w", err)
	}
	return out, nil
}

// PruneJobs deletes the jobs rows that finished (completed, failed or
// rejected) before finishedBefore, then caps each type's failed rows
// (CapFailedJobs with keepFailed). Running and pending jobs are kept
// whatever their age. It returns how many rows it deleted for their age
// and for the cap.
func (s *Store) PruneJobs(ctx context.Context, finishedBefore time.Time, keepFailed int) (aged, capped int64, err error) {
	defer classified(&err)
	tag, err := s.pool.Exec(ctx, `DELETE FROM jobs
WHERE status IN ('completed', 'failed', 'rejected') AND finished_at < $1`, finishedBefore)
	if err != nil {
		return 0, 0, fmt.Errorf("store: prune jobs: %w", err)
	}
	capped, err = s.CapFailedJobs(ctx, keepFailed)
	return tag.RowsAffected(), capped, err
}

// CapFailedJobs deletes, of each job type's failed rows, all but the
// newest keep (by finished_at, then id; design 002's removeOnFail: 100),
// and returns how many it deleted; keep ≤ 0 deletes nothing. It reads the
// failed rows only (index jobs_failed_idx), which the cap keeps few: run
// often (every sweep), it costs a scan of about keep rows per type.
func (s *Store) CapFailedJobs(ctx context.Context, keep int) (_ int64, err error) {
	defer classified(&err)
	if keep <= 0 {
		return 0, nil
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM jobs j USING (
    SELECT id FROM (
        SELECT id, row_number() OVER (PARTITION BY type ORDER BY finished_at DESC NULLS LAST, id DESC) AS n
        FROM jobs WHERE status = 'failed') ranked
    WHERE n > $1) old
WHERE j.id = old.id AND j.status = 'failed'`, keep)
	if err != nil {
		return 0, fmt.Errorf("store: cap failed jobs: %w", err)
	}
	return tag.RowsAffected(), nil
}
