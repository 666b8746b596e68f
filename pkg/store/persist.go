package store

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riftflow/riftflow/pkg/fault"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/syncjob"
)

// DefaultMaxDocumentBytes bounds a document PersistBatch decompresses
// (MatchRow.Compressed, TimelineRow.Compressed): 32 MiB, the persister's default payload limit
// (the Riot client refuses bodies over 16 MiB before that).
const DefaultMaxDocumentBytes = 32 << 20

// SetMaxDocumentBytes sets the most bytes a Compressed document may
// inflate to (n <= 0: DefaultMaxDocumentBytes). Call it before use.
func (s *Store) SetMaxDocumentBytes(n int64) { s.maxDoc = n }

func (s *Store) maxDocBytes() int64 {
	if s.maxDoc <= 0 {
		return DefaultMaxDocumentBytes
	}
	return s.maxDoc
}

// docPool holds the buffers documents are decompressed into while copied,
// one in use per batch being written (sized once per document from the
// gzip trailer, so a buffer is allocated at most once per batch even when
// the pool has been emptied by a collection).
var docPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func getDoc() *bytes.Buffer { return docPool.Get().(*bytes.Buffer) }

func putDoc(b *bytes.Buffer) {
	if b.Cap() <= 4<<20 { // a rare larger one is left to the GC
		b.Reset()
		docPool.Put(b)
	}
}

// inflateDoc decompresses gz into buf (riot.Gunzip: reset first, at most
// limit bytes, checksum verified) and returns the values of the raw and
// raw_gzip columns: the text when a json column can hold it, else the gzip
// bytes.
func inflateDoc(buf *bytes.Buffer, gz []byte, limit int64) (raw, rawGz []byte, err error) {
	if err := riot.Gunzip(buf, gz, limit); err != nil {
		return nil, nil, err
	}
	if !JSONStorable(buf.Bytes()) {
		return nil, gz, nil
	}
	return buf.Bytes(), nil, nil
}

// MatchRow is one matches row, mapped by the persister from a Riot MatchDto.
type MatchRow struct {
	MatchID  string // e.g. "NA1_4223689858" (metadata.matchId)
	Platform string // e.g. "NA1" (info.platformId)
	Region   string // routing region, e.g. "americas"
	QueueID  int    // info.queueId
	GameMode string // info.gameMode
	GameType string // info.gameType
	// GameVersion is info.gameVersion ("14.3.558.106"); Patch its first two
	// parts ("14.3").
	GameVersion, Patch string
	MapID              int // info.mapId
	// GameCreation, GameStart, GameEnd come from epoch ms; zero → NULL.
	GameCreation, GameStart, GameEnd time.Time
	DurationS                        int    // info.gameDuration, seconds
	EndOfGameResult                  string // info.endOfGameResult
	ParticipantCount                 int
	// Raw is the MatchDto as Riot sent it (JSON text, valid UTF-8, no NUL
	// byte), stored byte-equal in the json column raw. When the document
	// cannot be held by a json column, Raw is nil and RawGzip holds it
	// gzip-compressed (column raw_gzip); readers fall back to it.
	Raw, RawGzip []byte
	// Compressed, instead of Raw and RawGzip, is the MatchDto
	// gzip-compressed, decompressed by PersistBatch while it copies the
	// row, as TimelineRow.Compressed is: a batch of matches then holds their
	// rows, not their 70–150 KB documents.
	Compressed []byte
	FetchedAt  time.Time // when the fetcher got it; zero → now()
}

// ParticipantRow is one match_participants row (info.participants[i]).
type ParticipantRow struct {
	MatchID           string
	ParticipantID     int    // 1..n
	PUUID             string // "BOT" for bots
	RiotIDGameName    string
	RiotIDTagline     string
	TeamID            int // 100 or 200
	ChampionID        int
	ChampionName      string
	ChampLevel        int
	TeamPosition      string
	Win               bool
	Kills             int
	Deaths            int
	Assists           int
	GoldEarned        int
	CS                int // totalMinionsKilled + neutralMinionsKilled
	VisionScore       int
	DamageToChampions int // totalDamageDealtToChampions
	TimePlayedS       int // seconds
	Placement         int // arena placement, 0 elsewhere
	// IndividualPosition, Role and Lane are Riot's own guesses (TOP,
	// JUNGLE, …; SOLO, CARRY, …); TeamPosition is the one to group by.
	IndividualPosition, Role, Lane string
	Items                          []int32 // item0..item6, 0 for an empty slot
	Summoner1ID, Summoner2ID       int     // summoner spells
	GoldSpent                      int
	TotalDamageTaken               int
	DamageToObjectives             int // damageDealtToObjectives
	WardsPlaced, WardsKilled       int
}

