package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riftflow/riftflow/pkg/syncjob"
)

// Account is an accounts row (design 001's sync state).
type Account struct {
	PUUID, GameName, TagLine string
	Platform                 string         // e.g. "EUW1"
	Region                   string         // routing region, e.g. "europe"
	SyncStatus               syncjob.Status // pending | syncing | completed | failed
	SyncProgress, SyncTotal  int            // matches done / listed for SyncRequestID
	SyncRequestID            string
	SyncError                string
	SyncStartedAt            time.Time // zero when NULL
	LastProgressAt           time.Time
	LastSyncedAt             time.Time
	Active                   bool
}

const accountCols = accountColsHead + `sync_started_at, last_progress_at, last_synced_at, active`

// accountColsHead is accountCols up to its times.
const accountColsHead = `puuid, game_name, tag_line, platform, region, sync_status, sync_progress, sync_total,
coalesce(sync_request_id, ''), coalesce(sync_error, ''), `

// accountColsMoved is accountCols with its times (stamped by the
// database) moved by off, an SQL interval expression: the offset of a
// caller's clock from the database's.
func accountColsMoved(off string) string {
	return accountColsHead + `sync_started_at + ` + off + `, last_progress_at + ` + off + `, last_synced_at + ` + off + `, active`
}

// queryAccounts is queryRows of accounts: sql selects accountCols.
func (s *Store) queryAccounts(ctx context.Context, what, sql string, args ...any) ([]Account, error) {
	return queryRows(ctx, s, what, func(r pgx.CollectableRow) (Account, error) { return scanAccount(r) }, sql, args...)
}

