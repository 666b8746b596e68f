package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// LeagueEntry is one daily league-v4 snapshot row (league_entries).
type LeagueEntry struct {
	PUUID        string
	QueueType    string    // e.g. "RANKED_SOLO_5x5"
	SnapshotDate time.Time // the UTC day; time of day ignored
	Platform     string
	LeagueID     string
	Tier, Rank   string // "GOLD", "II"
	LeaguePoints int
	Wins, Losses int
	HotStreak    bool
	Veteran      bool
	FreshBlood   bool
	Inactive     bool
	FetchedAt    time.Time // zero → now()
}

// UpsertLeagueEntries stores the snapshots, replacing the same (puuid,
// queue type, day) when its content changed.
func (s *Store) UpsertLeagueEntries(ctx context.Context, entries []LeagueEntry) (err error) {
	defer classified(&err)
	b := &pgx.Batch{}
	for _, e := range entries {
		b.Queue(`
INSERT INTO league_entries AS t (puuid, queue_type, snapshot_date, platform, league_id, tier, rank, league_points,
    wins, losses, hot_streak, veteran, fresh_blood, inactive, fetched_at)
VALUES ($1, $2, $3::date, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, coalesce($15, now()))
ON CONFLICT (puuid, queue_type, snapshot_date) DO UPDATE SET platform = EXCLUDED.platform,
    league_id = EXCLUDED.league_id, tier = EXCLUDED.tier, rank = EXCLUDED.rank,
    league_points = EXCLUDED.league_points, wins = EXCLUDED.wins, losses = EXCLUDED.losses,
    hot_streak = EXCLUDED.hot_streak, veteran = EXCLUDED.veteran, fresh_blood = EXCLUDED.fresh_blood,
    inactive = EXCLUDED.inactive, fetched_at = EXCLUDED.fetched_at
WHERE (t.platform, t.league_id, t.tier, t.rank, t.league_points, t.wins, t.losses, t.hot_streak, t.veteran,
       t.fresh_blood, t.inactive) IS DISTINCT FROM
      (EXCLUDED.platform, EXCLUDED.league_id, EXCLUDED.tier, EXCLUDED.rank, EXCLUDED.league_points,
       EXCLUDED.wins, EXCLUDED.losses, EXCLUDED.hot_streak, EXCLUDED.veteran, EXCLUDED.fresh_blood,
       EXCLUDED.inactive)`,
			e.PUUID, e.QueueType, e.SnapshotDate.UTC().Format(time.DateOnly), e.Platform, e.LeagueID, e.Tier, e.Rank,
			e.LeaguePoints, e.Wins, e.Losses, e.HotStreak, e.Veteran, e.FreshBlood, e.Inactive, ts(e.FetchedAt))
	}
	if err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() }); err != nil {
		return fmt.Errorf("store: upsert league entries: %w", err)
	}
	return nil
}

// ChampionStat is one champion's line in a weekly report.
type ChampionStat struct {
	ChampionName string `json:"champion"`
	Games        int    `json:"games"`
	Wins         int    `json:"wins"`
}

// WeeklyStats aggregates an account's games in a period.
type WeeklyStats struct {
	Games, Wins            int
	Kills, Deaths, Assists int
	KDA                    float64        // (kills+assists)/max(deaths,1), 2 decimals
	TopChampions           []ChampionStat // by games, then wins, at most 3
}

// WeeklyStats sums the account's games that started in [from, to) from
// match_participants joined with visible_matches (permanently unfetchable
// matches excluded; game_creation used when game_start is NULL).
func (s *Store) WeeklyStats(ctx context.Context, puuid string, from, to time.Time) (_ WeeklyStats, err error) {
	defer classified(&err)
	var w WeeklyStats
	var top []byte
	err = s.pool.QueryRow(ctx, `
WITH g AS (
    SELECT p.* FROM match_participants p JOIN visible_matches m USING (match_id)
    WHERE p.puuid = $1 AND coalesce(m.game_start, m.game_creation) >= $2
      AND coalesce(m.game_start, m.game_creation) < $3
), c AS (
    SELECT champion_name, count(*)::int AS games, count(*) FILTER (WHERE win)::int AS wins
    FROM g GROUP BY champion_name ORDER BY games DESC, wins DESC, champion_name LIMIT 3
)
SELECT count(*)::int, count(*) FILTER (WHERE win)::int, coalesce(sum(kills), 0)::int,
       coalesce(sum(deaths), 0)::int, coalesce(sum(assists), 0)::int,
       (SELECT coalesce(jsonb_agg(jsonb_build_object('champion', champion_name, 'games', games, 'wins', wins)
                                  ORDER BY games DESC, wins DESC, champion_name), '[]') FROM c)
FROM g`, puuid, from, to).Scan(&w.Games, &w.Wins, &w.Kills, &w.Deaths, &w.Assists, &top)
	if err != nil {
		return WeeklyStats{}, fmt.Errorf("store: weekly stats %s: %w", puuid, err)
	}
	if err := json.Unmarshal(top, &w.TopChampions); err != nil {
		return WeeklyStats{}, fmt.Errorf("store: weekly stats %s: %w", puuid, err)
	}
	w.KDA = float64(int(float64(w.Kills+w.Assists)/float64(max(w.Deaths, 1))*100+0.5)) / 100
	return w, nil
}

// WeeklyReport is a weekly_reports row.
type WeeklyReport struct {
	PUUID     string
	WeekStart time.Time // the UTC day the week starts
	WeeklyStats
	LPChange *int // nil when unknown
}

// SaveWeeklyReport stores r, replacing an earlier report of the same week.
func (s *Store) SaveWeeklyReport(ctx context.Context, r WeeklyReport) (err error) {
	defer classified(&err)
	top, err := json.Marshal(r.TopChampions)
	if err != nil {
		return fmt.Errorf("store: save weekly report: %w", err)
	}
	if r.TopChampions == nil {
		top = []byte("[]")
	}
	_, err = s.pool.Exec(ctx, `
INSERT INTO weekly_reports (puuid, week_start, games, wins, kills, deaths, assists, kda, top_champions, lp_change)
VALUES ($1, $2::date, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (puuid, week_start) DO UPDATE SET games = EXCLUDED.games, wins = EXCLUDED.wins,
    kills = EXCLUDED.kills, deaths = EXCLUDED.deaths, assists = EXCLUDED.assists, kda = EXCLUDED.kda,
    top_champions = EXCLUDED.top_champions, lp_change = EXCLUDED.lp_change, created_at = now()`,
		r.PUUID, r.WeekStart.UTC().Format(time.DateOnly), r.Games, r.Wins, r.Kills, r.Deaths, r.Assists, r.KDA,
		top, r.LPChange)
	if err != nil {
		return fmt.Errorf("store: save weekly report %s: %w", r.PUUID, err)
	}
	return nil
}
