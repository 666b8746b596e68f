package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const testKey = "RGAPI-test-key"

// fakeClock is an injectable clock; tests move it explicitly. It holds
// nanoseconds since the Unix epoch.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func newClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newSim(t testing.TB, opts Options) (*Sim, *fakeClock) {
	t.Helper()
	clk := newClock()
	if opts.APIKey == "" {
		opts.APIKey = testKey
	}
	if opts.Now == nil {
		opts.Now = clk.Now
	}
	opts.Logger = quiet
	if opts.Limits.App == "" {
		opts.Limits.App = "10000:1"
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, clk
}

type result struct {
	code int
	hdr  http.Header
	body []byte
}

func (r result) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %q: %v", r.body, err)
	}
}

// get calls the handler directly (no network) with the test key.
func get(t *testing.T, s *Sim, path string) result {
	t.Helper()
	return getH(t, s, path, http.Header{"X-Riot-Token": {testKey}})
}

func getH(t *testing.T, s *Sim, path string, h http.Header) result {
	t.Helper()
	req := httptest.NewRequest("GET", path, nil)
	req.Header = h
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	return result{rec.Code, rec.Header(), rec.Body.Bytes()}
}

func riotMessage(t *testing.T, r result) string {
	t.Helper()
	var e struct {
		Status struct {
			Message    string `json:"message"`
			StatusCode int    `json:"status_code"`
		} `json:"status"`
	}
	r.json(t, &e)
	if e.Status.StatusCode != r.code {
		t.Fatalf("body status_code %d, HTTP %d", e.Status.StatusCode, r.code)
	}
	return e.Status.Message
}

func TestEmbeddedDemoPlayer(t *testing.T) {
	s, _ := newSim(t, Options{})
	p, ok := s.DemoPlayer()
	if !ok {
		t.Fatal("no demo player")
	}
	want := Player{PUUID: DemoPUUID, GameName: "LugnutsK", TagLine: "000", Platform: "na1", Matches: 16}
	if p != want {
		t.Fatalf("demo player %+v, want %+v", p, want)
	}
	if ps := s.Players(); ps[0] != want {
		t.Fatalf("Players()[0] = %+v, want the demo player", ps[0])
	}
	// The shift puts the newest match one day before now.
	tr := s.Truth().Players[DemoPUUID]
	if got := tr.Matches[0].GameCreation; got != s.now().Add(-24*time.Hour).UnixMilli() {
		t.Fatalf("newest gameCreation %d, want now-1d", got)
	}
}

func TestAuth(t *testing.T) {
	s, _ := newSim(t, Options{})
	path := "/americas/riot/account/v1/accounts/by-riot-id/LugnutsK/000"
	if r := getH(t, s, path, http.Header{}); r.code != 401 || riotMessage(t, r) != "Unauthorized" {
		t.Fatalf("no key: %d %s", r.code, r.body)
	}
	if r := getH(t, s, path, http.Header{"X-Riot-Token": {"RGAPI-wrong"}}); r.code != 403 {
		t.Fatalf("wrong key: %d", r.code)
	}
	if r := getH(t, s, path+"?api_key="+testKey, http.Header{}); r.code != 200 {
		t.Fatalf("api_key query: %d %s", r.code, r.body)
	}
	if r := getH(t, s, path+"?api_key=nope", http.Header{}); r.code != 403 {
		t.Fatalf("wrong api_key query: %d", r.code)
	}
	if r := get(t, s, "/americas/lol/unknown/v1/thing"); r.code != 403 {
		t.Fatalf("unsupported path: %d", r.code)
	}
	// Auth failures are not rate limited: no headers.
	if r := getH(t, s, path, http.Header{}); r.hdr.Get("X-App-Rate-Limit") != "" {
		t.Fatal("401 carries rate-limit headers")
	}
}