// scanAccount scans accountCols, then into more the columns after them.
func scanAccount(r pgx.Row, more ...any) (Account, error) {
	var a Account
	var started, progress, synced *time.Time
	err := r.Scan(append([]any{&a.PUUID, &a.GameName, &a.TagLine, &a.Platform, &a.Region, &a.SyncStatus, &a.SyncProgress,
		&a.SyncTotal, &a.SyncRequestID, &a.SyncError, &started, &progress, &synced, &a.Active}, more...)...)
	a.SyncStartedAt, a.LastProgressAt, a.LastSyncedAt = deref(started), deref(progress), deref(synced)
	return a, err
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// UpsertAccount creates the account or updates its identity (game name, tag
// line, platform, region, active). Sync fields are left to BeginSync,
// ClaimMatches, PersistBatch, FailSync and ResetSync.
func (s *Store) UpsertAccount(ctx context.Context, a Account) (err error) {
	defer classified(&err)
	_, err = s.pool.Exec(ctx, `
INSERT INTO accounts (puuid, game_name, tag_line, platform, region, active)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (puuid) DO UPDATE SET game_name = EXCLUDED.game_name, tag_line = EXCLUDED.tag_line,
    platform = EXCLUDED.platform, region = EXCLUDED.region, active = EXCLUDED.active, updated_at = now()
WHERE (accounts.game_name, accounts.tag_line, accounts.platform, accounts.region, accounts.active)
    IS DISTINCT FROM (EXCLUDED.game_name, EXCLUDED.tag_line, EXCLUDED.platform, EXCLUDED.region, EXCLUDED.active)`,
		a.PUUID, a.GameName, a.TagLine, a.Platform, a.Region, a.Active)
	if err != nil {
		return fmt.Errorf("store: upsert account %s: %w", a.PUUID, err)
	}
	return nil
}

// SyncStart describes a sync request (a sync job of design 002).
type SyncStart struct {
	RequestID, PUUID, GameName, TagLine, Platform, Region string
	Mode                                                  string // e.g. "full" | "latest"; stored in jobs.detail
	Trigger                                               string // e.g. "api" | "schedule"; stored in jobs.detail
	RequestedAt                                           time.Time
	// Force (design 002) is stored in jobs.detail.force.
	Force bool
	// RequestedBy is stored in jobs.requested_by ("" → NULL).
	RequestedBy string
	// Platform is stored in jobs.detail.platform; PlatformFound, true when
	// the resolver found it through account-v1 (the request named none),
	// in jobs.detail.platform_found.
	PlatformFound bool
	// Redelivery is true when this is not the first delivery of the sync
	// command: the job's retries count goes up by one.
	Redelivery bool
	// ReplaceReason is the error written on the job of the sync this one
	// replaces (see BeginSync); "" → "replaced by sync <RequestID> of the
	// same account".
	ReplaceReason string
}

// BeginSync puts the account (created if absent) in syncing for
// st.RequestID with progress 0/0, and records the jobs row (id RequestID,
// type sync) as running, its detail holding mode, trigger, platform and,
// when set, force and platform_found. An empty GameName/TagLine (a request by PUUID)
// keeps the stored Riot ID. Idempotent per request id: calling it again for the
// sync already recorded changes nothing.
//
// The sync the account was on before, if its job is still pending or
// running (its lock lapsed, e.g. through a long outage, and this request
// took the account over), ends in the same transaction: its job becomes
// failed with st.ReplaceReason, and replaced names it ("" when nothing was
// replaced), so the caller can end its progress stream. No job is left
// running for an account that has moved on.
//
// A request whose job has already ended does not begin (again): rejected
// (it expired waiting, see the retry-sweeper), failed (replaced by a newer
// sync, or abandoned and resumed by a recovery sync) or completed. Its
// command may still be delivered (a redelivery after the sweeper gave up
// on it); the error wraps ErrRequestEnded.
func (s *Store) BeginSync(ctx context.Context, st SyncStart) (replaced string, err error) {
	defer classified(&err)
	requested := st.RequestedAt
	if requested.IsZero() {
		requested = time.Now()
	}
	reason := st.ReplaceReason
	if reason == "" {
		reason = fmt.Sprintf("replaced by sync %s of the same account", st.RequestID)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		replaced = ""
		var ended bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM jobs WHERE id = $1 AND status IN ('rejected', 'failed', 'completed'))`,
			st.RequestID).Scan(&ended); err != nil {
			return fmt.Errorf("job: %w", err)
		}
		if ended {
			return ErrRequestEnded
		}
		var prev string
		err := tx.QueryRow(ctx, `SELECT coalesce(sync_request_id, '') FROM accounts WHERE puuid = $1 FOR UPDATE`, st.PUUID).Scan(&prev)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("account: %w", err)
		}
		if prev != "" && prev != st.RequestID {
			tag, err := tx.Exec(ctx, `UPDATE jobs SET status = 'failed', error = $2, finished_at = now()
WHERE id = $1 AND status IN ('pending', 'running')`, prev, reason)
			if err != nil {
				return fmt.Errorf("replaced job: %w", err)
			}
			if tag.RowsAffected() > 0 {
				replaced = prev
			}
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO accounts (puuid, game_name, tag_line, platform, region, sync_status, sync_progress, sync_total,
    sync_request_id, sync_started_at, last_progress_at)
VALUES ($1, $2, $3, $4, $5, 'syncing', 0, 0, $6, now(), now())
ON CONFLICT (puuid) DO UPDATE SET
    game_name = CASE WHEN EXCLUDED.game_name <> '' THEN EXCLUDED.game_name ELSE accounts.game_name END,
    tag_line = CASE WHEN EXCLUDED.tag_line <> '' THEN EXCLUDED.tag_line ELSE accounts.tag_line END,
    platform = EXCLUDED.platform,
    region = EXCLUDED.region, sync_status = 'syncing', sync_progress = 0, sync_total = 0,
    sync_request_id = EXCLUDED.sync_request_id, sync_error = NULL, sync_started_at = now(),
    last_progress_at = now(), updated_at = now()
WHERE accounts.sync_request_id IS DISTINCT FROM EXCLUDED.sync_request_id`,
			st.PUUID, st.GameName, st.TagLine, st.Platform, st.Region, st.RequestID); err != nil {
			return fmt.Errorf("account: %w", err)
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO jobs (id, type, puuid, status, detail, requested_at, started_at, requested_by)
VALUES ($1, 'sync', $2, 'running',
    jsonb_build_object('mode', $3::text, 'trigger', $4::text, 'platform', $8::text)
        || CASE WHEN $6 THEN '{"force":true}'::jsonb ELSE '{}' END
        || CASE WHEN $9 THEN '{"platform_found":true}'::jsonb ELSE '{}' END,
    $5, now(), nullif($7, ''))
ON CONFLICT (id) DO UPDATE SET status = 'running', started_at = coalesce(jobs.started_at, now()),
    puuid = coalesce(jobs.puuid, EXCLUDED.puuid), requested_by = coalesce(jobs.requested_by, EXCLUDED.requested_by),
    detail = coalesce(jobs.detail, '{}') || EXCLUDED.detail
WHERE jobs.status = 'pending'`, st.RequestID, st.PUUID, st.Mode, st.Trigger, requested, st.Force, st.RequestedBy,
			st.Platform, st.PlatformFound); err != nil {
			return fmt.Errorf("job: %w", err)
		}
		if st.Redelivery {
			if _, err := tx.Exec(ctx, `UPDATE jobs SET retries = retries + 1 WHERE id = $1`, st.RequestID); err != nil {
				return fmt.Errorf("job retries: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("store: begin sync %s: %w", st.RequestID, err)
	}
	return replaced, nil
}

// ClaimResult is what ClaimMatches decided.
type ClaimResult struct {
	// Publish lists the ids the caller must publish as fetch requests: those
	// whose match ledger row this request created, or that are still
	// unfetched and were listed by this request (a redelivered sync
	// re-publishes its own; JetStream dedup drops the copies).
	Publish   []string
	Total     int  // matches listed for the sync (all ClaimMatches calls)
	Done      int  // of which done already
	Completed bool // the sync is completed (done == total)
}

// ClaimMatches records, in one transaction, that sync requestID of puuid
// covers ids: sync_matches rows, match ledger rows (unfetched, listed by
// requestID) where absent, done marks for ids already done, and the
// account's sync_total / sync_progress. When everything is done the sync is
// completed at once (account completed, jobs row completed). The ledger rows
// are share-locked in key order, so a concurrent PersistBatch either sees
// these sync_matches rows or is seen by this count. Returns ErrNotFound when
// the account is not syncing for requestID (BeginSync first) and not already
// completed by it.
func (s *Store) ClaimMatches(ctx context.Context, requestID, puuid string, ids []string) (_ ClaimResult, err error) {
	defer classified(&err)
	sorted := append([]string(nil), ids...)
	sort.Strings(sorted)
	sorted = compact(sorted)
	var res ClaimResult
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		res = ClaimResult{}
		if _, err := tx.Exec(ctx, `
INSERT INTO sync_matches (request_id, match_id, puuid)
SELECT $1, id, $2 FROM unnest($3::text[]) id
ON CONFLICT (request_id, match_id) DO NOTHING`, requestID, puuid, sorted); err != nil {
			return fmt.Errorf("sync_matches: %w", err)
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO match_fetches (match_id, kind, status, listed_by_request)
SELECT id, 'match', 'unfetched', $1 FROM unnest($2::text[]) id
ON CONFLICT (match_id, kind) DO NOTHING`, requestID, sorted); err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		rows, err := tx.Query(ctx, `
SELECT match_id FROM match_fetches
WHERE match_id = ANY($2) AND kind = 'match' AND status = 'unfetched' AND listed_by_request = $1
ORDER BY match_id`, requestID, sorted)
		if err != nil {
			return fmt.Errorf("publish set: %w", err)
		}
		if res.Publish, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return fmt.Errorf("publish set: %w", err)
		}
		// Lock (share) this request's ledger rows in key order, then mark
		// those already done: a persister that finalised one of them either
		// committed before the lock (we see it) or waits for our commit
		// (its later statements see our sync_matches rows).
		if _, err := tx.Exec(ctx, `SELECT 1 FROM match_fetches WHERE match_id = ANY($1)
ORDER BY match_id, kind FOR SHARE`, sorted); err != nil {
			return fmt.Errorf("lock ledger: %w", err)
		}
		if _, err := tx.Exec(ctx, `
UPDATE sync_matches s SET done = true
FROM (`+fmt.Sprintf(doneMatches, "SELECT unnest($2::text[]) AS match_id")+`) d
WHERE s.request_id = $1 AND s.match_id = d.match_id AND NOT s.done`, requestID, sorted); err != nil {
			return fmt.Errorf("mark done: %w", err)
		}
		var status syncjob.Status
		var current string
		err = tx.QueryRow(ctx, `SELECT sync_status, coalesce(sync_request_id, '') FROM accounts
WHERE puuid = $1 FOR UPDATE`, puuid).Scan(&status, &current)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && current != requestID) {
			return fmt.Errorf("account %s has no sync %s: %w", puuid, requestID, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("lock account: %w", err)
		}
		if err := tx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE done), count(*) FROM sync_matches
