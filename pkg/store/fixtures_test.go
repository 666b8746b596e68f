package store_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/pkg/store"
)

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
