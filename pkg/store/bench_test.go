package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/riftflow/riftflow/pkg/store"
)

// benchFixtures are the real matches of at least 40 KB of JSON with 10 participants.
func benchFixtures(b *testing.B) []fixture {
	var out []fixture
	for _, fx := range loadFixtures(b) {
		if len(fx.Participants) == 10 && len(fx.Match.Raw) >= 40<<10 {
			out = append(out, fx)
		}
	}
	if len(out) == 0 {
		b.Fatal("no 10-participant fixture of about 10 KB")
	}
	return out
}

// BenchmarkPersist compares PersistBatch (batch of 500) with one-row-at-a-time
// upserts (one statement per row, one transaction per match). Each match is a
// real fixture under a new id: 1 matches row (≈50 KB of JSON in raw), 10
// match_participants rows and 1 ledger update. Reports matches/s.
func BenchmarkPersist(b *testing.B) {
	fxs := benchFixtures(b)
	b.Run("PersistBatch500", func(b *testing.B) {
		s := openStore(b)
		ctx := context.Background()
		b.ResetTimer()
		for done := 0; done < b.N; {
			n := min(500, b.N-done)
			var batch store.Batch
			for i := 0; i < n; i++ {
				fx := withID(fxs[(done+i)%len(fxs)], fmt.Sprintf("EUW1_B%d", done+i))
				batch.Matches = append(batch.Matches, fx.Match)
				batch.Participants = append(batch.Participants, fx.Participants...)
				batch.Ledger = append(batch.Ledger, store.LedgerUpdate{MatchID: fx.Match.MatchID, Kind: "match",
					Status: "success", Attempt: 1, HTTPStatus: 200, GameCreation: fx.Match.GameCreation,
					AttemptedAt: t0})
			}
			if _, err := s.PersistBatch(ctx, batch); err != nil {
				b.Fatal(err)
			}
			done += n
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "matches/s")
	})
	b.Run("OneRowPerStatement", func(b *testing.B) {
		s := openStore(b)
		ctx := context.Background()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			fx := withID(fxs[i%len(fxs)], fmt.Sprintf("EUW1_S%d", i))
			if err := persistOneByOne(ctx, s, fx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "matches/s")
	})
}

// persistOneByOne is the naive baseline: one transaction per match, one
// INSERT … ON CONFLICT round trip per row.
func persistOneByOne(ctx context.Context, s *testStore, fx fixture) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		m := fx.Match
		if _, err := tx.Exec(ctx, `
INSERT INTO matches (match_id, platform, region, queue_id, game_mode, game_type, game_version, patch, map_id,
    game_creation, game_start, game_end, duration_s, end_of_game_result, participant_count, raw, fetched_at)
VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17)
ON CONFLICT (match_id) DO UPDATE SET raw = EXCLUDED.raw, fetched_at = EXCLUDED.fetched_at
WHERE matches.raw::text IS DISTINCT FROM EXCLUDED.raw::text`,
			m.MatchID, m.Platform, m.Region, m.QueueID, m.GameMode, m.GameType, m.GameVersion, m.Patch, m.MapID,
			m.GameCreation, m.GameStart, m.GameEnd, m.DurationS, m.EndOfGameResult, m.ParticipantCount, string(m.Raw),
			m.FetchedAt); err != nil {
			return err
		}
		for _, p := range fx.Participants {
			if _, err := tx.Exec(ctx, `
INSERT INTO match_participants (match_id, participant_id, puuid, riot_id_game_name, riot_id_tagline, team_id,
    champion_id, champion_name, champ_level, team_position, win, kills, deaths, assists, gold_earned, cs,
    vision_score, damage_to_champions, time_played_s, placement)
VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20)
ON CONFLICT (match_id, participant_id) DO NOTHING`,
				p.MatchID, p.ParticipantID, p.PUUID, p.RiotIDGameName, p.RiotIDTagline, p.TeamID, p.ChampionID,
				p.ChampionName, p.ChampLevel, p.TeamPosition, p.Win, p.Kills, p.Deaths, p.Assists, p.GoldEarned,
				p.CS, p.VisionScore, p.DamageToChampions, p.TimePlayedS, p.Placement); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `
INSERT INTO match_fetches (match_id, kind, status, attempt, fetched_at, last_attempt_at, http_status)
VALUES ($1, 'match', 'success', 1, now(), now(), 200)
ON CONFLICT (match_id, kind) DO UPDATE SET status = 'success', fetched_at = now(), updated_at = now()
WHERE match_fetches.status <> 'success'`, m.MatchID)
		return err
	})
}
