package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// LinkAccount marks the account a.PUUID linked (active = true), creating it
// when absent (sync_status pending) with a.Platform and a.Region. A
// non-empty a.GameName/a.TagLine replaces the stored Riot ID, a non-empty
// a.Platform the stored platform and region; empty ones keep them (the
// sync stores the platform the resolver found). Design 001's "account
// linked" trigger; the caller then queues a sync.
func (s *Store) LinkAccount(ctx context.Context, a Account) (err error) {
	defer classified(&err)
	_, err = s.pool.Exec(ctx, `
INSERT INTO accounts (puuid, game_name, tag_line, platform, region, active)
VALUES ($1, $2, $3, $4, $5, true)
ON CONFLICT (puuid) DO UPDATE SET active = true,
    platform = CASE WHEN EXCLUDED.platform <> '' THEN EXCLUDED.platform ELSE accounts.platform END,
    region = CASE WHEN EXCLUDED.platform <> '' THEN EXCLUDED.region ELSE accounts.region END,
    game_name = CASE WHEN EXCLUDED.game_name <> '' THEN EXCLUDED.game_name ELSE accounts.game_name END,
    tag_line = CASE WHEN EXCLUDED.tag_line <> '' THEN EXCLUDED.tag_line ELSE accounts.tag_line END,
    updated_at = now()`, a.PUUID, a.GameName, a.TagLine, a.Platform, a.Region)
	if err != nil {
		return fmt.Errorf("store: link account %s: %w", a.PUUID, err)
	}
	return nil
}