func TestAccountEndpoints(t *testing.T) {
	s, _ := newSim(t, Options{})
	var acc accountDTO
	r := get(t, s, "/europe/riot/account/v1/accounts/by-riot-id/lugnutsk/000")
	if r.code != 200 {
		t.Fatalf("by-riot-id: %d %s", r.code, r.body)
	}
	r.json(t, &acc)
	if acc != (accountDTO{DemoPUUID, "LugnutsK", "000"}) {
		t.Fatalf("account %+v", acc)
	}
	r = get(t, s, "/americas/riot/account/v1/accounts/by-riot-id/SSG%20Xayah/NA1")
	r.json(t, &acc)
	if r.code != 200 || acc.PUUID != "jkxCVExyvEawqoKz-BfIgcvOyT4z8YbYmRSISvxObtrq-JAfX8mCJ4OpEvQ_b9aHJRLZ-NNIfhHr8g" {
		t.Fatalf("SSG Xayah: %d %s", r.code, r.body)
	}
	r = get(t, s, "/americas/riot/account/v1/accounts/by-riot-id/Nobody/000")
	if r.code != 404 || !strings.HasPrefix(riotMessage(t, r), "Data not found") {
		t.Fatalf("unknown riot id: %d %s", r.code, r.body)
	}
	if r = get(t, s, "/sea/riot/account/v1/accounts/by-riot-id/LugnutsK/000"); r.code != 403 {
		t.Fatalf("account on sea: %d", r.code)
	}
	if r = get(t, s, "/na1/riot/account/v1/accounts/by-riot-id/LugnutsK/000"); r.code != 403 {
		t.Fatalf("account on a platform: %d", r.code)
	}
	r = get(t, s, "/asia/riot/account/v1/accounts/by-puuid/"+DemoPUUID)
	r.json(t, &acc)
	if r.code != 200 || acc.GameName != "LugnutsK" {
		t.Fatalf("by-puuid: %d %s", r.code, r.body)
	}
	if r = get(t, s, "/asia/riot/account/v1/accounts/by-puuid/not-a-puuid"); r.code != 400 {
		t.Fatalf("foreign puuid: %d", r.code)
	}
}

func ids(t *testing.T, s *Sim, query string) (int, []string) {
	t.Helper()
	r := get(t, s, "/americas/lol/match/v5/matches/by-puuid/"+DemoPUUID+"/ids"+query)
	var out []string
	if r.code == 200 {
		r.json(t, &out)
	}
	return r.code, out
}

func TestMatchIDs(t *testing.T) {
	s, _ := newSim(t, Options{})
	truth := s.Truth().Players[DemoPUUID]
	var all []string
	for i, m := range truth.Matches {
		all = append(all, m.ID)
		if i > 0 && m.GameCreation > truth.Matches[i-1].GameCreation {
			t.Fatal("truth not newest first")
		}
	}
	code, got := ids(t, s, "")
	if code != 200 || !slices.Equal(got, all) {
		t.Fatalf("default: %d %v want %v", code, got, all)
	}
	if _, got = ids(t, s, "?start=2&count=5"); !slices.Equal(got, all[2:7]) {
		t.Fatalf("start=2&count=5: %v", got)
	}
	if _, got = ids(t, s, "?count=0"); got == nil || len(got) != 0 {
		t.Fatalf("count=0: %v", got)
	}
	if _, got = ids(t, s, "?start=15&count=100"); !slices.Equal(got, all[15:]) {
		t.Fatalf("tail: %v", got)
	}
	for _, q := range []string{"?count=101", "?count=-1", "?start=-1", "?count=x", "?type=bogus", "?startTime=abc"} {
		if code, _ := ids(t, s, q); code != 400 {
			t.Errorf("%s: %d, want 400", q, code)
		}
	}
	// startTime/endTime are epoch SECONDS against gameCreation/1000.
	mid := truth.Matches[5].GameCreation / 1000
	_, got = ids(t, s, fmt.Sprintf("?startTime=%d", mid))
	if !slices.Equal(got, all[:6]) {
		t.Fatalf("startTime: %v want %v", got, all[:6])
	}
	_, got = ids(t, s, fmt.Sprintf("?endTime=%d", mid))
	if !slices.Equal(got, all[5:]) {
		t.Fatalf("endTime: %v want %v", got, all[5:])
	}
	// milliseconds by mistake: nothing is that late.
	if _, got = ids(t, s, fmt.Sprintf("?startTime=%d", mid*1000)); len(got) != 0 {
		t.Fatalf("startTime in ms matched %v", got)
	}
	// queue and type filters (demo player: 420 ×10, 400 ×5, 450 ×1).
	_, q420 := ids(t, s, "?queue=420&count=100")
	_, ranked := ids(t, s, "?type=ranked&count=100")
	_, normal := ids(t, s, "?type=normal&count=100")
	_, rankedNormal := ids(t, s, "?type=normal&queue=420")
	if len(q420) != 10 || !slices.Equal(q420, ranked) || len(normal) != 6 || len(rankedNormal) != 0 {
		t.Fatalf("filters: 420=%d ranked=%d normal=%d normal&420=%d", len(q420), len(ranked), len(normal), len(rankedNormal))
	}
	// Another region lists nothing of this NA player.
	r := get(t, s, "/asia/lol/match/v5/matches/by-puuid/"+DemoPUUID+"/ids")
	if r.code != 200 || string(r.body) != "[]" {
		t.Fatalf("asia: %d %s", r.code, r.body)
	}
	if r = get(t, s, "/americas/lol/match/v5/matches/by-puuid/unknown/ids"); r.code != 400 {
		t.Fatalf("unknown puuid: %d", r.code)
	}
	if r = get(t, s, "/na1/lol/match/v5/matches/by-puuid/"+DemoPUUID+"/ids"); r.code != 403 {
		t.Fatalf("platform route for match-v5: %d", r.code)
	}
}