WHERE request_id = $1`, requestID).Scan(&res.Done, &res.Total); err != nil {
			return fmt.Errorf("count: %w", err)
		}
		res.Completed = res.Done >= res.Total
		switch status {
		case syncjob.Syncing:
		case syncjob.Completed:
			return nil
		default:
			return fmt.Errorf("account %s sync %s is %s: %w", puuid, requestID, status, ErrNotFound)
		}
		if _, err := tx.Exec(ctx, `
UPDATE accounts SET sync_total = $2, sync_progress = $3, last_progress_at = now(), updated_at = now(),
    sync_status = CASE WHEN $4 THEN 'completed' ELSE sync_status END,
    last_synced_at = CASE WHEN $4 THEN now() ELSE last_synced_at END
WHERE puuid = $1`, puuid, res.Total, res.Done, res.Completed); err != nil {
			return fmt.Errorf("account: %w", err)
		}
		if res.Completed {
			if _, err := tx.Exec(ctx, `UPDATE jobs SET status = 'completed', finished_at = now(), error = NULL
WHERE id = $1 AND status IN ('pending', 'running')`, requestID); err != nil {
				return fmt.Errorf("job: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return ClaimResult{}, fmt.Errorf("store: claim matches %s: %w", requestID, err)
	}
	return res, nil
}

// ForceRefetch prepares a forced sync (design 002's force): the match and
// timeline ledger rows of ids that are final (success, permanently
// unfetchable, outside retention) are put back to unfetched, attempt 0 (a
// new chain of attempts; retry_count keeps the history) and listed by
// requestID, so ClaimMatches hands them to this sync to publish again and
// the persister overwrites the stored rows. The jobs row's detail.forced
// records how many stored matches were reopened. Returns that number.
func (s *Store) ForceRefetch(ctx context.Context, requestID string, ids []string) (_ int, err error) {
	defer classified(&err)
	var n int
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
UPDATE match_fetches SET status = 'unfetched', listed_by_request = $1, last_error = NULL, http_status = NULL,
    attempt = 0, updated_at = now()
WHERE match_id = ANY($2) AND status IN ('success', 'permanently_unfetchable', 'outside_retention_window')`,
			requestID, ids)
		if err != nil {
			return err
		}
		err = tx.QueryRow(ctx, `SELECT count(*)::int FROM match_fetches
WHERE match_id = ANY($2) AND kind = 'match' AND status = 'unfetched' AND listed_by_request = $1`,
			requestID, ids).Scan(&n)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE jobs SET detail = coalesce(detail, '{}') ||
    jsonb_build_object('force', true, 'forced', coalesce((detail->>'forced')::int, 0) + $2::int)
