package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// MatchRaw returns the stored MatchDto of matchID as Riot sent it (the
// JSON body, byte-equal: the json column raw, or for a document kept
// compressed, raw_gzip un-gzipped) and when it was fetched. Permanently unfetchable
// matches are hidden (visible_matches). ErrNotFound when absent.
func (s *Store) MatchRaw(ctx context.Context, matchID string) (_ []byte, _ time.Time, err error) {
	defer classified(&err)
	return s.raw(ctx, `SELECT raw, raw_gzip, fetched_at FROM visible_matches WHERE match_id = $1`, matchID)
}

// TimelineRaw is MatchRaw for the TimelineDto.
func (s *Store) TimelineRaw(ctx context.Context, matchID string) (_ []byte, _ time.Time, err error) {
	defer classified(&err)
	return s.raw(ctx, `SELECT t.raw, t.raw_gzip, t.fetched_at FROM match_timelines t
JOIN visible_matches m USING (match_id) WHERE t.match_id = $1`, matchID)
}

func (s *Store) raw(ctx context.Context, sql, matchID string) ([]byte, time.Time, error) {
	var doc, gz []byte
	var at time.Time
	err := s.pool.QueryRow(ctx, sql, matchID).Scan(&doc, &gz, &at)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && doc == nil && gz == nil) {
		return nil, time.Time{}, fmt.Errorf("store: %s: %w", matchID, ErrNotFound)
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("store: %s: %w", matchID, err)
	}
	if doc != nil {
		return doc, at, nil
	}
	b, err := gunzipAll(gz)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("store: %s: stored payload: %w", matchID, err)
	}
	return b, at, nil
}

// PlayerMatch is one of a player's stored matches, with their line of it.
type PlayerMatch struct {
	MatchID      string    `json:"match_id"`
	GameCreation time.Time `json:"game_creation"`
	QueueID      int       `json:"queue_id"`
	DurationS    int       `json:"duration_s"`
	ChampionName string    `json:"champion_name"`
	TeamPosition string    `json:"team_position"`
	Win          bool      `json:"win"`
	Kills        int       `json:"kills"`
	Deaths       int       `json:"deaths"`
	Assists      int       `json:"assists"`
}

// MatchPage is a position in a player's matches, newest first: the
// (game_creation, match_id) of the last match of the previous page; the
// zero value starts at the newest.
type MatchPage struct {
	Before   time.Time
	BeforeID string
}