// UnlinkAccount sets active = false so scheduled jobs skip the account; its
// data stays. ErrNotFound when there is no such account.
func (s *Store) UnlinkAccount(ctx context.Context, puuid string) (err error) {
	defer classified(&err)
	tag, err := s.pool.Exec(ctx, `UPDATE accounts SET active = false, updated_at = now() WHERE puuid = $1`, puuid)
	if err != nil {
		return fmt.Errorf("store: unlink account %s: %w", puuid, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("store: unlink account %s: %w", puuid, ErrNotFound)
	}
	return nil
}

// ActiveAccounts returns every active account with a platform, by PUUID
// (the accounts scheduled jobs work on).
func (s *Store) ActiveAccounts(ctx context.Context) (_ []Account, err error) {
	defer classified(&err)
	return s.queryAccounts(ctx, "active accounts", `SELECT `+accountCols+` FROM accounts
WHERE active AND platform <> '' ORDER BY puuid`)
}

// MatchStatuses returns the match ledger status (kind match) of each of ids
// that has a ledger row; absent ids are absent from the map.
func (s *Store) MatchStatuses(ctx context.Context, ids []string) (_ map[string]string, err error) {
	defer classified(&err)
	rows, err := s.pool.Query(ctx, `SELECT match_id, status FROM match_fetches WHERE kind = 'match' AND match_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("store: match statuses: %w", err)
	}
	out := make(map[string]string, len(ids))
	var id, st string
	if _, err := pgx.ForEachRow(rows, []any{&id, &st}, func() error { out[id] = st; return nil }); err != nil {
		return nil, fmt.Errorf("store: match statuses: %w", err)
	}
	return out, nil
}

// AdoptOrphans makes requestID the lister of those of ids whose match
// ledger row is still unfetched and was listed by a request that is no
// longer syncing any account (a lister or sync that died before publishing
// it, e.g. a sync reset by crash recovery). ClaimMatches then returns them
// in Publish, so the new sync publishes them. Rows listed by a live sync are
// left alone: that sync publishes them. Returns the adopted ids.
func (s *Store) AdoptOrphans(ctx context.Context, requestID string, ids []string) (_ []string, err error) {
	defer classified(&err)
	return queryRows(ctx, s, "adopt orphans "+requestID, pgx.RowTo[string], `
UPDATE match_fetches f SET listed_by_request = $1, updated_at = now()
WHERE f.kind = 'match' AND f.match_id = ANY($2) AND f.status = 'unfetched'
  AND f.listed_by_request IS DISTINCT FROM $1
  AND NOT EXISTS (SELECT 1 FROM accounts a WHERE a.sync_status = 'syncing'
                  AND a.sync_request_id = f.listed_by_request)
RETURNING f.match_id`, requestID, ids)
}

// LeagueSnapshot is the first or last league_entries row of a period.
type LeagueSnapshot struct {
	Day          time.Time
	Tier, Rank   string
	LeaguePoints int
}

// LPChange is the change in league points in queueType (e.g.
// "RANKED_SOLO_5x5") between the account's first snapshot on or after from
// and its last snapshot before to (days, UTC), counting a division as 100
// LP and a tier as 400 (Master and above share one ladder). nil when fewer
// than two snapshots fall in the period.
func (s *Store) LPChange(ctx context.Context, puuid, queueType string, from, to time.Time) (_ *int, err error) {
	defer classified(&err)
	rows, err := s.pool.Query(ctx, `
(SELECT snapshot_date, tier, rank, league_points FROM league_entries
 WHERE puuid = $1 AND queue_type = $2 AND snapshot_date >= $3::date AND snapshot_date < $4::date
 ORDER BY snapshot_date LIMIT 1)
UNION ALL
(SELECT snapshot_date, tier, rank, league_points FROM league_entries
 WHERE puuid = $1 AND queue_type = $2 AND snapshot_date >= $3::date AND snapshot_date < $4::date
 ORDER BY snapshot_date DESC LIMIT 1)`, puuid, queueType,
		from.UTC().Format(time.DateOnly), to.UTC().Format(time.DateOnly))
	if err != nil {
		return nil, fmt.Errorf("store: lp change %s: %w", puuid, err)
	}
	snaps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LeagueSnapshot, error) {
		var l LeagueSnapshot
		err := r.Scan(&l.Day, &l.Tier, &l.Rank, &l.LeaguePoints)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: lp change %s: %w", puuid, err)
	}
	if len(snaps) < 2 || snaps[0].Day.Equal(snaps[1].Day) {
		return nil, nil
	}
	d := LadderPoints(snaps[1].Tier, snaps[1].Rank, snaps[1].LeaguePoints) -
		LadderPoints(snaps[0].Tier, snaps[0].Rank, snaps[0].LeaguePoints)
	return &d, nil
}

// LadderPoints places a rank on one LP scale: 400 per tier from IRON IV =
// 0, 100 per division, plus lp. MASTER, GRANDMASTER and CHALLENGER have no
// divisions and share the scale above DIAMOND I.
func LadderPoints(tier, rank string, lp int) int {
	tiers := map[string]int{"IRON": 0, "BRONZE": 1, "SILVER": 2, "GOLD": 3, "PLATINUM": 4, "EMERALD": 5, "DIAMOND": 6}
	divs := map[string]int{"IV": 0, "III": 1, "II": 2, "I": 3}
	if t, ok := tiers[tier]; ok {
		return t*400 + divs[rank]*100 + lp
	}
	switch tier {
	case "MASTER", "GRANDMASTER", "CHALLENGER":
		return 7*400 + lp
	}
	return lp
}

// JobByID returns one jobs row; ErrNotFound when absent.
func (s *Store) JobByID(ctx context.Context, id string) (_ Job, err error) {
	defer classified(&err)
	var j Job
	var started, finished *time.Time
	var detail []byte
	err = s.pool.QueryRow(ctx, `
SELECT id, type, coalesce(puuid, ''), status, retries, coalesce(error, ''), detail, requested_at, started_at, finished_at
FROM jobs WHERE id = $1`, id).Scan(&j.ID, &j.Type, &j.PUUID, &j.Status, &j.Retries, &j.Error, &detail,
		&j.RequestedAt, &started, &finished)
	if errors.Is(err, pgx.ErrNoRows) {
		return Job{}, fmt.Errorf("store: job %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Job{}, fmt.Errorf("store: job %s: %w", id, err)
	}
	j.Detail, j.StartedAt, j.FinishedAt = detail, deref(started), deref(finished)
	return j, nil
}

// RecordJobOnce creates job j (like RecordJob) unless a job with its id
// exists, which is left unchanged, except a pending one (a queued request,
// QueueSync) that j, no longer pending, ends; it reports whether j was
// recorded. Used for rejected requests, whose id may belong to a sync that
// already ran.
func (s *Store) RecordJobOnce(ctx context.Context, j Job) (_ bool, err error) {
	defer classified(&err)
	tag, err := s.pool.Exec(ctx, jobInsert+`
ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, error = EXCLUDED.error,
    puuid = coalesce(jobs.puuid, EXCLUDED.puuid), detail = coalesce(jobs.detail, '{}') || coalesce(EXCLUDED.detail, '{}'),
    started_at = EXCLUDED.started_at, finished_at = EXCLUDED.finished_at
WHERE jobs.status = 'pending' AND EXCLUDED.status <> 'pending'`, insertArgs(j)...)
	if err != nil {
		return false, fmt.Errorf("store: record job %s: %w", j.ID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// RequestProgress counts sync request requestID's listed matches (total)
// and those that reached a final state (done), from sync_matches. A request
// that listed nothing, or is unknown, gives 0, 0.
func (s *Store) RequestProgress(ctx context.Context, requestID string) (done, total int, err error) {
	defer classified(&err)
	err = s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE done), count(*) FROM sync_matches WHERE request_id = $1`,
		requestID).Scan(&done, &total)
	if err != nil {
		return 0, 0, fmt.Errorf("store: request progress %s: %w", requestID, err)
	}
	return done, total, nil
}