func TestStartTimeExcludesBeforeJune2021(t *testing.T) {
	// Shift the data 3 years back: most matches land before 2021-06-16.
	s, _ := newSim(t, Options{Shift: -3 * 365 * 24 * time.Hour})
	truth := s.Truth().Players[DemoPUUID].Matches
	var after []string
	for _, m := range truth {
		if m.GameCreation/1000 >= matchlistEpoch {
			after = append(after, m.ID)
		}
	}
	if len(after) == 0 || len(after) == len(truth) {
		t.Fatalf("test data does not straddle the cutoff: %d of %d", len(after), len(truth))
	}
	if _, got := ids(t, s, "?count=100"); len(got) != len(truth) {
		t.Fatalf("without startTime: %d, want all %d", len(got), len(truth))
	}
	if _, got := ids(t, s, "?count=100&startTime=0"); !slices.Equal(got, after) {
		t.Fatalf("startTime=0: %v, want %v", got, after)
	}
}

func TestMatchRedatingAndRetention(t *testing.T) {
	s, clk := newSim(t, Options{})
	truth := s.Truth().Players[DemoPUUID].Matches
	var ok, gone int
	for _, mt := range truth {
		r := get(t, s, "/americas/lol/match/v5/matches/"+mt.ID)
		if mt.MatchOK != (r.code == 200) {
			t.Fatalf("%s: HTTP %d, truth MatchOK=%v", mt.ID, r.code, mt.MatchOK)
		}
		if r.code != 200 {
			gone++
			if riotMessage(t, r) != "Data not found - match file not found" {
				t.Fatalf("404 body %s", r.body)
			}
			continue
		}
		ok++
		var m struct {
			Metadata struct{ MatchID string } `json:"metadata"`
			Info     struct {
				GameCreation, GameStartTimestamp, GameEndTimestamp, GameID int64
				PlatformID                                                 string
				Participants                                               []json.RawMessage
			} `json:"info"`
		}
		r.json(t, &m)
		if m.Metadata.MatchID != mt.ID || m.Info.GameCreation != mt.GameCreation || len(m.Info.Participants) != mt.Participants {
			t.Fatalf("%s: served %+v vs truth %+v", mt.ID, m.Metadata, mt)
		}
		if fmt.Sprintf("NA1_%d", m.Info.GameID) != mt.ID || m.Info.PlatformID != "NA1" {
			t.Fatalf("%s: gameId/platformId changed: %d %s", mt.ID, m.Info.GameID, m.Info.PlatformID)
		}
		// Durations are preserved by the shift.
		if d := m.Info.GameEndTimestamp - m.Info.GameStartTimestamp; d <= 0 || d > 2*3600*1000 {
			t.Fatalf("%s: start→end %d ms", mt.ID, d)
		}
		if now := clk.Now().UnixMilli(); now-m.Info.GameCreation > MatchRetention.Milliseconds() {
			t.Fatalf("%s served beyond retention", mt.ID)
		}
	}
	// Recorded 2022-01 … 2024-06: re-dated, the 2022 matches are > 2 years old
	// but still listed.
	if ok == 0 || gone == 0 || ok+gone != 16 {
		t.Fatalf("ok=%d gone=%d", ok, gone)
	}
	// The match ID's region must equal the route.
	if r := get(t, s, "/asia/lol/match/v5/matches/"+truth[0].ID); r.code != 404 {
		t.Fatalf("wrong region: %d", r.code)
	}
	if r := get(t, s, "/americas/lol/match/v5/matches/NA1_1"); r.code != 404 {
		t.Fatalf("unknown match: %d", r.code)
	}
	if r := get(t, s, "/americas/lol/match/v5/matches/garbage"); r.code != 400 {
		t.Fatalf("malformed id: %d", r.code)
	}
	// Time passes: after two more years nothing is retrievable.
	clk.Advance(MatchRetention)
	if r := get(t, s, "/americas/lol/match/v5/matches/"+truth[0].ID); r.code != 404 {
		t.Fatalf("after 2y: %d", r.code)
	}
	if tr := s.Truth().Players[DemoPUUID].Matches; tr[0].MatchOK || len(tr) != 16 {
		t.Fatal("truth after 2y still retrievable or unlisted")
	}
}

