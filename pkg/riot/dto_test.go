package riot

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fixtureDir returns the repository's testdata/riot-fixtures/<sub>, skipping
// the test when it is absent unless CI=true, where a missing fixture set is
// a failure.
func fixtureDir(t testing.TB, sub string) string {
	t.Helper()
	dir := os.Getenv("RIOT_FIXTURES")
	if dir == "" {
		dir = filepath.Join("..", "..", "testdata", "riot-fixtures")
	}
	dir = filepath.Join(dir, sub)
	if _, err := os.Stat(dir); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("fixtures %s missing: %v", dir, err)
		}
		t.Skipf("fixtures %s missing (set RIOT_FIXTURES): %v", dir, err)
	}
	return dir
}

func fixtureFiles(t *testing.T, sub string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(fixtureDir(t, sub), "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in %s: %v", sub, err)
	}
	return files
}

// decodeFile reads file and decodes it with decode, failing t on either.
func decodeFile[T any](t *testing.T, file string, decode func([]byte) (*T, error)) (*T, []byte) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := decode(b)
	if err != nil {
		t.Fatalf("%s: %v", filepath.Base(file), err)
	}
	return doc, b
}

// eachFixture decodes every recorded document of sub with decode, in a
// subtest named after its file, checks that its metadata.matchId (read by
// matchID) is the file's name, and runs check on it and its bytes.
func eachFixture[T any](t *testing.T, sub string, decode func([]byte) (*T, error), matchID func(*T) string, check func(t *testing.T, doc *T, b []byte)) {
	for _, f := range fixtureFiles(t, sub) {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			doc, b := decodeFile(t, f, decode)
			if id := matchID(doc); id != name {
				t.Errorf("matchId = %q, want %q", id, name)
			}
			check(t, doc, b)
		})
	}
}

func loadMatch(t *testing.T, id string) *Match {
	t.Helper()
	m, _ := decodeFile(t, filepath.Join(fixtureDir(t, "match"), id+".json"), DecodeMatch)
	return m
}

func loadTimeline(t *testing.T, id string) *Timeline {
	t.Helper()
	tl, _ := decodeFile(t, filepath.Join(fixtureDir(t, "timeline"), id+".json"), DecodeTimeline)
	return tl
}

// TestDecodeMatchFixtures decodes every recorded match and checks invariants
// against a generic decoding of the same file.
func TestDecodeMatchFixtures(t *testing.T) {
	eachFixture(t, "match", DecodeMatch, func(m *Match) string { return m.Metadata.MatchID }, func(t *testing.T, m *Match, b []byte) {
		var raw struct {
			Info struct {
				GameDuration float64          `json:"gameDuration"`
				Participants []map[string]any `json:"participants"`
				Teams        []any            `json:"teams"`
			} `json:"info"`
		}
		if err := json.Unmarshal(b, &raw); err != nil {
			t.Fatal(err)
		}
		if got, want := len(m.Info.Participants), len(raw.Info.Participants); got != want {
			t.Errorf("participants = %d, want %d", got, want)
		}
		if got, want := len(m.Info.Teams), len(raw.Info.Teams); got != want {
			t.Errorf("teams = %d, want %d", got, want)
		}
		if int64(m.Info.GameDuration) != int64(raw.Info.GameDuration) {
			t.Errorf("gameDuration = %d, want %v", m.Info.GameDuration, raw.Info.GameDuration)
		}
		for i, p := range m.Info.Participants {
			rp := raw.Info.Participants[i]
			if p.PUUID != rp["puuid"] {
				t.Errorf("participant %d puuid = %q, want %v", i, p.PUUID, rp["puuid"])
			}
			if k, _ := rp["kills"].(float64); int64(p.Kills) != int64(k) {
				t.Errorf("participant %d kills = %d, want %v", i, p.Kills, k)
			}
			if g, _ := rp["goldEarned"].(float64); int64(p.GoldEarned) != int64(g) {
				t.Errorf("participant %d goldEarned = %d, want %v", i, p.GoldEarned, g)
			}
			if p.ParticipantID != Int(i+1) {
				t.Errorf("participant %d participantId = %d", i, p.ParticipantID)
			}
		}
		if len(m.Info.Participants) > 0 {
			if m.Info.Patch() == "" {
				t.Errorf("Patch() empty for gameVersion %q", m.Info.GameVersion)
			}
			// No real game lasts under a minute or over three hours.
			if d := m.Info.DurationSeconds(); d < 60 || d > 3*3600 {
				t.Errorf("DurationSeconds() = %d (gameDuration %d, end %d)", d, m.Info.GameDuration, m.Info.GameEndTimestamp)
			}
			if m.Info.GameCreation < 1_000_000_000_000 {
				t.Errorf("gameCreation %d is not epoch ms", m.Info.GameCreation)
			}
		}
	})
}