// TimelineRow is one match_timelines row.
type TimelineRow struct {
	MatchID         string
	FrameIntervalMs int
	FrameCount      int
	// Raw and RawGzip: the TimelineDto, as for MatchRow.
	Raw, RawGzip []byte
	// Compressed, instead of Raw and RawGzip, is the TimelineDto
	// gzip-compressed (Riot's bytes). PersistBatch decompresses it while it
	// copies the row, into one buffer reused row after row, and stores it
	// as Raw, or as RawGzip when a json column cannot hold it
	// (JSONStorable): a batch never holds more than one timeline (0.3–1.7
	// MB of JSON) decompressed. A corrupt gzip, or one that inflates past
	// the store's document limit (SetMaxDocumentBytes), fails the batch
	// with an Invalid error.
	Compressed []byte
	FetchedAt  time.Time // zero → now()
}

// LedgerUpdate is the outcome of one fetch attempt for match_fetches.
//
// Rules (applied idempotently; replays change nothing):
//   - success applies unless the row is already success;
//   - a final failure (permanently_unfetchable, outside_retention_window)
//     applies to a row that is not final (success, permanently_unfetchable,
//     outside_retention_window), whatever its attempt: two commands for one
//     fetch (a retry-sweeper re-publish beside a retry still waiting) number
//     their attempts alike, and the final outcome of one must not be lost to
//     a failure the other recorded under the same or a higher number;
//   - temporary_failure applies only when Attempt > the row's attempt and
//     the row's status is not final, or when the row is unfetched or absent;
//   - unfetched only creates an absent row.
//
// retry_count counts applied temporary_failure and permanently_unfetchable
// attempts, not_found those with HTTPStatus 404. Within one batch, updates of
// the same (MatchID, Kind) reduce to one: a success if any, else a final
// status if any, else the highest attempt.
type LedgerUpdate struct {
	MatchID      string
	Kind         string // "match" | "timeline"
	Status       string // a bus.Outcome
	Attempt      int    // 1 for the first attempt
	HTTPStatus   int    // 0 → NULL
	Error        string // "" → NULL; ignored on success
	GameCreation time.Time
	AttemptedAt  time.Time // zero → now()
	// RequestID is the sync whose fetch this was ("" when none): each
	// applied temporary_failure or permanently_unfetchable attempt adds one
	// to that job's jobs.retries.
	RequestID string
}

// Batch is what PersistBatch writes in one transaction. Duplicates (JetStream
// redeliveries) are allowed: the last occurrence of a key wins.
type Batch struct {
	Matches      []MatchRow
	Participants []ParticipantRow
	Timelines    []TimelineRow
	Ledger       []LedgerUpdate
}

// SyncProgress is a sync whose progress a ledger write changed: syncjob.Progress.
type SyncProgress = syncjob.Progress

// BatchResult lists the syncs whose progress changed, so the caller can
// publish progress events and release sync locks of completed ones.
type BatchResult struct {
	Progress []SyncProgress
}

// PersistBatch writes b in ONE transaction: deduplication (the last row of
// a key wins), binary COPY straight into matches, match_participants and
// match_timelines for matches not stored yet, and for the others binary
// COPY into per-connection staging tables and set-based upserts (rows whose
// content is unchanged are not rewritten), then the ledger (see LedgerUpdate), then sync progress: a
// listed match is done when its match ledger row is final and, when that is
// success, its timeline row is final too; accounts reaching done == total are
// completed (last_synced_at set, jobs row completed). Participants must
// belong to a match in this batch or already stored.
func (s *Store) PersistBatch(ctx context.Context, b Batch) (_ BatchResult, err error) {
	defer classified(&err)
	var res BatchResult
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		res, err = persistTx(ctx, tx, b, s.maxDocBytes())
		return err
	})
	if err != nil {
		return BatchResult{}, fmt.Errorf("store: persist batch: %w", err)
	}
	return res, nil
}

var (
	matchCols = []string{"match_id", "platform", "region", "queue_id", "game_mode", "game_type", "game_version",
		"patch", "map_id", "game_creation", "game_start", "game_end", "duration_s", "end_of_game_result",
		"participant_count", "raw", "raw_gzip", "fetched_at"}
	participantCols = []string{"match_id", "participant_id", "puuid", "riot_id_game_name", "riot_id_tagline",
		"team_id", "champion_id", "champion_name", "champ_level", "team_position", "win", "kills", "deaths",
		"assists", "gold_earned", "cs", "vision_score", "damage_to_champions", "time_played_s", "placement",
		"individual_position", "role", "lane", "items", "summoner1_id", "summoner2_id", "gold_spent",
		"total_damage_taken", "damage_to_objectives", "wards_placed", "wards_killed"}
	timelineCols = []string{"match_id", "frame_interval_ms", "frame_count", "raw", "raw_gzip", "fetched_at"}
)

