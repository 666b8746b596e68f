package store

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riftflow/riftflow/pkg/syncjob"
)

// DueFetch is a ledger row due for another attempt.
type DueFetch struct {
	MatchID, Kind, Status string
	Attempt               int // highest attempt applied so far (0: never tried)
	RetryCount            int // failed attempts
	NotFound              int // failed attempts answered 404
	GameCreation          time.Time
	ListedBy              string // request id that listed it, "" if unknown
	// Since is the row's last attempt (or, never tried, its last update),
	// or the end of its hold when that is later (Hold: the fetch waits in
	// a message schedule until then), on the caller's clock
	// (DueRetriesAfter): with MatchID and Kind, the key DueRetriesAfter
	// pages by.
	Since time.Time
	// Written is the row's last write (for the timeline of a stored match
	// without a timeline row: its match row's), stamped by the database
	// and moved onto the caller's clock (DueRetriesAfter). It is not
	// before the event that queued the fetch's command (the listing, the
	// attempt whose outcome it stores), and unlike the stages' times a
	// jump of their clocks since then does not move it.
	Written time.Time
}

// DueRetries returns up to limit ledger rows in temporary_failure or
// unfetched whose last attempt (or, never tried, last update) and hold
// (Hold) both end before olderThan, oldest first: a fetch waiting in a
// message schedule is not due before its schedule fires. It never returns a final row
// (success, permanently_unfetchable, outside_retention_window). olderThan
// and the rows' Since are on this host's clock (DueRetriesAfter with
// time.Now).
func (s *Store) DueRetries(ctx context.Context, olderThan time.Time, limit int) (_ []DueFetch, err error) {
	defer classified(&err)
	return s.DueRetriesAfter(ctx, time.Now(), olderThan, nil, limit)
}