func TestDecodeMatchEdgeCases(t *testing.T) {
	t.Run("aborted", func(t *testing.T) {
		m := loadMatch(t, "EUW1_6834713231")
		if len(m.Info.Participants) != 0 || m.Info.GameID != 0 {
			t.Errorf("participants=%d gameId=%d, want 0 and 0", len(m.Info.Participants), m.Info.GameID)
		}
		if len(m.Metadata.Participants) != 10 {
			t.Errorf("metadata participants = %d, want 10", len(m.Metadata.Participants))
		}
		if m.Info.EndOfGameResult != "Abort_Unexpected" {
			t.Errorf("endOfGameResult = %q", m.Info.EndOfGameResult)
		}
	})
	t.Run("coop bots", func(t *testing.T) {
		m := loadMatch(t, "JP1_391732436")
		if m.Info.QueueID != 850 {
			t.Errorf("queue = %d, want 850", m.Info.QueueID)
		}
		bots := 0
		for _, p := range m.Info.Participants {
			if p.IsBot() {
				bots++
			}
		}
		if bots != 5 || len(m.Metadata.Participants) != 5 {
			t.Errorf("bots = %d, metadata participants = %d, want 5 and 5", bots, len(m.Metadata.Participants))
		}
	})
	t.Run("arena 16 players with subteams", func(t *testing.T) {
		m := loadMatch(t, "JP1_444997552")
		if m.Info.QueueID != 1710 || len(m.Info.Participants) != 16 {
			t.Fatalf("queue=%d participants=%d, want 1710 and 16", m.Info.QueueID, len(m.Info.Participants))
		}
		subteams := map[Int]int{}
		for _, p := range m.Info.Participants {
			if p.PlayerSubteamID < 1 || p.Placement < 1 || p.Placement > 8 {
				t.Errorf("participant %d subteam=%d placement=%d", p.ParticipantID, p.PlayerSubteamID, p.Placement)
			}
			subteams[p.PlayerSubteamID]++
		}
		if len(subteams) != 8 {
			t.Errorf("subteams = %v, want 8 pairs", subteams)
		}
	})
	t.Run("arena 8 players with subteams", func(t *testing.T) {
		m := loadMatch(t, "EUW1_6511808246")
		if m.Info.QueueID != 1700 || len(m.Info.Participants) != 8 {
			t.Fatalf("queue=%d participants=%d", m.Info.QueueID, len(m.Info.Participants))
		}
		if p := m.Info.Participants[0]; p.PlayerSubteamID != 1 || p.SubteamPlacement != 4 {
			t.Errorf("first participant subteam=%d placement=%d, want 1 and 4", p.PlayerSubteamID, p.SubteamPlacement)
		}
	})
	t.Run("arena without arena fields", func(t *testing.T) {
		// SOURCES.md: KR_6604607115 is an Arena game whose participants lack
		// the subteam fields (developer-relations#793): they decode as 0.
		m := loadMatch(t, "KR_6604607115")
		if m.Info.QueueID != 1700 || len(m.Info.Participants) != 8 {
			t.Fatalf("queue=%d participants=%d", m.Info.QueueID, len(m.Info.Participants))
		}
		for _, p := range m.Info.Participants {
			if p.PlayerSubteamID != 0 || (p.TeamID != 100 && p.TeamID != 200) {
				t.Errorf("participant %d subteam=%d team=%d", p.ParticipantID, p.PlayerSubteamID, p.TeamID)
			}
		}
	})
	t.Run("swarm", func(t *testing.T) {
		for id, want := range map[string][2]int{
			"JP1_456819992": {1810, 1}, "JP1_457311633": {1820, 2}, "JP1_457196409": {1830, 3},
		} {
			m := loadMatch(t, id)
			if int(m.Info.QueueID) != want[0] || len(m.Info.Participants) != want[1] {
				t.Errorf("%s: queue=%d players=%d, want %v", id, m.Info.QueueID, len(m.Info.Participants), want)
			}
			if m.Info.GameMode != "STRAWBERRY" {
				t.Errorf("%s: gameMode %q", id, m.Info.GameMode)
			}
		}
	})
	t.Run("patch and duration", func(t *testing.T) {
		m := loadMatch(t, "JP1_566638130")
		if got := m.Info.Patch(); got != "16.4" {
			t.Errorf("Patch() = %q, want 16.4", got)
		}
		if m.Info.GameEndTimestamp == 0 || m.Info.DurationSeconds() != int64(m.Info.GameDuration) {
			t.Errorf("with gameEndTimestamp, DurationSeconds %d should equal gameDuration %d", m.Info.DurationSeconds(), m.Info.GameDuration)
		}
		if len(m.Info.Teams) != 2 || m.Info.Teams[0].Objectives["tower"].Kills == 0 && m.Info.Teams[1].Objectives["tower"].Kills == 0 {
			t.Errorf("teams/objectives not decoded: %+v", m.Info.Teams)
		}
	})
}

