package store_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/pkg/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// fixture is one real match from testdata, decoded into store rows.
type fixture struct {
	Match        store.MatchRow
	Participants []store.ParticipantRow
}

type matchDTO struct {
	Metadata struct {
		MatchID string `json:"matchId"`
	} `json:"metadata"`
	Info struct {
		GameCreation       int64  `json:"gameCreation"`
		GameStartTimestamp int64  `json:"gameStartTimestamp"`
		GameEndTimestamp   int64  `json:"gameEndTimestamp"`
		GameDuration       int    `json:"gameDuration"`
		GameMode           string `json:"gameMode"`
		GameType           string `json:"gameType"`
		GameVersion        string `json:"gameVersion"`
		MapID              int    `json:"mapId"`
		QueueID            int    `json:"queueId"`
		PlatformID         string `json:"platformId"`
		EndOfGameResult    string `json:"endOfGameResult"`
		Participants       []struct {
			ParticipantID               int    `json:"participantId"`
			PUUID                       string `json:"puuid"`
			RiotIDGameName              string `json:"riotIdGameName"`
			RiotIDTagline               string `json:"riotIdTagline"`
			TeamID                      int    `json:"teamId"`
			ChampionID                  int    `json:"championId"`
			ChampionName                string `json:"championName"`
			ChampLevel                  int    `json:"champLevel"`
			TeamPosition                string `json:"teamPosition"`
			Win                         bool   `json:"win"`
			Kills                       int    `json:"kills"`
			Deaths                      int    `json:"deaths"`
			Assists                     int    `json:"assists"`
			GoldEarned                  int    `json:"goldEarned"`
			TotalMinionsKilled          int    `json:"totalMinionsKilled"`
			NeutralMinionsKilled        int    `json:"neutralMinionsKilled"`
			VisionScore                 int    `json:"visionScore"`
			TotalDamageDealtToChampions int    `json:"totalDamageDealtToChampions"`
			TimePlayed                  int    `json:"timePlayed"`
			Placement                   int    `json:"placement"`
		} `json:"participants"`
	} `json:"info"`
}

func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// loadFixtures decodes every testdata/*.json.gz match.
func loadFixtures(tb testing.TB) []fixture {
	tb.Helper()
	files, err := filepath.Glob("testdata/*.json.gz")
	if err != nil || len(files) == 0 {
		tb.Fatalf("no fixtures: %v", err)
	}
	var out []fixture
	for _, f := range files {
		gz, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(gz))
		if err != nil {
			tb.Fatal(err)
		}
		raw, err := io.ReadAll(zr)
		if err != nil {
			tb.Fatal(err)
		}
		var d matchDTO
		if err := json.Unmarshal(raw, &d); err != nil {
			tb.Fatalf("%s: %v", f, err)
		}
		parts := strings.SplitN(d.Info.GameVersion, ".", 3)
		patch := d.Info.GameVersion
		if len(parts) >= 2 {
			patch = parts[0] + "." + parts[1]
		}
		fx := fixture{Match: store.MatchRow{
			MatchID: d.Metadata.MatchID, Platform: d.Info.PlatformID, Region: "europe", QueueID: d.Info.QueueID,
			GameMode: d.Info.GameMode, GameType: d.Info.GameType, GameVersion: d.Info.GameVersion, Patch: patch,
			MapID: d.Info.MapID, GameCreation: msTime(d.Info.GameCreation), GameStart: msTime(d.Info.GameStartTimestamp),
			GameEnd: msTime(d.Info.GameEndTimestamp), DurationS: d.Info.GameDuration,
			EndOfGameResult: d.Info.EndOfGameResult, ParticipantCount: len(d.Info.Participants), Raw: raw,
			FetchedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		}}
		for _, p := range d.Info.Participants {
			fx.Participants = append(fx.Participants, store.ParticipantRow{
				MatchID: d.Metadata.MatchID, ParticipantID: p.ParticipantID, PUUID: p.PUUID,
				RiotIDGameName: p.RiotIDGameName, RiotIDTagline: p.RiotIDTagline, TeamID: p.TeamID,
				ChampionID: p.ChampionID, ChampionName: p.ChampionName, ChampLevel: p.ChampLevel,
				TeamPosition: p.TeamPosition, Win: p.Win, Kills: p.Kills, Deaths: p.Deaths, Assists: p.Assists,
				GoldEarned: p.GoldEarned, CS: p.TotalMinionsKilled + p.NeutralMinionsKilled,
				VisionScore: p.VisionScore, DamageToChampions: p.TotalDamageDealtToChampions,
				TimePlayedS: p.TimePlayed, Placement: p.Placement,
			})
		}
		out = append(out, fx)
	}
	return out
}

// withID returns a copy of fx under another match id.
func withID(fx fixture, id string) fixture {
	c := fx
	c.Match.MatchID = id
	c.Participants = make([]store.ParticipantRow, len(fx.Participants))
	for i, p := range fx.Participants {
		p.MatchID = id
		c.Participants[i] = p
	}
	return c
}

func gz(tb testing.TB, s string) []byte {
	tb.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write([]byte(s)); err != nil {
		tb.Fatal(err)
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

func openStore(tb testing.TB) *store.Store {
	tb.Helper()
	url := pgtest.NewDatabase(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := store.Open(ctx, url)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// snapshot returns, per table, its row count and an md5 over every row
// including xmin, so any rewrite of a row (even to identical values) shows.
func snapshot(tb testing.TB, s *store.Store) map[string]string {
	tb.Helper()
	out := map[string]string{}
	for _, tbl := range []string{"accounts", "matches", "match_participants", "match_timelines", "match_fetches",
		"sync_matches", "jobs"} {
		var n int
		var sum *string
		err := s.Pool().QueryRow(context.Background(),
			`SELECT count(*), md5(string_agg(t.xmin::text || t::text, '|' ORDER BY t::text)) FROM `+tbl+` t`).
			Scan(&n, &sum)
		if err != nil {
			tb.Fatalf("snapshot %s: %v", tbl, err)
		}
		v := ""
		if sum != nil {
			v = *sum
		}
		out[tbl] = strconv.Itoa(n) + " " + v
	}
	return out
}

type ledgerRow struct {
	Status                        string
	Attempt, RetryCount, NotFound int
	LastError                     string
	HTTPStatus                    int
}

func ledger(tb testing.TB, s *store.Store, matchID, kind string) ledgerRow {
	tb.Helper()
	var r ledgerRow
	err := s.Pool().QueryRow(context.Background(), `SELECT status, attempt, retry_count, not_found,
coalesce(last_error, ''), coalesce(http_status, 0) FROM match_fetches WHERE match_id = $1 AND kind = $2`,
		matchID, kind).Scan(&r.Status, &r.Attempt, &r.RetryCount, &r.NotFound, &r.LastError, &r.HTTPStatus)
	if err != nil {
		tb.Fatalf("ledger %s/%s: %v", matchID, kind, err)
	}
	return r
}
