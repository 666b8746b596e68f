package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// MatchRaw returns the stored MatchDto of matchID as Riot sent it (the
// JSON body, byte-equal: the json column raw, or for a document kept
// compressed, raw_gzip un-gzipped) and when it was fetched. Permanently unfetchable
// matches are hidden (visible_matches). ErrNotFound when absent.
func (s *Store) MatchRaw(ctx context.Context, matchID string) ([]byte, time.Time, error) {
	return s.raw(ctx, `SELECT raw, raw_gzip, fetched_at FROM visible_matches WHERE match_id = $1`, matchID)
}

// TimelineRaw is MatchRaw for the TimelineDto.
func (s *Store) TimelineRaw(ctx context.Context, matchID string) ([]byte, time.Time, error) {
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
func (s *Store) PlayerMatches(ctx context.Context, puuid string, page MatchPage, limit int) ([]PlayerMatch, error) {
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