func TestDurationSecondsRule(t *testing.T) {
	pre := MatchInfo{GameDuration: 1_834_000} // ms, before 11.20: no gameEndTimestamp
	if got := pre.DurationSeconds(); got != 1834 {
		t.Errorf("pre-11.20 DurationSeconds() = %d, want 1834", got)
	}
	post := MatchInfo{GameDuration: 1834, GameEndTimestamp: 1_700_000_000_000}
	if got := post.DurationSeconds(); got != 1834 {
		t.Errorf("post-11.20 DurationSeconds() = %d, want 1834", got)
	}
	for in, want := range map[string]string{"16.4.748.682": "16.4", "13.14.520.6878": "13.14", "16": "", "": "", ".4.1": "", "16.": ""} {
		i := MatchInfo{GameVersion: in}
		if got := i.Patch(); got != want {
			t.Errorf("Patch(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestIntTolerant(t *testing.T) {
	var v struct {
		A, B, C, D, E, F, G Int
	}
	in := `{"A": 12, "B": 12.0, "C": 12.9, "D": null, "E": "34", "F": -7e2, "G": ""}`
	if err := json.Unmarshal([]byte(in), &v); err != nil {
		t.Fatal(err)
	}
	want := [7]Int{12, 12, 12, 0, 34, -700, 0}
	if got := [7]Int{v.A, v.B, v.C, v.D, v.E, v.F, v.G}; got != want {
		t.Errorf("got %v, want %v", got, want)
	}
	for _, bad := range []string{`true`, `"x"`, `1e300`, `[1]`, `{}`, `9223372036854775808`} {
		var n Int
		if err := json.Unmarshal([]byte(bad), &n); err == nil {
			t.Errorf("Unmarshal(%s) = %d, want error", bad, n)
		}
	}
	var n Int = 5
	if err := json.Unmarshal([]byte(`9223372036854775807`), &n); err != nil || n != 9223372036854775807 {
		t.Errorf("max int64: %d, %v", n, err)
	}
}

func TestDecodeTolerantShapes(t *testing.T) {
	m, err := DecodeMatch([]byte(`{"metadata":{"matchId":"NA1_1","extra":[1,2]},
		"info":{"gameDuration":1800.0,"gameEndTimestamp":null,"newField":{"x":1},
		"participants":[{"participantId":1,"kills":3.0,"deaths":null,"puuid":"BOT","challenges":{"kda":2.5}}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	p := m.Info.Participants[0]
	if p.Kills != 3 || p.Deaths != 0 || !p.IsBot() || m.Info.GameDuration != 1800 {
		t.Errorf("decoded %+v", p)
	}
	for _, bad := range []string{``, `null`, `{}`, `[]`, `{"metadata":{"matchId":"NA1_1"},"info":{"gameId":true}}`} {
		if _, err := DecodeMatch([]byte(bad)); err == nil {
			t.Errorf("DecodeMatch(%q) succeeded", bad)
		}
		if _, err := DecodeTimeline([]byte(bad)); err == nil {
			t.Errorf("DecodeTimeline(%q) succeeded", bad)
		}
	}
}

func TestDecodeTimelineFixtures(t *testing.T) {
	eachFixture(t, "timeline", DecodeTimeline, func(tl *Timeline) string { return tl.Metadata.MatchID }, func(t *testing.T, tl *Timeline, b []byte) {
		var raw struct {
			Info struct {
				Frames []struct {
					Events []any `json:"events"`
				} `json:"frames"`
				Participants []any `json:"participants"`
			} `json:"info"`
		}
		if err := json.Unmarshal(b, &raw); err != nil {
			t.Fatal(err)
		}
		if len(tl.Info.Frames) != len(raw.Info.Frames) || len(tl.Info.Frames) == 0 {
			t.Fatalf("frames = %d, want %d (>0)", len(tl.Info.Frames), len(raw.Info.Frames))
		}
		if len(tl.Info.Participants) != len(raw.Info.Participants) {
			t.Errorf("participants = %d, want %d", len(tl.Info.Participants), len(raw.Info.Participants))
		}
		for i, fr := range tl.Info.Frames {
			if len(fr.Events) != len(raw.Info.Frames[i].Events) {
				t.Errorf("frame %d events = %d, want %d", i, len(fr.Events), len(raw.Info.Frames[i].Events))
			}
			for _, e := range fr.Events {
				if e.Type == "" {
					t.Fatalf("frame %d: event without type", i)
				}
			}
		}
		// Participant frames are keyed "1".."N" for N participants.
		if n := len(tl.Info.Participants); n > 0 && len(tl.Info.Frames) > 1 {
			last := tl.Info.Frames[len(tl.Info.Frames)-1]
			for id := 1; id <= n; id++ {
				if _, ok := last.ParticipantFrames[strconv.Itoa(id)]; !ok {
					t.Errorf("last frame lacks participant %d", id)
				}
			}
		}
	})
}

func TestDecodeTimelineEdgeCases(t *testing.T) {
	tl := loadTimeline(t, "EUW1_6834713231")
	if len(tl.Info.Frames) != 1 || len(tl.Info.Participants) != 0 {
		t.Errorf("aborted timeline: frames=%d participants=%d, want 1 and 0", len(tl.Info.Frames), len(tl.Info.Participants))
	}
	tl = loadTimeline(t, "JP1_456819992")
	if tl.Info.FrameInterval != 60000 || len(tl.Info.Participants) != 1 {
		t.Errorf("swarm timeline: interval=%d participants=%d", tl.Info.FrameInterval, len(tl.Info.Participants))
	}
	if e := tl.Info.Frames[1].Events[0]; e.Type != "PAUSE_START" || e.RealTimestamp != 1721437694755 {
		t.Errorf("first event = %+v", e)
	}
}

func TestDecodeAccountAndLeagueFixtures(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(fixtureDir(t, "account"), "account-v1_by-riot-id_SSG-Xayah_NA1_galeforce.json"))
	if err != nil {
		t.Fatal(err)
	}
	var a Account
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatal(err)
	}
	if a.GameName != "SSG Xayah" || a.TagLine != "NA1" || len(a.PUUID) != 78 {
		t.Errorf("account = %+v", a)
	}
	// The legacy by-summoner shape still decodes (summonerId ignored).
	b, err = os.ReadFile(filepath.Join(fixtureDir(t, "league"), "league-v4_entries_by-summoner_NA1_legacy-shape_galeforce.json"))
	if err != nil {
		t.Fatal(err)
	}
	var es []LeagueEntry
	if err := json.Unmarshal(b, &es); err != nil {
		t.Fatal(err)
	}
	if len(es) == 0 || es[0].QueueType != "RANKED_SOLO_5x5" || es[0].Tier != "GOLD" || es[0].Wins != 183 || es[0].Losses != 165 {
		t.Errorf("league entries = %+v", es)
	}
}