WHERE id = $1`, requestID, n)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: force refetch %s: %w", requestID, err)
	}
	return n, nil
}

// FailSync marks sync requestID of puuid failed with reason (account
// sync_status failed and sync_error, jobs row failed). It does nothing when
// the account has moved on to another request or finished.
func (s *Store) FailSync(ctx context.Context, requestID, puuid, reason string) (err error) {
	defer classified(&err)
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE accounts SET sync_status = 'failed', sync_error = $3, updated_at = now()
WHERE puuid = $1 AND sync_request_id = $2 AND sync_status IN ('syncing', 'pending')`,
			puuid, requestID, reason); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE jobs SET status = 'failed', error = $2, finished_at = now()
WHERE id = $1 AND status IN ('pending', 'running')`, requestID, reason)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: fail sync %s: %w", requestID, err)
	}
	return nil
}

// KnownMatchIDs reports which of ids already have a match ledger row (any
// status): listed before, by any request. Absent ids are absent from the map.
func (s *Store) KnownMatchIDs(ctx context.Context, ids []string) (_ map[string]bool, err error) {
	defer classified(&err)
	rows, err := s.pool.Query(ctx, `SELECT match_id FROM match_fetches WHERE kind = 'match' AND match_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("store: known match ids: %w", err)
	}
	known, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("store: known match ids: %w", err)
	}
	out := make(map[string]bool, len(known))
	for _, id := range known {
		out[id] = true
	}
	return out, nil
}