func TestTimeline(t *testing.T) {
	s, clk := newSim(t, Options{})
	const id = "NA1_4924008147"
	var mt MatchTruth
	for _, m := range s.Truth().Players[DemoPUUID].Matches {
		if m.ID == id {
			mt = m
		}
	}
	if !mt.HasTimeline || !mt.TimelineOK {
		t.Fatalf("truth %+v", mt)
	}
	r := get(t, s, "/americas/lol/match/v5/matches/"+id+"/timeline")
	if r.code != 200 {
		t.Fatalf("timeline: %d %s", r.code, r.body)
	}
	var tl struct {
		Metadata struct{ MatchID string } `json:"metadata"`
		Info     struct {
			GameID int64 `json:"gameId"`
			Frames []struct {
				Timestamp int64
				Events    []struct {
					Type          string
					RealTimestamp int64
					Timestamp     int64
				}
			}
		}
	}
	r.json(t, &tl)
	if tl.Metadata.MatchID != id || tl.Info.GameID != 4924008147 || len(tl.Info.Frames) != 46 {
		t.Fatalf("timeline shape %s %d %d", tl.Metadata.MatchID, tl.Info.GameID, len(tl.Info.Frames))
	}
	shift := s.Shift().Milliseconds()
	var end int64
	for _, f := range tl.Info.Frames {
		for _, e := range f.Events {
			if e.Type == "GAME_END" {
				end = e.RealTimestamp
			}
		}
	}
	if end != 1708119713539+shift { // recorded GAME_END realTimestamp + shift
		t.Fatalf("GAME_END realTimestamp %d, want %d", end, 1708119713539+shift)
	}
	if tl.Info.Frames[1].Timestamp > 120000 {
		t.Fatal("frame timestamps (ms since start) were shifted")
	}
	// Matches without a timeline in the data: 404.
	if r := get(t, s, "/americas/lol/match/v5/matches/NA1_5027407435/timeline"); r.code != 404 {
		t.Fatalf("no timeline: %d", r.code)
	}
	// Timelines are kept one year.
	clk.Advance(TimelineRetention - time.Duration(clk.Now().UnixMilli()-mt.GameCreation)*time.Millisecond + time.Hour)
	if r := get(t, s, "/americas/lol/match/v5/matches/"+id+"/timeline"); r.code != 404 {
		t.Fatalf("timeline after 1y: %d", r.code)
	}
	if r := get(t, s, "/americas/lol/match/v5/matches/"+id); r.code != 200 {
		t.Fatalf("match after 1y: %d", r.code)
	}
}

func TestLeagueAndSummoner(t *testing.T) {
	s, _ := newSim(t, Options{})
	var entries []leagueEntry
	r := get(t, s, "/na1/lol/league/v4/entries/by-puuid/"+DemoPUUID)
	r.json(t, &entries)
	if r.code != 200 || len(entries) != 1 || entries[0].QueueType != "RANKED_SOLO_5x5" || entries[0].PUUID != DemoPUUID {
		t.Fatalf("league: %d %s", r.code, r.body)
	}
	if r = get(t, s, "/jp1/lol/league/v4/entries/by-puuid/"+DemoPUUID); r.code != 200 || string(r.body) != "[]" {
		t.Fatalf("league other platform: %d %s", r.code, r.body)
	}
	if r = get(t, s, "/americas/lol/league/v4/entries/by-puuid/"+DemoPUUID); r.code != 403 {
		t.Fatalf("league on a region: %d", r.code)
	}
	var sum summonerDTO
	r = get(t, s, "/na1/lol/summoner/v4/summoners/by-puuid/"+DemoPUUID)
	r.json(t, &sum)
	if r.code != 200 || sum.PUUID != DemoPUUID || sum.SummonerLevel == 0 || sum.RevisionDate != s.Truth().Players[DemoPUUID].Matches[0].GameCreation {
		t.Fatalf("summoner: %d %s", r.code, r.body)
	}
	if r = get(t, s, "/kr/lol/summoner/v4/summoners/by-puuid/"+DemoPUUID); r.code != 404 {
		t.Fatalf("summoner other platform: %d", r.code)
	}
}

