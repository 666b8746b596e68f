package store

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
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
	// Participants are the player's match_participants rows in kept
	// matches (those of deleted matches go with them).
	Participants int64 `json:"participant_rows"`
	// Rewritten counts the raw MatchDto and TimelineDto documents of kept
	// matches rewritten without the player (ScrubParticipant).
	Rewritten int64 `json:"rewritten_documents"`
	// MatchIDs are the player's matches, deleted or kept (the caller
	// purges their cached bodies).
	MatchIDs []string `json:"-"`
}

// ForgetAccount erases account puuid in one transaction: its accounts row,
// job log, sync bookkeeping, league snapshots and weekly reports, and every
// stored match it played in that no other stored account played in (the
// match row, its participants, its timeline and its fetch ledger rows).
// Matches another stored account needs are kept without the player: their
// participant row is deleted and the raw MatchDto and TimelineDto are
// rewritten by ScrubParticipant (so those documents are no longer
// byte-equal to Riot's). Job rows that name the PUUID anywhere (detail,
// error) go too. ErrNotFound when nothing was left to delete (no account,
// job or match of its own); an empty PUUID is an error.
func (s *Store) ForgetAccount(ctx context.Context, puuid string) (_ Forgotten, err error) {
	defer classified(&err)
	var f Forgotten
	if puuid == "" {
		return f, errors.New("store: forget account: empty PUUID")
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
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
		rows, err := tx.Query(ctx, `SELECT match_id FROM forget_matches ORDER BY match_id`)
		if err != nil {
			return err
		}
		if f.MatchIDs, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		if f.Rewritten, err = scrubKept(ctx, tx, puuid); err != nil {
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
			{&f.Participants, `DELETE FROM match_participants WHERE puuid = $1`},
			{&f.Jobs, `DELETE FROM jobs WHERE puuid = $1 OR (length($1) >= 16 AND
    (strpos(coalesce(detail::text, ''), $1) > 0 OR strpos(coalesce(error, ''), $1) > 0))`},
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

// scrubKept rewrites, in tx, the raw MatchDto and TimelineDto of every
// kept match of forget_matches (needed) without puuid, and returns how
// many documents changed.
func scrubKept(ctx context.Context, tx pgx.Tx, puuid string) (int64, error) {
	type doc struct {
		table, id string
		raw       *string
		gz        []byte
	}
	rows, err := tx.Query(ctx, `
SELECT 'matches', m.match_id, m.raw::text, m.raw_gzip FROM forget_matches f JOIN matches m USING (match_id) WHERE f.needed
UNION ALL
SELECT 'match_timelines', t.match_id, t.raw::text, t.raw_gzip FROM forget_matches f JOIN match_timelines t USING (match_id) WHERE f.needed`)
	if err != nil {
		return 0, err
	}
	docs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (doc, error) {
		var d doc
		return d, r.Scan(&d.table, &d.id, &d.raw, &d.gz)
	})
	if err != nil {
		return 0, err
	}
	var n int64
	for _, d := range docs {
		var body []byte
		switch {
		case d.raw != nil:
			body = []byte(*d.raw)
		case d.gz != nil:
			if body, err = gunzipAll(d.gz); err != nil {
				return n, fmt.Errorf("%s %s: stored payload: %w", d.table, d.id, err)
			}
		default:
			continue
		}
		out, err := ScrubParticipant(body, puuid)
		if err != nil {
			return n, fmt.Errorf("%s %s: %w", d.table, d.id, err)
		}
		if bytes.Equal(out, body) {
			continue
		}
		if d.raw != nil {
			_, err = tx.Exec(ctx, `UPDATE `+d.table+` SET raw = $2::text::json WHERE match_id = $1`, d.id, string(out))
		} else {
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			zw.Write(out)
			zw.Close()
			_, err = tx.Exec(ctx, `UPDATE `+d.table+` SET raw_gzip = $2 WHERE match_id = $1`, d.id, b.Bytes())
		}
		if err != nil {
			return n, fmt.Errorf("%s %s: %w", d.table, d.id, err)
		}
		n++
	}
	return n, nil
}

// erasedFields are the fields of a MatchDto participant that identify the
// player, and the value ScrubParticipant gives each: the PUUID, the Riot
// ID (and the older riotIdName) and the summoner fields.
var erasedFields = map[string]any{
	"puuid": "", "riotIdGameName": "", "riotIdTagline": "", "riotIdName": "",
	"summonerId": "", "summonerName": "", "summonerLevel": 0, "profileIcon": 0,
}

// ScrubParticipant returns doc, a MatchDto or TimelineDto, without the
// player puuid: in the participant object of info.participants whose
// puuid it is, every field of erasedFields that is present is set to ""
// (strings) or 0 (numbers); then every remaining JSON string equal to the
// PUUID (metadata.participants, the timeline's participants) becomes "".
// The rest of the document keeps its bytes (tidwall/sjson edits in
// place). An error when doc is not JSON.
func ScrubParticipant(doc []byte, puuid string) ([]byte, error) {
	if !gjson.ValidBytes(doc) {
		return nil, errors.New("scrub participant: not JSON")
	}
	idx := -1
	gjson.GetBytes(doc, "info.participants").ForEach(func(k, v gjson.Result) bool {
		if v.Get("puuid").String() == puuid {
			idx = int(k.Int())
			return false
		}
		return true
	})
	out := bytes.Clone(doc)
	if idx >= 0 {
		for field, zero := range erasedFields {
			path := fmt.Sprintf("info.participants.%d.%s", idx, field)
			if !gjson.GetBytes(out, path).Exists() {
				continue
			}
			var err error
			if out, err = sjson.SetBytes(out, path, zero); err != nil {
				return nil, fmt.Errorf("scrub participant: %w", err)
			}
		}
	}
	quoted, _ := json.Marshal(puuid)
	return bytes.ReplaceAll(out, quoted, []byte(`""`)), nil
}