// PlayerMatches returns up to limit (1..100) of puuid's stored visible
// matches after page, newest first (keyset pagination on game_creation,
// match_id).
func (s *Store) PlayerMatches(ctx context.Context, puuid string, page MatchPage, limit int) (_ []PlayerMatch, err error) {
	defer classified(&err)
	limit = min(max(limit, 1), 100)
	rows, err := s.pool.Query(ctx, `
SELECT m.match_id, coalesce(m.game_creation, 'epoch'), m.queue_id, m.duration_s, p.champion_name, p.team_position,
       p.win, p.kills, p.deaths, p.assists
FROM match_participants p JOIN visible_matches m USING (match_id)
WHERE p.puuid = $1
  AND ($2::timestamptz IS NULL OR (coalesce(m.game_creation, 'epoch'), m.match_id) < ($2, $3))
ORDER BY coalesce(m.game_creation, 'epoch') DESC, m.match_id DESC
LIMIT $4`, puuid, ts(page.Before), page.BeforeID, limit)
	if err != nil {
		return nil, fmt.Errorf("store: player matches: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PlayerMatch, error) {
		var m PlayerMatch
		err := r.Scan(&m.MatchID, &m.GameCreation, &m.QueueID, &m.DurationS, &m.ChampionName, &m.TeamPosition,
			&m.Win, &m.Kills, &m.Deaths, &m.Assists)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: player matches: %w", err)
	}
	return out, nil
}

// DayPage is a position in a list of daily or weekly rows, newest first:
// the day (and, for rank snapshots, the queue type) of the last row of the
// previous page; the zero value starts at the newest.
type DayPage struct {
	Before    time.Time // a UTC day; zero: from the newest
	BeforeKey string    // the queue type at Before (rank snapshots only)
}

// RankSnapshot is one league_entries row: a player's standing in one
// ranked queue on one day (league-v4, CRON_RANK_DAILY).
type RankSnapshot struct {
	QueueType    string    `json:"queue_type"`    // e.g. "RANKED_SOLO_5x5"
	SnapshotDate string    `json:"snapshot_date"` // the UTC day, YYYY-MM-DD
	Platform     string    `json:"platform"`
	LeagueID     string    `json:"league_id"`
	Tier         string    `json:"tier"` // "GOLD"
	Rank         string    `json:"rank"` // "II"
	LeaguePoints int       `json:"league_points"`
	Wins         int       `json:"wins"`
	Losses       int       `json:"losses"`
	HotStreak    bool      `json:"hot_streak"`
	Veteran      bool      `json:"veteran"`
	FreshBlood   bool      `json:"fresh_blood"`
	Inactive     bool      `json:"inactive"`
	FetchedAt    time.Time `json:"fetched_at"`
}

// RankSnapshots returns up to limit (1..100) of puuid's league snapshots
// after page, newest day first, then by queue type descending (keyset
// pagination on snapshot_date, queue_type).
func (s *Store) RankSnapshots(ctx context.Context, puuid string, page DayPage, limit int) (_ []RankSnapshot, err error) {
	defer classified(&err)
	rows, err := s.pool.Query(ctx, `
SELECT queue_type, to_char(snapshot_date, 'YYYY-MM-DD'), platform, league_id, tier, rank, league_points, wins,
       losses, hot_streak, veteran, fresh_blood, inactive, fetched_at
FROM league_entries
WHERE puuid = $1 AND ($2::date IS NULL OR (snapshot_date, queue_type) < ($2::date, $3))
ORDER BY snapshot_date DESC, queue_type DESC
LIMIT $4`, puuid, day(page.Before), page.BeforeKey, min(max(limit, 1), 100))
	if err != nil {
		return nil, fmt.Errorf("store: rank snapshots: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RankSnapshot, error) {
		var e RankSnapshot
		err := r.Scan(&e.QueueType, &e.SnapshotDate, &e.Platform, &e.LeagueID, &e.Tier, &e.Rank, &e.LeaguePoints,
			&e.Wins, &e.Losses, &e.HotStreak, &e.Veteran, &e.FreshBlood, &e.Inactive, &e.FetchedAt)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: rank snapshots: %w", err)
	}
	return out, nil
}

// StoredReport is one weekly_reports row (CRON_WEEKLY_REPORT).
type StoredReport struct {
	WeekStart    string          `json:"week_start"` // the UTC day the week starts, YYYY-MM-DD
	Games        int             `json:"games"`
	Wins         int             `json:"wins"`
	Kills        int             `json:"kills"`
	Deaths       int             `json:"deaths"`
	Assists      int             `json:"assists"`
	KDA          float64         `json:"kda"`           // (kills+assists)/max(deaths,1), 2 decimals
	TopChampions json.RawMessage `json:"top_champions"` // [{"champion","games","wins"}], at most 3
	LPChange     *int            `json:"lp_change"`     // null when unknown
	CreatedAt    time.Time       `json:"created_at"`
}

// WeeklyReports returns up to limit (1..100) of puuid's weekly reports
// before page.Before (zero: from the newest), newest week first.
func (s *Store) WeeklyReports(ctx context.Context, puuid string, page DayPage, limit int) (_ []StoredReport, err error) {
	defer classified(&err)
	rows, err := s.pool.Query(ctx, `
SELECT to_char(week_start, 'YYYY-MM-DD'), games, wins, kills, deaths, assists, kda::float8, top_champions,
       lp_change, created_at
FROM weekly_reports
WHERE puuid = $1 AND ($2::date IS NULL OR week_start < $2::date)
ORDER BY week_start DESC
LIMIT $3`, puuid, day(page.Before), min(max(limit, 1), 100))
	if err != nil {
		return nil, fmt.Errorf("store: weekly reports: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StoredReport, error) {
		var w StoredReport
		var top []byte
		err := r.Scan(&w.WeekStart, &w.Games, &w.Wins, &w.Kills, &w.Deaths, &w.Assists, &w.KDA, &top,
			&w.LPChange, &w.CreatedAt)
		w.TopChampions = top
		return w, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: weekly reports: %w", err)
	}
	return out, nil
}

// day is t's UTC day as YYYY-MM-DD, or nil for the zero time.
func day(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(time.DateOnly)
}