// DueRetriesAfter is DueRetries resumed after the row after (nil: from the
// start), in the order (Since, MatchID, Kind): a caller that does not change
// the rows it is given (the retry-sweeper only re-publishes them) pages
// through every due row, not the first page again and again.
//
// now is the caller's clock, read for this call, and olderThan and every
// Since and Written are on it. A ledger row holds times of two clocks: the
// stages' (last_attempt_at and fetched_at: the fetcher's attempt) and the
// database's own (updated_at, stamped by now(): the last update of a row
// never tried, such as the lister's unfetched row; held_until, the end of
// the fetcher's schedule or the sweeper's re-publish, Hold). The
// database's are moved onto the caller's clock by its offset from the
// database's (now less now()), so a caller whose clock is set apart from
// the database's (skewed, or jumped) sees a row listed a moment ago as a
// moment old, not as old as the offset, and a hold as long as it was
// made.
func (s *Store) DueRetriesAfter(ctx context.Context, now, olderThan time.Time, after *DueFetch, limit int) (_ []DueFetch, err error) {
	defer classified(&err)
	since, mid, kind := time.Time{}, "", ""
	if after != nil {
		since, mid, kind = after.Since, after.MatchID, after.Kind
	}
	// Besides failed and unfetched rows, a stored match whose timeline has
	// no ledger row at all (the timeline fetch was never queued, e.g. the
	// fetcher died between the two) is due as an unfetched timeline, or its
	// sync would wait for ever.
	rows, err := s.pool.Query(ctx, `
WITH clock AS (SELECT $6::timestamptz - now() AS offset_),
due AS (
  SELECT match_id, kind, status, attempt, retry_count, not_found, game_creation,
         coalesce(listed_by_request, '') AS listed_by,
         greatest(coalesce(last_attempt_at, updated_at + clock.offset_), held_until + clock.offset_) AS since,
         updated_at + clock.offset_ AS written
  FROM match_fetches, clock
  WHERE status IN ('temporary_failure', 'unfetched')
    AND greatest(coalesce(last_attempt_at, updated_at + clock.offset_), held_until + clock.offset_) < $1
  UNION ALL
  SELECT m.match_id, 'timeline', 'unfetched', 0, 0, 0, m.game_creation,
         coalesce(m.listed_by_request, ''), coalesce(m.fetched_at, m.updated_at + clock.offset_),
         m.updated_at + clock.offset_
  FROM match_fetches m, clock
  WHERE m.kind = 'match' AND m.status = 'success' AND coalesce(m.fetched_at, m.updated_at + clock.offset_) < $1
    AND NOT EXISTS (SELECT 1 FROM match_fetches t WHERE t.match_id = m.match_id AND t.kind = 'timeline')
)
SELECT match_id, kind, status, attempt, retry_count, not_found, game_creation, listed_by, since, written
FROM due
WHERE $3::timestamptz IS NULL OR (since, match_id, kind) > ($3, $4, $5)
ORDER BY since, match_id, kind
LIMIT $2`, olderThan, limit, ts(since), mid, kind, now)
	if err != nil {
		return nil, fmt.Errorf("store: due retries: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DueFetch, error) {
		var d DueFetch
		var gc *time.Time
		err := r.Scan(&d.MatchID, &d.Kind, &d.Status, &d.Attempt, &d.RetryCount, &d.NotFound, &gc, &d.ListedBy, &d.Since, &d.Written)
		d.GameCreation = deref(gc)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: due retries: %w", err)
	}
	return out, nil
}

// pendingMatch is the condition, on a match ledger row m and its timeline
// row t (LEFT JOIN), that a listed match is pending: its fetch, or its
// timeline's when the match is stored, is temporary_failure after at least
// $1 failed attempts, fewer than $1 of them 404 (that many 404s make it
// permanently_unfetchable instead). $1 is fetchpolicy.Policy.MaxAttempts,
// which the retry-sweeper passes to SettlePending.
const pendingMatch = `((m.status = 'temporary_failure' AND m.retry_count >= $1 AND m.not_found < $1)
  OR (m.status = 'success' AND t.status = 'temporary_failure' AND t.retry_count >= $1 AND t.not_found < $1))`

// SettlePending ends syncs that wait only for pending fetches. A fetch is
// pending when its in-process retries ended on a 5xx or timeout streak
// (temporary_failure after at least minFailures failed attempts: the
// fetcher's FETCH_MAX_ATTEMPTS): it is not final, the retry-sweeper keeps
// trying it, but a sync must not stay syncing for as long as Riot fails.
// Its sync_matches rows are marked done, and syncs that reach their total
// complete ("completed with N matches pending": SyncProgress.Pending). The
// match is stored later, whenever a retry succeeds.
func (s *Store) SettlePending(ctx context.Context, minFailures int) (_ BatchResult, err error) {
	defer classified(&err)
	if minFailures < 1 {
		minFailures = 1
	}
	var res BatchResult
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
UPDATE sync_matches s SET done = true
FROM accounts a, match_fetches m
LEFT JOIN match_fetches t ON t.match_id = m.match_id AND t.kind = 'timeline'
WHERE a.sync_request_id = s.request_id AND a.sync_status = 'syncing' AND NOT s.done
  AND m.match_id = s.match_id AND m.kind = 'match' AND `+pendingMatch+`
RETURNING s.request_id`, minFailures)
		if err != nil {
			return err
		}
		reqs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(reqs) == 0 {
			return err
		}
		sort.Strings(reqs)
		if res.Progress, err = recount(ctx, tx, compact(reqs)); err != nil {
			return err
		}
		for i, p := range res.Progress {
			if p.Status != syncjob.Completed {
				continue
			}
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM sync_matches s
JOIN match_fetches m ON m.match_id = s.match_id AND m.kind = 'match'
LEFT JOIN match_fetches t ON t.match_id = m.match_id AND t.kind = 'timeline'
WHERE s.request_id = $2 AND `+pendingMatch, minFailures, p.RequestID).Scan(&res.Progress[i].Pending); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return BatchResult{}, fmt.Errorf("store: settle pending syncs: %w", err)
	}
	return res, nil
}