// matchValues is m's column values; a Compressed document is inflated
// into doc, which the next call reuses (pgx encodes a row's values before
// it asks for the next row).
func matchValues(m *MatchRow, doc *bytes.Buffer, maxDoc int64) ([]any, error) {
	raw, rawGz := m.Raw, m.RawGzip
	if m.Compressed != nil {
		var err error
		if raw, rawGz, err = inflateDoc(doc, m.Compressed, maxDoc); err != nil {
			return nil, fault.Wrap(fault.Invalid, fmt.Errorf("match %s: %w", m.MatchID, err))
		}
	}
	return []any{m.MatchID, m.Platform, m.Region, m.QueueID, m.GameMode, m.GameType, m.GameVersion,
		m.Patch, m.MapID, ts(m.GameCreation), ts(m.GameStart), ts(m.GameEnd), m.DurationS,
		m.EndOfGameResult, m.ParticipantCount, raw, rawGz, ts(m.FetchedAt)}, nil
}

func participantValues(p *ParticipantRow) []any {
	return []any{p.MatchID, p.ParticipantID, p.PUUID, p.RiotIDGameName, p.RiotIDTagline, p.TeamID,
		p.ChampionID, p.ChampionName, p.ChampLevel, p.TeamPosition, p.Win, p.Kills, p.Deaths,
		p.Assists, p.GoldEarned, p.CS, p.VisionScore, p.DamageToChampions, p.TimePlayedS,
		p.Placement, p.IndividualPosition, p.Role, p.Lane, items(p.Items), p.Summoner1ID, p.Summoner2ID,
		p.GoldSpent, p.TotalDamageTaken, p.DamageToObjectives, p.WardsPlaced, p.WardsKilled}
}

// lastOf keeps the last row of each key, in the order of their last
// occurrence (a redelivered message repeats its rows: the last one wins, as
// DISTINCT ON (key) ... ORDER BY seq DESC does for staged rows).
func lastOf[T any, K comparable](rows []T, key func(*T) K) []T {
	last := make(map[K]int, len(rows))
	for i := range rows {
		last[key(&rows[i])] = i
	}
	if len(last) == len(rows) {
		return rows
	}
	out := make([]T, 0, len(last))
	for i := range rows {
		if last[key(&rows[i])] == i {
			out = append(out, rows[i])
		}
	}
	return out
}

// split divides rows into those fresh reports true for and the rest.
func split[T any](rows []T, fresh func(*T) bool) (yes, no []T) {
	for i := range rows {
		if fresh(&rows[i]) {
			yes = append(yes, rows[i])
		} else {
			no = append(no, rows[i])
		}
	}
	return yes, no
}

// storedIDs reads which of the batch's match IDs already have a matches
// row, participant rows and a match_timelines row, in one round trip.
func storedIDs(ctx context.Context, tx pgx.Tx, b Batch) (matches, participants, timelines map[string]bool, err error) {
	ids := func(n int, id func(int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = id(i)
		}
		return out
	}
	rows, err := tx.Query(ctx, `
SELECT 'm', match_id FROM matches WHERE match_id = ANY($1)
UNION ALL SELECT DISTINCT 'p', match_id FROM match_participants WHERE match_id = ANY($2)
UNION ALL SELECT 't', match_id FROM match_timelines WHERE match_id = ANY($3)`,
		ids(len(b.Matches), func(i int) string { return b.Matches[i].MatchID }),
		ids(len(b.Participants), func(i int) string { return b.Participants[i].MatchID }),
		ids(len(b.Timelines), func(i int) string { return b.Timelines[i].MatchID }))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("stored rows: %w", err)
	}
	matches, participants, timelines = map[string]bool{}, map[string]bool{}, map[string]bool{}
	var which, id string
	_, err = pgx.ForEachRow(rows, []any{&which, &id}, func() error {
		switch which {
		case "m":
			matches[id] = true
		case "p":
			participants[id] = true
		default:
			timelines[id] = true
		}
		return nil
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("stored rows: %w", err)
	}
	return matches, participants, timelines, nil
}

// copyRows copies n rows (row(i) gives row i's values of cols) straight
// into table. Nothing happens when n is 0.
func copyRows(ctx context.Context, tx pgx.Tx, table string, cols []string, n int, row func(i int) ([]any, error)) error {
	if n == 0 {
		return nil
	}
	if err := copyFrom(ctx, tx, table, cols, n, row); err != nil {
		return fmt.Errorf("copy %s: %w", table, err)
	}
	return nil
}