func TestGzip(t *testing.T) {
	s, _ := newSim(t, Options{})
	base, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !strings.HasSuffix(base, "/{route}") || !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("base %q", base)
	}
	url := strings.Replace(base, "{route}", "americas", 1) + "/lol/match/v5/matches/NA1_5027407435"
	fetch := func(gz bool) (*http.Response, []byte) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("X-Riot-Token", testKey)
		if gz {
			req.Header.Set("Accept-Encoding", "gzip")
		}
		resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	resp, zipped := fetch(true)
	plainResp, plain := fetch(false)
	if resp.Header.Get("Content-Encoding") != "gzip" || plainResp.Header.Get("Content-Encoding") != "" {
		t.Fatalf("encodings %q / %q", resp.Header.Get("Content-Encoding"), plainResp.Header.Get("Content-Encoding"))
	}
	if len(zipped)*3 > len(plain) {
		t.Fatalf("gzip %d vs plain %d bytes", len(zipped), len(plain))
	}
	// The default client decompresses transparently and gets the same JSON.
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("X-Riot-Token", testKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != string(plain) || !json.Valid(b) {
		t.Fatal("gzip round trip differs")
	}
	if st := s.Stats(); st.BytesServed < int64(len(zipped)+len(plain)) {
		t.Fatalf("bytes served %d", st.BytesServed)
	}
}

func TestFindFixtures(t *testing.T) {
	t.Setenv("RIFTFLOW_FIXTURES", "/some/where")
	if got := FindFixtures(); got != "/some/where" {
		t.Fatalf("env: %q", got)
	}
	t.Setenv("RIFTFLOW_FIXTURES", "")
	dir := t.TempDir()
	if err := mkdirs(dir+"/repo/testdata/riot-fixtures/match", dir+"/repo/internal/sim"); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir + "/repo/internal/sim")
	if got := FindFixtures(); got != dir+"/repo/testdata/riot-fixtures" {
		t.Fatalf("walk: %q", got)
	}
}

func TestAcceptsGzip(t *testing.T) {
	for in, want := range map[string]bool{
		"": false, "gzip": true, "deflate, gzip": true, "gzip;q=0": false, "gzip; q=0.5": true,
		"br": false, "*": true, "GZIP": true, "identity, gzip;q=0.0": false,
	} {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("Accept-Encoding", in)
		if got := acceptsGzip(req); got != want {
			t.Errorf("acceptsGzip(%q) = %v", in, got)
		}
	}
}

// TestDeriveTimelines: with DeriveTimelines a recorded match without a
// recorded timeline (NA1_5027407435) gets one re-keyed to it: its match ID,
// game ID, its participants' PUUIDs and realTimestamps near its own
// gameCreation; a match with a recorded timeline keeps it. Without the
// option it is a 404 (TestTimeline).
func TestDeriveTimelines(t *testing.T) {
	s, _ := newSim(t, Options{DeriveTimelines: true})
	for _, m := range s.Truth().Players[DemoPUUID].Matches {
		if !m.HasTimeline {
			t.Errorf("%s: no timeline with DeriveTimelines", m.ID)
		}
	}
	const id = "NA1_5027407435"
	var match struct {
		Metadata struct{ Participants []string } `json:"metadata"`
		Info     struct{ GameCreation, GameEndTimestamp int64 }
	}
	get(t, s, "/americas/lol/match/v5/matches/"+id).json(t, &match)
	r := get(t, s, "/americas/lol/match/v5/matches/"+id+"/timeline")
	if r.code != 200 {
		t.Fatalf("derived timeline: %d %s", r.code, r.body)
	}
	var tl timelineHead
	r.json(t, &tl)
	if tl.Metadata.MatchID != id || tl.Info.GameID != 5027407435 || len(tl.Info.Frames) == 0 {
		t.Fatalf("derived timeline shape %s %d %d", tl.Metadata.MatchID, tl.Info.GameID, len(tl.Info.Frames))
	}
	if !slices.Equal(tl.Metadata.Participants, match.Metadata.Participants) {
		t.Fatalf("metadata.participants %v, want the match's %v", tl.Metadata.Participants, match.Metadata.Participants)
	}
	for i, p := range tl.Info.Participants {
		if p.PUUID != match.Metadata.Participants[i] {
			t.Fatalf("info.participants[%d].puuid %s, want %s", i, p.PUUID, match.Metadata.Participants[i])
		}
	}
	for _, f := range tl.Info.Frames {
		for _, e := range f.Events {
			if e.RealTimestamp != 0 && (e.RealTimestamp < match.Info.GameCreation || e.RealTimestamp > match.Info.GameCreation+3*time.Hour.Milliseconds()) {
				t.Fatalf("realTimestamp %d outside the match (created %d)", e.RealTimestamp, match.Info.GameCreation)
			}
		}
	}
	const recorded = "NA1_4924008147"
	var own struct{ Metadata struct{ MatchID string } }
	get(t, s, "/americas/lol/match/v5/matches/"+recorded+"/timeline").json(t, &own)
	if own.Metadata.MatchID != recorded {
		t.Fatalf("recorded timeline replaced: %s", own.Metadata.MatchID)
	}
}