// MarkPermanent records attempt of (matchID, kind) as permanently
// unfetchable with reason, under the rules of LedgerUpdate, and updates sync
// progress like PersistBatch (the result lists syncs that moved, so the
// caller can publish their progress).
func (s *Store) MarkPermanent(ctx context.Context, matchID, kind, reason string, attempt int) (_ BatchResult, err error) {
	defer classified(&err)
	return s.PersistBatch(ctx, Batch{Ledger: []LedgerUpdate{{
		MatchID: matchID, Kind: kind, Status: StatusPermanentlyUnfetchable, Attempt: attempt, Error: reason,
		AttemptedAt: time.Now(),
	}}})
}

// StuckSyncs returns the accounts syncing without progress since
// noProgressSince (last_progress_at, else sync_started_at).
//
// now is the caller's clock, read for this call, and noProgressSince and
// the accounts' times (SyncStartedAt, LastProgressAt, LastSyncedAt) are on
// it: the database stamps them (now()), and they are moved onto the
// caller's clock by its offset from the database's, as in RunningSyncs.
func (s *Store) StuckSyncs(ctx context.Context, now, noProgressSince time.Time) (_ []Account, err error) {
	defer classified(&err)
	return s.queryAccounts(ctx, "stuck syncs", `WITH clock AS (SELECT $2::timestamptz - now() AS offset_)
SELECT `+accountColsMoved("clock.offset_")+` FROM accounts, clock
WHERE sync_status = 'syncing' AND coalesce(last_progress_at, sync_started_at, updated_at) + clock.offset_ < $1
ORDER BY last_progress_at`, noProgressSince, now)
}

// ResetSync moves the account from syncing back to pending, only while it is
// still syncing requestID; otherwise it returns ErrNotFound and changes
// nothing.
func (s *Store) ResetSync(ctx context.Context, puuid, requestID string) (err error) {
	defer classified(&err)
	tag, err := s.pool.Exec(ctx, `UPDATE accounts SET sync_status = 'pending', updated_at = now()
WHERE puuid = $1 AND sync_request_id = $2 AND sync_status = 'syncing'`, puuid, requestID)
	if err != nil {
		return fmt.Errorf("store: reset sync %s: %w", requestID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("store: reset sync %s of %s: %w", requestID, puuid, ErrNotFound)
	}
	return nil
}

// Failure is a ledger row in a failure status (view match_fetch_failures).
type Failure struct {
	MatchID, Kind, Status         string
	Attempt, RetryCount, NotFound int
	HTTPStatus                    int // 0 when unknown
	LastError                     string
	LastAttemptAt, GameCreation   time.Time
	ListedBy                      string
}

// Failures returns up to limit failed fetches, most recent attempt first.
func (s *Store) Failures(ctx context.Context, limit int) (_ []Failure, err error) {
	defer classified(&err)
	rows, err := s.pool.Query(ctx, `
SELECT match_id, kind, status, attempt, retry_count, not_found, coalesce(http_status, 0),
       coalesce(last_error, ''), last_attempt_at, game_creation, coalesce(listed_by_request, '')
FROM match_fetch_failures ORDER BY last_attempt_at DESC NULLS LAST, match_id LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("store: failures: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Failure, error) {
		var f Failure
		var la, gc *time.Time
		err := r.Scan(&f.MatchID, &f.Kind, &f.Status, &f.Attempt, &f.RetryCount, &f.NotFound, &f.HTTPStatus,
			&f.LastError, &la, &gc, &f.ListedBy)
		f.LastAttemptAt, f.GameCreation = deref(la), deref(gc)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: failures: %w", err)
	}
	return out, nil
}

// LedgerCounts counts ledger rows by "kind/status" (e.g. "match/success").
func (s *Store) LedgerCounts(ctx context.Context) (_ map[string]int, err error) {
	defer classified(&err)
	rows, err := s.pool.Query(ctx, `SELECT kind || '/' || status, count(*)::int FROM match_fetches GROUP BY 1`)
	if err != nil {
		return nil, fmt.Errorf("store: ledger counts: %w", err)
	}
	out := map[string]int{}
	var k string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&k, &n}, func() error { out[k] = n; return nil }); err != nil {
		return nil, fmt.Errorf("store: ledger counts: %w", err)
	}
	return out, nil
}
