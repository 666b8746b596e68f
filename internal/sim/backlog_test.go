package sim

import (
	"encoding/json"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestBlacklistEscalates(t *testing.T) {
	s, clk := newSim(t, Options{
		Limits:    RateLimits{App: "1:1"},
		Blacklist: Blacklist{Violations: 2, Period: time.Minute, Duration: 10 * time.Second, Permanent: 3},
	})
	violate := func() {
		t.Helper()
		if r := get(t, s, accountPath); r.code != 200 {
			t.Fatalf("first call of the window: %d", r.code)
		}
		for i := 0; i < 3; i++ { // violations 1, 2 and 3 (> 2 → blacklisted)
			if r := get(t, s, accountPath); r.code != 429 {
				t.Fatalf("violation %d: %d", i+1, r.code)
			}
		}
	}
	violate()
	r := get(t, s, accountPath)
	if r.code != 403 || r.hdr.Get("X-App-Rate-Limit") != "" {
		t.Fatalf("blacklisted: %d %v", r.code, r.hdr)
	}
	// Every endpoint, every route.
	if r := get(t, s, "/na1/lol/summoner/v4/summoners/by-puuid/"+DemoPUUID); r.code != 403 {
		t.Fatalf("blacklist on another route: %d", r.code)
	}
	if st := s.Stats(); !st.Blacklisted || st.BlacklistEvents != 1 {
		t.Fatalf("stats %+v", st)
	}
	clk.Advance(10 * time.Second)
	violate() // second time: 20 s
	clk.Advance(10 * time.Second)
	if r := get(t, s, accountPath); r.code != 403 {
		t.Fatalf("second blacklist shorter than 20 s: %d", r.code)
	}
	clk.Advance(10 * time.Second)
	violate() // third time: permanent
	clk.Advance(24 * time.Hour)
	if r := get(t, s, accountPath); r.code != 403 {
		t.Fatalf("permanent blacklist lifted: %d", r.code)
	}
	s.ClearBlacklist()
	if r := get(t, s, accountPath); r.code != 200 {
		t.Fatalf("after ClearBlacklist: %d", r.code)
	}
	if st := s.Stats(); st.BlacklistEvents != 3 || st.Blacklisted {
		t.Fatalf("stats %+v", st)
	}
}

func TestBlacklistSparseViolationsAndNotFound(t *testing.T) {
	s, clk := newSim(t, Options{
		Limits:    RateLimits{App: "1:1"},
		Blacklist: Blacklist{Violations: 2, NotFound: 3, Period: 10 * time.Second, Duration: time.Minute},
	})
	// One violation every 11 s never exceeds 2 per 10 s.
	for i := 0; i < 5; i++ {
		get(t, s, accountPath)
		if r := get(t, s, accountPath); r.code != 429 {
			t.Fatalf("429 expected: %d", r.code)
		}
		clk.Advance(11 * time.Second)
	}
	if s.Stats().Blacklisted {
		t.Fatal("blacklisted for sparse violations")
	}
	// Unknown-resource calls: the 4th 404 within 10 s blacklists.
	for i := 0; i < 4; i++ {
		clk.Advance(time.Second)
		if r := get(t, s, fmt.Sprintf("/americas/lol/match/v5/matches/NA1_%d", i+1)); r.code != 404 {
			t.Fatalf("unknown match: %d", r.code)
		}
	}
	clk.Advance(time.Second)
	if r := get(t, s, accountPath); r.code != 403 {
		t.Fatalf("404 storm not blacklisted: %d", r.code)
	}
}

func TestSyntheticBacklog(t *testing.T) {
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	s, clk := newSim(t, Options{Synthetic: Synthetic{Players: 50, MatchesPerPlayer: 110, Platform: "na1"}})
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grow := int64(after.HeapAlloc) - int64(before.HeapAlloc); grow > 64<<20 {
		t.Fatalf("heap grew %d MB for 5,500 synthetic matches", grow>>20)
	}
	tr := s.Truth()
	total := 0
	for _, p := range tr.Players {
		if strings.HasSuffix(p.TagLine, "SYN") {
			total += len(p.Matches)
		}
	}
	if total != 5500 {
		t.Fatalf("synthetic matches %d", total)
	}
	// The player resolves by Riot ID.
	var acc accountDTO
	get(t, s, "/americas/riot/account/v1/accounts/by-riot-id/Synth0007/SYN").json(t, &acc)
	if acc.PUUID != SyntheticPUUID("na1", 7) || len(acc.PUUID) != 78 {
		t.Fatalf("account %+v", acc)
	}
	// The list pages newest first; all are recent.
	var ids []string
	r := get(t, s, "/americas/lol/match/v5/matches/by-puuid/"+url.PathEscape(acc.PUUID)+"/ids?count=100&start=100")
	r.json(t, &ids)
	if len(ids) != 10 {
		t.Fatalf("page 2: %d ids", len(ids))
	}
	pt := tr.Players[acc.PUUID]
	if pt.Matches[100].ID != ids[0] || !pt.Matches[100].Synthetic {
		t.Fatalf("page 2 starts with %s, truth %s", ids[0], pt.Matches[100].ID)
	}
	var withTL int
	for _, mt := range pt.Matches[:20] {
		var m struct {
			Metadata struct {
				MatchID      string
				Participants []string
			} `json:"metadata"`
			Info struct {
				GameCreation, GameID int64
				PlatformID           string
				Participants         []struct {
					PUUID          string `json:"puuid"`
					RiotIDGameName string `json:"riotIdGameName"`
					RiotIDTagline  string `json:"riotIdTagline"`
				}
			} `json:"info"`
		}
		r := get(t, s, "/americas/lol/match/v5/matches/"+mt.ID)
		if r.code != 200 {
			t.Fatalf("%s: %d", mt.ID, r.code)
		}
		r.json(t, &m)
		if m.Metadata.MatchID != mt.ID || fmt.Sprintf("NA1_%d", m.Info.GameID) != mt.ID || m.Info.PlatformID != "NA1" ||
			m.Info.GameCreation != mt.GameCreation || m.Metadata.Participants[0] != acc.PUUID ||
			m.Info.Participants[0].PUUID != acc.PUUID || m.Info.Participants[0].RiotIDGameName != "Synth0007" {
			t.Fatalf("%s: patched payload inconsistent: %+v", mt.ID, m.Metadata)
		}
		if clk.Now().UnixMilli()-mt.GameCreation > 30*24*3600*1000*12 {
			t.Fatalf("%s is not recent", mt.ID)
		}
		tl := get(t, s, "/americas/lol/match/v5/matches/"+mt.ID+"/timeline")
		if mt.HasTimeline != (tl.code == 200) {
			t.Fatalf("%s timeline %d, truth %v", mt.ID, tl.code, mt.HasTimeline)
		}
		if tl.code == 200 {
			withTL++
			var x timelineHead
			tl.json(t, &x)
			if x.Metadata.MatchID != mt.ID || fmt.Sprintf("NA1_%d", x.Info.GameID) != mt.ID || x.Metadata.Participants[0] != acc.PUUID {
				t.Fatalf("timeline not patched: %+v", x.Metadata.MatchID)
			}
		}
	}
	if withTL == 0 {
		t.Fatal("no synthetic match with a timeline among 20")
	}
	// Synthetic payloads are not cached.
	n := 0
	s.cache.Range(func(any, any) bool { n++; return true })
	if n != 0 {
		t.Fatalf("%d payloads cached", n)
	}
	if _, err := New(Options{APIKey: "k", Synthetic: Synthetic{Players: 1}}); err == nil {
		t.Fatal("MatchesPerPlayer 0 accepted")
	}
}

// TestAllFixtures loads the whole recorded fixture set when present and checks
// every listed match against Truth.
func TestAllFixtures(t *testing.T) {
	dir := FindFixtures()
	if dir == "" {
		t.Skip("no testdata/riot-fixtures")
	}
	s, _ := newSim(t, Options{FixturesDir: dir})
	tr := s.Truth()
	matches := map[string]MatchTruth{}
	for _, p := range tr.Players {
		for _, m := range p.Matches {
			matches[m.ID] = m
		}
	}
	if len(matches) < 60 {
		t.Fatalf("only %d matches listed", len(matches))
	}
	var okM, okT int
	for id, mt := range matches {
		_, reg, _ := parseID(id)
		r := get(t, s, "/"+reg+"/lol/match/v5/matches/"+id)
		if (r.code == 200) != mt.MatchOK {
			t.Fatalf("%s: %d vs truth %+v", id, r.code, mt)
		}
		if r.code == 200 {
			okM++
			if !json.Valid(r.body) {
				t.Fatalf("%s: invalid JSON", id)
			}
		}
		r = get(t, s, "/"+reg+"/lol/match/v5/matches/"+id+"/timeline")
		if (r.code == 200) != mt.TimelineOK {
			t.Fatalf("%s timeline: %d vs truth %+v", id, r.code, mt)
		}
		if r.code == 200 {
			okT++
		}
	}
	if okM == 0 || okT == 0 {
		t.Fatalf("nothing retrievable: %d matches, %d timelines", okM, okT)
	}
	// Bots are not players.
	if _, ok := tr.Players["BOT"]; ok {
		t.Fatal("BOT is a player")
	}
	// The Riot ID of a player's newest JP1 match resolves (this player was
	// "JUGKlNG#Seiyo" in 2024 matches, renamed by 2025).
	var acc accountDTO
	if r := get(t, s, "/asia/riot/account/v1/accounts/by-riot-id/JUGKlNG/Seiyo"); r.code != 404 {
		t.Fatalf("old Riot ID: %d", r.code)
	}
	r := get(t, s, "/asia/riot/account/v1/accounts/by-riot-id/Nothing%20on%20Me/Seiyo")
	r.json(t, &acc)
	if r.code != 200 || tr.Players[acc.PUUID].Platform != "jp1" {
		t.Fatalf("Nothing on Me#Seiyo: %d %s", r.code, r.body)
	}
}

// TestMatchlistCap: the matchlist serves only the newest 1000 matches.
func TestMatchlistCap(t *testing.T) {
	// Only NA1 templates are embedded: KR clones fall back to them.
	s, _ := newSim(t, Options{Synthetic: Synthetic{Players: 1, MatchesPerPlayer: 1050, Platform: "kr"}})
	puuid := SyntheticPUUID("kr", 1)
	page := func(start int) []string {
		var out []string
		r := get(t, s, fmt.Sprintf("/asia/lol/match/v5/matches/by-puuid/%s/ids?start=%d&count=100", puuid, start))
		if r.code != 200 {
			t.Fatalf("start=%d: %d %s", start, r.code, r.body)
		}
		r.json(t, &out)
		return out
	}
	if n := len(page(900)); n != 100 {
		t.Fatalf("start=900: %d", n)
	}
	if n := len(page(950)); n != 50 {
		t.Fatalf("start=950: %d, want 50 (cap 1000)", n)
	}
	if got := page(1000); len(got) != 0 {
		t.Fatalf("start=1000: %v", got)
	}
	pt := s.Truth().Players[puuid]
	if len(pt.Matches) != MatchlistCap || pt.Matches[0].ID != page(0)[0] || !strings.HasPrefix(pt.Matches[0].ID, "KR_") {
		t.Fatalf("truth: %d listed, first %s", len(pt.Matches), pt.Matches[0].ID)
	}
	if p := s.Players()[0]; p.PUUID != puuid || p.Matches != 1050 || p.Platform != "kr" {
		t.Fatalf("player %+v", p)
	}
}