// TestDeriveTimelinesSynthetic: with DeriveTimelines every synthetic match
// has a timeline too (most templates have none recorded), re-keyed to the
// synthetic match: its ID and game ID, the match's participants with the
// synthetic player in its slot, realTimestamps near its gameCreation.
func TestDeriveTimelinesSynthetic(t *testing.T) {
	s, _ := newSim(t, Options{DeriveTimelines: true, Synthetic: Synthetic{Players: 2, MatchesPerPlayer: 30}})
	puuid := SyntheticPUUID("na1", 2)
	ms := s.Truth().Players[puuid].Matches
	if len(ms) != 30 {
		t.Fatalf("%d synthetic matches, want 30", len(ms))
	}
	for _, m := range ms {
		if !m.HasTimeline || !m.TimelineOK {
			t.Fatalf("%s: no timeline with DeriveTimelines", m.ID)
		}
		var match struct {
			Metadata struct{ Participants []string } `json:"metadata"`
			Info     struct{ GameCreation int64 }
		}
		get(t, s, "/americas/lol/match/v5/matches/"+m.ID).json(t, &match)
		r := get(t, s, "/americas/lol/match/v5/matches/"+m.ID+"/timeline")
		if r.code != 200 {
			t.Fatalf("%s timeline: %d %s", m.ID, r.code, r.body)
		}
		var tl timelineHead
		r.json(t, &tl)
		if tl.Metadata.MatchID != m.ID || len(tl.Info.Frames) == 0 {
			t.Fatalf("%s: timeline of %s with %d frames", m.ID, tl.Metadata.MatchID, len(tl.Info.Frames))
		}
		if !slices.Equal(tl.Metadata.Participants, match.Metadata.Participants) || !slices.Contains(tl.Metadata.Participants, puuid) {
			t.Fatalf("%s: timeline participants %v, want the match's %v (with %s)", m.ID, tl.Metadata.Participants, match.Metadata.Participants, puuid)
		}
		for _, f := range tl.Info.Frames {
			for _, e := range f.Events {
				if e.RealTimestamp != 0 && (e.RealTimestamp < match.Info.GameCreation || e.RealTimestamp > match.Info.GameCreation+3*time.Hour.Milliseconds()) {
					t.Fatalf("%s: realTimestamp %d outside the match (created %d)", m.ID, e.RealTimestamp, match.Info.GameCreation)
				}
			}
		}
	}
	// Without the option the templates' recorded timelines only.
	plain, _ := newSim(t, Options{Synthetic: Synthetic{Players: 2, MatchesPerPlayer: 30}})
	n := 0
	for _, m := range plain.Truth().Players[puuid].Matches {
		if m.HasTimeline {
			n++
		}
	}
	if n == 0 || n == 30 {
		t.Errorf("%d of 30 synthetic matches have a timeline without DeriveTimelines, want some", n)
	}
}

// Start keeps the simulator on loopback; Serve takes any listener (what
// `riftflow sim --expose` gives it in a pod) and serves the same API, once.
func TestServeListener(t *testing.T) {
	s, _ := newSim(t, Options{})
	if _, err := s.Start("0.0.0.0:0"); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Fatalf("Start on 0.0.0.0: %v, want refused", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base, err := s.Serve(ln)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if want := "http://" + ln.Addr().String() + "/{route}"; base != want {
		t.Fatalf("base %q, want %q", base, want)
	}
	req, _ := http.NewRequest("GET", strings.Replace(base, "{route}", "americas", 1)+"/lol/match/v5/matches/NA1_5027407435", nil)
	req.Header.Set("X-Riot-Token", testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("match over Serve: %d", resp.StatusCode)
	}
	again, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Serve(again); err == nil {
		t.Fatal("second Serve: want already started")
	}
}
