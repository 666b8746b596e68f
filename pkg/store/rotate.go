package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// puuidColumns are the tables and columns holding PUUIDs that
// RewritePUUIDs rewrites. The raw MatchDto/TimelineDto payloads are left
// as Riot sent them (under the old key).
var puuidColumns = []struct{ table, column string }{
	{"accounts", "puuid"},
	{"match_participants", "puuid"},
	{"sync_matches", "puuid"},
	{"jobs", "puuid"},
	{"league_entries", "puuid"},
	{"weekly_reports", "puuid"},
}

// RewritePUUIDs replaces, in ONE transaction, every old PUUID of pairs
// (old → new) by its new one in every PUUID column (key rotation: Riot
// encrypts PUUIDs per API key). It returns the rows rewritten per table.
// Matches are not refetched and their raw payloads keep the old PUUIDs.
// A new PUUID that is also an old one of another pair is an error.
func (s *Store) RewritePUUIDs(ctx context.Context, pairs map[string]string) (_ map[string]int64, err error) {
	defer classified(&err)
	olds := make([]string, 0, len(pairs))
	news := make([]string, 0, len(pairs))
	for o, n := range pairs {
		if _, chained := pairs[n]; chained && n != o {
			return nil, fmt.Errorf("store: rewrite puuids: %s is both a new and an old PUUID", n)
		}
		olds, news = append(olds, o), append(news, n)
	}
	out := map[string]int64{}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE puuid_map ON COMMIT DROP AS
SELECT * FROM unnest($1::text[], $2::text[]) AS m(old, new) WHERE old <> new`, olds, news); err != nil {
			return err
		}
		for _, c := range puuidColumns {
			tag, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s t SET %s = m.new FROM puuid_map m WHERE t.%s = m.old`,
				c.table, c.column, c.column))
			if err != nil {
				return fmt.Errorf("%s: %w", c.table, err)
			}
			out[c.table] = tag.RowsAffected()
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: rewrite puuids: %w", err)
	}
	return out, nil
}

// Accounts returns every stored account (active or not), by PUUID.
func (s *Store) Accounts(ctx context.Context) (_ []Account, err error) {
	defer classified(&err)
	return s.queryAccounts(ctx, "accounts", `SELECT `+accountCols+` FROM accounts ORDER BY puuid`)
}
