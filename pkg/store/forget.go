package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Forgotten counts what ForgetAccount removed, and the Riot ID the account
// had (so the caller can drop its riot-ids cache entry).
type Forgotten struct {
	GameName, TagLine string
	Accounts          int64 `json:"accounts"`
	Matches           int64 `json:"matches"`      // with their participants (cascade) and timelines
	Timelines         int64 `json:"timelines"`    // of those matches
	LedgerRows        int64 `json:"ledger_rows"`  // match_fetches rows of those matches
	KeptMatches       int64 `json:"kept_matches"` // other tracked accounts played in them
	SyncMatches       int64 `json:"sync_matches"`
	Jobs              int64 `json:"jobs"`
	LeagueEntries     int64 `json:"league_entries"`
	WeeklyReports     int64 `json:"weekly_reports"`
}

// ForgetAccount erases account puuid in one transaction: its accounts row,
// job log, sync bookkeeping, league snapshots and weekly reports, and every
// stored match it played in that no other stored account played in (the
// match row, its participants, its timeline and its fetch ledger rows).
// Matches another stored account needs are kept whole: the raw MatchDto
// names every participant, so they still mention the player. ErrNotFound
// when nothing was left to delete (no account, job or match of its own).
func (s *Store) ForgetAccount(ctx context.Context, puuid string) (Forgotten, error) {
	var f Forgotten
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		f = Forgotten{}
		err := tx.QueryRow(ctx, `SELECT game_name, tag_line FROM accounts WHERE puuid = $1 FOR UPDATE`, puuid).
			Scan(&f.GameName, &f.TagLine)
		if err != nil && err != pgx.ErrNoRows {
			return err
		}
		if _, err := tx.Exec(ctx, `
CREATE TEMP TABLE forget_matches ON COMMIT DROP AS
SELECT DISTINCT p.match_id,
    EXISTS (SELECT 1 FROM match_participants o JOIN accounts a ON a.puuid = o.puuid
            WHERE o.match_id = p.match_id AND o.puuid <> $1) AS needed
FROM match_participants p WHERE p.puuid = $1`, puuid); err != nil {
			return err
		}
		steps := []struct {
			n   *int64
			sql string
		}{
			{&f.KeptMatches, `SELECT 1 FROM forget_matches WHERE needed`},
			{&f.Timelines, `DELETE FROM match_timelines WHERE match_id IN (SELECT match_id FROM forget_matches WHERE NOT needed)`},
			{&f.LedgerRows, `DELETE FROM match_fetches WHERE match_id IN (SELECT match_id FROM forget_matches WHERE NOT needed)`},
			{&f.Matches, `DELETE FROM matches WHERE match_id IN (SELECT match_id FROM forget_matches WHERE NOT needed)`},
			{&f.SyncMatches, `DELETE FROM sync_matches WHERE puuid = $1`},
			{&f.Jobs, `DELETE FROM jobs WHERE puuid = $1`},
			{&f.LeagueEntries, `DELETE FROM league_entries WHERE puuid = $1`},
			{&f.WeeklyReports, `DELETE FROM weekly_reports WHERE puuid = $1`},
			{&f.Accounts, `DELETE FROM accounts WHERE puuid = $1`},
		}
		for _, st := range steps {
			var args []any
			if strings.Contains(st.sql, "$1") {
				args = []any{puuid}
			}
			tag, err := tx.Exec(ctx, st.sql, args...)
			if err != nil {
				return fmt.Errorf("%s: %w", st.sql, err)
			}
			*st.n = tag.RowsAffected()
		}
		return nil
	})
	if err != nil {
		return Forgotten{}, fmt.Errorf("store: forget account: %w", err)
	}
	if f.Accounts+f.Matches+f.SyncMatches+f.Jobs+f.LeagueEntries+f.WeeklyReports == 0 {
		return f, fmt.Errorf("store: forget account %s: %w", puuid, ErrNotFound)
	}
	return f, nil
}