// AccountStatus is an account with what is stored for it.
type AccountStatus struct {
	Account
	Matches      int // matches stored in which the account played
	Participants int // match_participants rows of those matches (every player's)
	Timelines    int // timelines stored for those matches
	// Ledger counts the account's matches (listed by its syncs, or stored
	// with it as a participant) by "kind/status", e.g. "match/success",
	// "timeline/temporary_failure".
	Ledger map[string]int
	// Queued lists the account's sync requests accepted but not started
	// (QueueSync), oldest first, each with its place in its priority's
	// queue. While the account is not syncing, the oldest is its sync:
	// SyncStatus "pending", SyncRequestID its id.
	Queued []Queued
	// SyncedAge is how long ago LastSyncedAt was when it was read, on the
	// database's clock, which stamped it: a caller's clock may be set
	// apart from the database's, so it judges an account's freshness by
	// this age, never by its own time less LastSyncedAt. 0 when never
	// synced.
	SyncedAge time.Duration `json:"-"`
}

// syncedAgeCol is the column after accountCols that AccountStatus and
// AccountByRiotID read into AccountStatus.SyncedAge (seconds).
const syncedAgeCol = `, coalesce(extract(epoch FROM now() - last_synced_at)::float8, 0)`

// AccountStatus returns the status of the account puuid; ErrNotFound when
// there is no such account.
func (s *Store) AccountStatus(ctx context.Context, puuid string) (_ AccountStatus, err error) {
	defer classified(&err)
	var age float64
	a, err := scanAccount(s.pool.QueryRow(ctx, `SELECT `+accountCols+syncedAgeCol+` FROM accounts WHERE puuid = $1`, puuid), &age)
	return s.accountStatus(ctx, a, age, err, puuid, "")
}

// AccountByRiotID is AccountStatus looked up by Riot ID (game name and tag
// line, case-insensitive).
func (s *Store) AccountByRiotID(ctx context.Context, gameName, tagLine string) (_ AccountStatus, err error) {
	defer classified(&err)
	var age float64
	a, err := scanAccount(s.pool.QueryRow(ctx, `SELECT `+accountCols+syncedAgeCol+` FROM accounts
WHERE lower(game_name) = lower($1) AND lower(tag_line) = lower($2)
ORDER BY updated_at DESC LIMIT 1`, gameName, tagLine), &age)
	return s.accountStatus(ctx, a, age, err, "", gameName+"#"+tagLine)
}