// copyFrom is tx.CopyFrom from row. An error of row itself (a document
// that cannot be inflated) is returned as it is: pgx ends the COPY with
// CopyFail, and the server's answer to that (57014, query_canceled) would
// otherwise read as a transient failure.
func copyFrom(ctx context.Context, tx pgx.Tx, table string, cols []string, n int, row func(i int) ([]any, error)) error {
	var rowErr error
	_, err := tx.CopyFrom(ctx, pgx.Identifier{table}, cols, pgx.CopyFromSlice(n, func(i int) ([]any, error) {
		v, err := row(i)
		if err != nil {
			rowErr = err
		}
		return v, err
	}))
	if rowErr != nil {
		return rowErr
	}
	return err
}

// withSeq prefixes "seq" (the row's index) to cols and row, for staging.
func withSeq(cols []string, row func(i int) ([]any, error)) ([]string, func(i int) ([]any, error)) {
	return append([]string{"seq"}, cols...), func(i int) ([]any, error) {
		v, err := row(i)
		if err != nil {
			return nil, err
		}
		return append([]any{i}, v...), nil
	}
}

// persistTx writes b's rows. Rows of a match not stored yet (the common
// case: a backfill writes every match once) are copied straight into
// their tables, as a bulk load would; the advisory locks of lockMatches
// keep any other writer of the same match out until commit, so "not
// stored" cannot change under the copy. Rows that replace stored ones go
// through the staging tables and the upserts.
func persistTx(ctx context.Context, tx pgx.Tx, b Batch, maxDoc int64) (BatchResult, error) {
	if err := lockMatches(ctx, tx, b); err != nil {
		return BatchResult{}, err
	}
	b.Matches = lastOf(b.Matches, func(m *MatchRow) string { return m.MatchID })
	type participantKey struct {
		matchID string
		id      int
	}
	b.Participants = lastOf(b.Participants, func(p *ParticipantRow) participantKey { return participantKey{p.MatchID, p.ParticipantID} })
	b.Timelines = lastOf(b.Timelines, func(t *TimelineRow) string { return t.MatchID })
	var storedM, storedP, storedT map[string]bool
	if len(b.Matches)+len(b.Participants)+len(b.Timelines) > 0 {
		var err error
		if storedM, storedP, storedT, err = storedIDs(ctx, tx, b); err != nil {
			return BatchResult{}, err
		}
	}
	// A zero FetchedAt means the database's now(), which only the upsert
	// statements apply.
	newM, oldM := split(b.Matches, func(m *MatchRow) bool { return !storedM[m.MatchID] && !m.FetchedAt.IsZero() })
	newP, oldP := split(b.Participants, func(p *ParticipantRow) bool { return !storedP[p.MatchID] })
	newT, oldT := split(b.Timelines, func(t *TimelineRow) bool { return !storedT[t.MatchID] && !t.FetchedAt.IsZero() })
	doc := getDoc()
	defer putDoc(doc)
	mRow := func(rows []MatchRow) func(int) ([]any, error) {
		return func(i int) ([]any, error) { return matchValues(&rows[i], doc, maxDoc) }
	}
	pRow := func(rows []ParticipantRow) func(int) ([]any, error) {
		return func(i int) ([]any, error) { return participantValues(&rows[i]), nil }
	}
	steps := []func() error{
		func() error { return copyRows(ctx, tx, "matches", matchCols, len(newM), mRow(newM)) },
		func() error {
			cols, row := withSeq(matchCols, mRow(oldM))
			return stageRows(ctx, tx, "matches", cols, len(oldM), row, upsertMatches)
		},
		func() error { return copyRows(ctx, tx, "match_participants", participantCols, len(newP), pRow(newP)) },
		func() error {
			cols, row := withSeq(participantCols, pRow(oldP))
			return stageRows(ctx, tx, "participants", cols, len(oldP), row, upsertParticipants)
		},
		func() error { return copyTimelines(ctx, tx, "match_timelines", false, newT, doc, maxDoc) },
		func() error {
			if err := copyTimelines(ctx, tx, "stage_timelines", true, oldT, doc, maxDoc); err != nil || len(oldT) == 0 {
				return err
			}
			return applyStaged(ctx, tx, "timelines", upsertTimelines)
		},
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return BatchResult{}, err
		}
	}
	if len(b.Ledger) == 0 {
		return BatchResult{}, nil
	}
	if err := stageRows(ctx, tx, "ledger", []string{"seq", "match_id", "kind", "status",
		"attempt", "http_status", "error", "game_creation", "attempted_at", "request_id"},
		len(b.Ledger), func(i int) ([]any, error) {
			l := &b.Ledger[i]
			return []any{i, l.MatchID, l.Kind, l.Status, l.Attempt, l.HTTPStatus, l.Error, ts(l.GameCreation),
				ts(l.AttemptedAt), l.RequestID}, nil
		}, ""); err != nil {
		return BatchResult{}, err
	}
	if err := applyLedger(ctx, tx); err != nil {
		return BatchResult{}, err
	}
	return syncProgress(ctx, tx, "SELECT DISTINCT match_id FROM stage_ledger")
}

// stageRows copies n rows (row(i) is row i's values of cols, seq = i first)
// into the staging table stage_<what>, then runs upsert, the statement that
// applies them ("" for none). Nothing happens when n is 0.
func stageRows(ctx context.Context, tx pgx.Tx, what string, cols []string, n int, row func(i int) ([]any, error), upsert string) error {
	if n == 0 {
		return nil
	}
	// pgx encodes each row's values as soon as it has them, so a row may
	// reuse the buffer the previous row's values were in.
	if err := copyFrom(ctx, tx, "stage_"+what, cols, n, row); err != nil {
		return fmt.Errorf("copy %s: %w", what, err)
	}
	if upsert == "" {
		return nil
	}
	return applyStaged(ctx, tx, what, upsert)
}

// applyStaged runs upsert, the statement that applies the rows staged in
// stage_<what>.
func applyStaged(ctx context.Context, tx pgx.Tx, what, upsert string) error {
	if _, err := tx.Exec(ctx, upsert); err != nil {
		return fmt.Errorf("upsert %s: %w", what, err)
	}
	return nil
}

// ts maps the zero time to NULL.
func ts(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

const upsertMatches = `
INSERT INTO matches AS t (match_id, platform, region, queue_id, game_mode, game_type, game_version, patch,
    map_id, game_creation, game_start, game_end, duration_s, end_of_game_result, participant_count, raw, raw_gzip,
    fetched_at)
SELECT match_id, platform, region, queue_id, game_mode, game_type, game_version, patch, map_id,
    game_creation, game_start, game_end, duration_s, end_of_game_result, participant_count, raw, raw_gzip,
    coalesce(fetched_at, now())
FROM (SELECT DISTINCT ON (match_id) * FROM stage_matches ORDER BY match_id, seq DESC) s
ORDER BY match_id
ON CONFLICT (match_id) DO UPDATE SET
    platform = EXCLUDED.platform, region = EXCLUDED.region, queue_id = EXCLUDED.queue_id,
    game_mode = EXCLUDED.game_mode, game_type = EXCLUDED.game_type, game_version = EXCLUDED.game_version,
    patch = EXCLUDED.patch, map_id = EXCLUDED.map_id, game_creation = EXCLUDED.game_creation,
    game_start = EXCLUDED.game_start, game_end = EXCLUDED.game_end, duration_s = EXCLUDED.duration_s,
    end_of_game_result = EXCLUDED.end_of_game_result, participant_count = EXCLUDED.participant_count,
    raw = EXCLUDED.raw, raw_gzip = EXCLUDED.raw_gzip, fetched_at = EXCLUDED.fetched_at
WHERE (t.platform, t.region, t.queue_id, t.game_mode, t.game_type, t.game_version, t.patch, t.map_id,
       t.game_creation, t.game_start, t.game_end, t.duration_s, t.end_of_game_result, t.participant_count,
       t.raw::text, t.raw_gzip)
  IS DISTINCT FROM
      (EXCLUDED.platform, EXCLUDED.region, EXCLUDED.queue_id, EXCLUDED.game_mode, EXCLUDED.game_type,
       EXCLUDED.game_version, EXCLUDED.patch, EXCLUDED.map_id, EXCLUDED.game_creation, EXCLUDED.game_start,
       EXCLUDED.game_end, EXCLUDED.duration_s, EXCLUDED.end_of_game_result, EXCLUDED.participant_count,
       EXCLUDED.raw::text, EXCLUDED.raw_gzip)`

const upsertParticipants = `
INSERT INTO match_participants AS t (match_id, participant_id, puuid, riot_id_game_name, riot_id_tagline,
    team_id, champion_id, champion_name, champ_level, team_position, win, kills, deaths, assists, gold_earned,
    cs, vision_score, damage_to_champions, time_played_s, placement, individual_position, role, lane, items,
    summoner1_id, summoner2_id, gold_spent, total_damage_taken, damage_to_objectives, wards_placed, wards_killed)
SELECT match_id, participant_id, puuid, riot_id_game_name, riot_id_tagline, team_id, champion_id,
    champion_name, champ_level, team_position, win, kills, deaths, assists, gold_earned, cs, vision_score,
    damage_to_champions, time_played_s, placement, individual_position, role, lane, items,
    summoner1_id, summoner2_id, gold_spent, total_damage_taken, damage_to_objectives, wards_placed, wards_killed
FROM (SELECT DISTINCT ON (match_id, participant_id) * FROM stage_participants
      ORDER BY match_id, participant_id, seq DESC) s
ORDER BY match_id, participant_id
ON CONFLICT (match_id, participant_id) DO UPDATE SET
    puuid = EXCLUDED.puuid, riot_id_game_name = EXCLUDED.riot_id_game_name,
    riot_id_tagline = EXCLUDED.riot_id_tagline, team_id = EXCLUDED.team_id, champion_id = EXCLUDED.champion_id,
    champion_name = EXCLUDED.champion_name, champ_level = EXCLUDED.champ_level,
    team_position = EXCLUDED.team_position, win = EXCLUDED.win, kills = EXCLUDED.kills,
    deaths = EXCLUDED.deaths, assists = EXCLUDED.assists, gold_earned = EXCLUDED.gold_earned, cs = EXCLUDED.cs,
    vision_score = EXCLUDED.vision_score, damage_to_champions = EXCLUDED.damage_to_champions,
    time_played_s = EXCLUDED.time_played_s, placement = EXCLUDED.placement,
    individual_position = EXCLUDED.individual_position, role = EXCLUDED.role, lane = EXCLUDED.lane,
    items = EXCLUDED.items, summoner1_id = EXCLUDED.summoner1_id, summoner2_id = EXCLUDED.summoner2_id,
    gold_spent = EXCLUDED.gold_spent, total_damage_taken = EXCLUDED.total_damage_taken,
    damage_to_objectives = EXCLUDED.damage_to_objectives, wards_placed = EXCLUDED.wards_placed,
    wards_killed = EXCLUDED.wards_killed
WHERE (t.puuid, t.riot_id_game_name, t.riot_id_tagline, t.team_id, t.champion_id, t.champion_name,
       t.champ_level, t.team_position, t.win, t.kills, t.deaths, t.assists, t.gold_earned, t.cs,
       t.vision_score, t.damage_to_champions, t.time_played_s, t.placement, t.individual_position, t.role,
       t.lane, t.items, t.summoner1_id, t.summoner2_id, t.gold_spent, t.total_damage_taken,
       t.damage_to_objectives, t.wards_placed, t.wards_killed)
  IS DISTINCT FROM
      (EXCLUDED.puuid, EXCLUDED.riot_id_game_name, EXCLUDED.riot_id_tagline, EXCLUDED.team_id,
       EXCLUDED.champion_id, EXCLUDED.champion_name, EXCLUDED.champ_level, EXCLUDED.team_position, EXCLUDED.win,
       EXCLUDED.kills, EXCLUDED.deaths, EXCLUDED.assists, EXCLUDED.gold_earned, EXCLUDED.cs,
       EXCLUDED.vision_score, EXCLUDED.damage_to_champions, EXCLUDED.time_played_s, EXCLUDED.placement,
       EXCLUDED.individual_position, EXCLUDED.role, EXCLUDED.lane, EXCLUDED.items, EXCLUDED.summoner1_id,
       EXCLUDED.summoner2_id, EXCLUDED.gold_spent, EXCLUDED.total_damage_taken, EXCLUDED.damage_to_objectives,
       EXCLUDED.wards_placed, EXCLUDED.wards_killed)`

const upsertTimelines = `
INSERT INTO match_timelines AS t (match_id, frame_interval_ms, frame_count, raw, raw_gzip, fetched_at)
SELECT match_id, frame_interval_ms, frame_count, raw, raw_gzip, coalesce(fetched_at, now())
FROM (SELECT DISTINCT ON (match_id) * FROM stage_timelines ORDER BY match_id, seq DESC) s
ORDER BY match_id
ON CONFLICT (match_id) DO UPDATE SET
    frame_interval_ms = EXCLUDED.frame_interval_ms, frame_count = EXCLUDED.frame_count,
    raw = EXCLUDED.raw, raw_gzip = EXCLUDED.raw_gzip, fetched_at = EXCLUDED.fetched_at
WHERE (t.frame_interval_ms, t.frame_count, t.raw::text, t.raw_gzip)
  IS DISTINCT FROM (EXCLUDED.frame_interval_ms, EXCLUDED.frame_count, EXCLUDED.raw::text, EXCLUDED.raw_gzip)`

// ledgerCreate inserts absent ledger rows as unfetched placeholders; the
// ledgerLock statement then locks every row the batch touches in key order
// (deterministic order: concurrent persisters don't deadlock), and
// ledgerApply applies the rules of LedgerUpdate.
const ledgerCreate = `
INSERT INTO match_fetches (match_id, kind)
SELECT DISTINCT match_id, kind FROM stage_ledger ORDER BY match_id, kind
ON CONFLICT (match_id, kind) DO NOTHING`

const ledgerLock = `
SELECT 1 FROM match_fetches
WHERE (match_id, kind) IN (SELECT match_id, kind FROM stage_ledger)
ORDER BY match_id, kind FOR UPDATE`

const ledgerApply = `
WITH agg AS (
    SELECT match_id, kind,
        coalesce(array_agg(DISTINCT attempt) FILTER (
            WHERE status IN ('temporary_failure', 'permanently_unfetchable')), '{}') AS fails,
        coalesce(array_agg(DISTINCT attempt) FILTER (
            WHERE status IN ('temporary_failure', 'permanently_unfetchable') AND http_status = 404), '{}') AS nf
    FROM stage_ledger GROUP BY match_id, kind
), pick AS (
    SELECT DISTINCT ON (match_id, kind) *
    FROM stage_ledger
    ORDER BY match_id, kind, (status = 'success') DESC,
        (status IN ('permanently_unfetchable', 'outside_retention_window')) DESC, attempt DESC, seq DESC
), u AS (
    SELECT p.*, a.fails, a.nf,
        (SELECT count(*) FROM unnest(a.fails) x WHERE x > cur.attempt)::int AS new_fails
    FROM pick p JOIN agg a USING (match_id, kind)
    JOIN match_fetches cur USING (match_id, kind)
), upd AS (
UPDATE match_fetches f SET
    status          = u.status,
    attempt         = greatest(f.attempt, u.attempt),
    retry_count     = f.retry_count + u.new_fails,
    not_found       = f.not_found + (SELECT count(*) FROM unnest(u.nf) x WHERE x > f.attempt),
    game_creation   = coalesce(u.game_creation, f.game_creation),
    fetched_at      = CASE WHEN u.status = 'success' THEN coalesce(u.attempted_at, now()) ELSE f.fetched_at END,
    last_attempt_at = coalesce(u.attempted_at, now()),
    last_error      = CASE WHEN u.status = 'success' THEN NULL ELSE nullif(u.error, '') END,
    http_status     = nullif(u.http_status, 0),
    updated_at      = now()
FROM u
WHERE f.match_id = u.match_id AND f.kind = u.kind
  AND (   (u.status = 'success' AND f.status <> 'success')
       OR (u.status IN ('permanently_unfetchable', 'outside_retention_window')
           AND f.status IN ('unfetched', 'temporary_failure'))
       OR (u.status IN ('temporary_failure', 'permanently_unfetchable', 'outside_retention_window')
           AND (f.status = 'unfetched'
                OR (u.attempt > f.attempt
                    AND f.status NOT IN ('success', 'permanently_unfetchable', 'outside_retention_window')))))
RETURNING u.request_id, u.new_fails
)
UPDATE jobs j SET retries = j.retries + r.n
FROM (SELECT request_id, sum(new_fails)::int AS n FROM upd
      WHERE coalesce(request_id, '') <> '' AND new_fails > 0 GROUP BY request_id) r
WHERE j.id = r.request_id`

func applyLedger(ctx context.Context, tx pgx.Tx) error {
	for _, q := range []struct{ name, sql string }{
		{"create", ledgerCreate}, {"lock", ledgerLock}, {"apply", ledgerApply},
	} {
		if _, err := tx.Exec(ctx, q.sql); err != nil {
			return fmt.Errorf("ledger %s: %w", q.name, err)
		}
	}
	return nil
}

// doneMatches selects, among the match ids produced by the subquery %s, those
// that are done for a sync: the match row is final and, when it is success,
// the timeline row is final too.
const doneMatches = `
SELECT c.match_id
FROM (%s) c
JOIN match_fetches m ON m.match_id = c.match_id AND m.kind = 'match'
LEFT JOIN match_fetches t ON t.match_id = c.match_id AND t.kind = 'timeline'
WHERE m.status IN ('success', 'permanently_unfetchable', 'outside_retention_window')
  AND (m.status <> 'success' OR t.status IN ('success', 'permanently_unfetchable', 'outside_retention_window'))`

// syncProgress marks sync_matches done for the matches listed by the query
// candidates (one text column, match_id) and recounts the affected syncs.
func syncProgress(ctx context.Context, tx pgx.Tx, candidates string) (BatchResult, error) {
	rows, err := tx.Query(ctx, `
UPDATE sync_matches s SET done = true
FROM (`+fmt.Sprintf(doneMatches, candidates)+`) d
WHERE s.match_id = d.match_id AND NOT s.done
RETURNING s.request_id`)
	if err != nil {
		return BatchResult{}, fmt.Errorf("mark done: %w", err)
	}
	reqs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return BatchResult{}, fmt.Errorf("mark done: %w", err)
	}
	if len(reqs) == 0 {
		return BatchResult{}, nil
	}
	sort.Strings(reqs)
	reqs = compact(reqs)
	progress, err := recount(ctx, tx, reqs)
	return BatchResult{Progress: progress}, err
}