// accountStatus completes the account a read by puuid or riotID (err: the
// read's error; syncedAge: its SyncedAge in seconds) with its counts,
// ledger and queued requests. An account not stored yet with a queued
// request is pending (withQueue).
func (s *Store) accountStatus(ctx context.Context, a Account, syncedAge float64, err error, puuid, riotID string) (AccountStatus, error) {
	key := puuid + riotID
	if errors.Is(err, pgx.ErrNoRows) {
		q, platform, qerr := s.queued(ctx, puuid, riotID)
		if qerr != nil {
			return AccountStatus{}, qerr
		}
		if len(q) == 0 {
			return AccountStatus{}, fmt.Errorf("store: account %s: %w", key, ErrNotFound)
		}
		st := AccountStatus{Account: Account{PUUID: puuid, Platform: platform}, Ledger: map[string]int{}}
		st.GameName, st.TagLine, _ = strings.Cut(riotID, "#")
		withQueue(&st, q)
		return st, nil
	}
	if err != nil {
		return AccountStatus{}, fmt.Errorf("store: account %s: %w", key, err)
	}
	st := AccountStatus{Account: a, Ledger: map[string]int{}, SyncedAge: time.Duration(syncedAge * float64(time.Second))}
	err = s.pool.QueryRow(ctx, `
WITH mine AS (SELECT DISTINCT match_id FROM match_participants WHERE puuid = $1)
SELECT (SELECT count(*)::int FROM mine),
       (SELECT count(*)::int FROM match_participants p WHERE p.match_id IN (SELECT match_id FROM mine)),
       (SELECT count(*)::int FROM match_timelines t WHERE t.match_id IN (SELECT match_id FROM mine))`, a.PUUID).Scan(&st.Matches, &st.Participants, &st.Timelines)
	if err != nil {
		return AccountStatus{}, fmt.Errorf("store: account %s counts: %w", key, err)
	}
	rows, err := s.pool.Query(ctx, `
SELECT f.kind || '/' || f.status, count(*)::int
FROM match_fetches f
WHERE f.match_id IN (SELECT match_id FROM sync_matches WHERE puuid = $1
                     UNION SELECT match_id FROM match_participants WHERE puuid = $1)
GROUP BY 1`, a.PUUID)
	if err != nil {
		return AccountStatus{}, fmt.Errorf("store: account %s ledger: %w", key, err)
	}
	var k string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&k, &n}, func() error { st.Ledger[k] = n; return nil }); err != nil {
		return AccountStatus{}, fmt.Errorf("store: account %s ledger: %w", key, err)
	}
	if riotID == "" && a.GameName != "" {
		riotID = a.GameName + "#" + a.TagLine
	}
	q, _, err := s.queued(ctx, a.PUUID, riotID)
	if err != nil {
		return AccountStatus{}, err
	}
	withQueue(&st, q)
	return st, nil
}

// RunningSync is an account sync in progress with listed matches not yet
// done.
type RunningSync struct {
	PUUID, RequestID, Region string
	// LastProgress is the sync's last progress (else its start), stamped
	// by the database and moved onto the caller's clock (RunningSyncs).
	LastProgress time.Time
}

// RunningSyncs returns the syncs in progress that have listed matches not
// yet done (sync_matches): their work is in the pipeline, and the
// retry-sweeper keeps their PUUID locks alive while they are healthy. A
// sync waiting only for its lister (nothing claimed yet) is the lister's to
// keep alive.
//
// now is the caller's clock, read for this call. A sync's times are the
// database's (now() of the write that began it or moved its progress);
// each LastProgress is moved onto the caller's clock by its offset from
// the database's (now less now()), so a caller whose clock is set apart
// from the database's (skewed, or jumped) sees a sync that progressed a
// moment ago as a moment old, not as old as the offset.
func (s *Store) RunningSyncs(ctx context.Context, now time.Time) (_ []RunningSync, err error) {
	defer classified(&err)
	rows, err := s.pool.Query(ctx, `WITH clock AS (SELECT $1::timestamptz - now() AS offset_)
SELECT a.puuid, a.sync_request_id, a.region,
  coalesce(a.last_progress_at, a.sync_started_at, a.updated_at) + clock.offset_
FROM accounts a, clock
WHERE a.sync_status = 'syncing' AND a.sync_request_id IS NOT NULL
  AND EXISTS (SELECT 1 FROM sync_matches s WHERE s.request_id = a.sync_request_id AND NOT s.done)
ORDER BY a.puuid`, now)
	if err != nil {
		return nil, fmt.Errorf("store: running syncs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RunningSync, error) {
		var x RunningSync
		return x, r.Scan(&x.PUUID, &x.RequestID, &x.Region, &x.LastProgress)
	})
	if err != nil {
		return nil, fmt.Errorf("store: running syncs: %w", err)
	}
	return out, nil
}