// lockMatches takes a transaction-scoped advisory lock per match id of b,
// in one order (by the lock key) for every writer, before any row is
// touched. Writers of the same match are serialized: the one that commits
// second sees the first one's ledger rows when it decides whether the
// match is done for its syncs. Without it, two concurrent transactions
// (the match's success in one, its timeline's outcome in the other) could
// each see the other's row unfinished, and the sync would never complete.
func lockMatches(ctx context.Context, tx pgx.Tx, b Batch) error {
	seen := make(map[string]struct{}, len(b.Ledger))
	ids := make([]string, 0, len(b.Ledger))
	add := func(id string) {
		if _, ok := seen[id]; !ok {
			seen[id] = struct{}{}
			ids = append(ids, id)
		}
	}
	for i := range b.Matches {
		add(b.Matches[i].MatchID)
	}
	for i := range b.Timelines {
		add(b.Timelines[i].MatchID)
	}
	for i := range b.Ledger {
		add(b.Ledger[i].MatchID)
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(k)
FROM (SELECT DISTINCT hashtextextended(id, 7316) AS k FROM unnest($1::text[]) id) s ORDER BY k`, ids); err != nil {
		return fmt.Errorf("lock matches: %w", err)
	}
	return nil
}

// items is an int[] value that is never NULL.
func items(v []int32) []int32 {
	if v == nil {
		return []int32{}
	}
	return v
}

func compact(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// recount recomputes sync_progress for the syncs reqs, completing those that
// reached their total. The accounts rows are locked first, in key order, so
// that the count (a new statement, hence a new snapshot) sees every
// concurrent writer that committed before us.
func recount(ctx context.Context, tx pgx.Tx, reqs []string) ([]SyncProgress, error) {
	if _, err := tx.Exec(ctx, `SELECT 1 FROM accounts WHERE sync_request_id = ANY($1)
ORDER BY puuid FOR UPDATE`, reqs); err != nil {
		return nil, fmt.Errorf("lock accounts: %w", err)
	}
	rows, err := tx.Query(ctx, `
WITH c AS (
    SELECT request_id, count(*) FILTER (WHERE done)::int AS n, count(*)::int AS total
    FROM sync_matches WHERE request_id = ANY($1) GROUP BY request_id
)
UPDATE accounts a SET
    sync_progress    = c.n,
    sync_total       = greatest(a.sync_total, c.total),
    last_progress_at = now(),
    updated_at       = now(),
    sync_status      = CASE WHEN c.n >= greatest(a.sync_total, c.total) THEN 'completed' ELSE a.sync_status END,
    last_synced_at   = CASE WHEN c.n >= greatest(a.sync_total, c.total) THEN now() ELSE a.last_synced_at END
FROM c
WHERE a.sync_request_id = c.request_id AND a.sync_status = 'syncing' AND a.sync_total > 0
  AND (a.sync_progress <> c.n OR c.n >= greatest(a.sync_total, c.total))
RETURNING a.sync_request_id, a.puuid, a.sync_progress, a.sync_total, a.sync_status`, reqs)
	if err != nil {
		return nil, fmt.Errorf("recount: %w", err)
	}
	progress, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SyncProgress, error) {
		var p SyncProgress
		err := r.Scan(&p.RequestID, &p.PUUID, &p.Progress, &p.Total, &p.Status)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("recount: %w", err)
	}
	var completed []string
	for _, p := range progress {
		if p.Status == syncjob.Completed {
			completed = append(completed, p.RequestID)
		}
	}
	if len(completed) > 0 {
		if _, err := tx.Exec(ctx, `UPDATE jobs SET status = 'completed', finished_at = now(), error = NULL
WHERE id = ANY($1) AND status IN ('pending', 'running')`, completed); err != nil {
			return nil, fmt.Errorf("complete jobs: %w", err)
		}
	}
	return progress, nil
}
