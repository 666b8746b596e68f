package sim

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

const matchPath = "/americas/lol/match/v5/matches/NA1_5027407435"

func TestRatioFaults(t *testing.T) {
	s, _ := newSim(t, Options{Faults: Faults{Error5xx: 1}})
	seen := map[int]bool{}
	for i := 0; i < 40; i++ {
		r := get(t, s, matchPath)
		seen[r.code] = true
		if r.code < 500 || r.hdr.Get("X-App-Rate-Limit-Count") == "" {
			t.Fatalf("5xx fault: %d %v", r.code, r.hdr)
		}
	}
	if len(seen) != 4 {
		t.Fatalf("5xx codes seen %v, want 500/502/503/504", seen)
	}

	if err := s.SetFaults(Faults{Service429: 1}); err != nil {
		t.Fatal(err)
	}
	r := get(t, s, matchPath)
	if r.code != 429 || r.hdr.Get("X-Rate-Limit-Type") != "" || r.hdr.Get("Retry-After") != "" {
		t.Fatalf("service 429: %d %v", r.code, r.hdr)
	}
	if err := s.SetFaults(Faults{Server429: 1, ServerRetryAfter: 7}); err != nil {
		t.Fatal(err)
	}
	r = get(t, s, matchPath)
	if r.code != 429 || r.hdr.Get("X-Rate-Limit-Type") != "server" || r.hdr.Get("Retry-After") != "7" {
		t.Fatalf("server 429: %d %v", r.code, r.hdr)
	}
	st := s.Stats()
	if st.RateLimited["service"] != 1 || st.RateLimited["server"] != 1 || st.Violations != 0 || st.Faults["service429"] != 1 {
		t.Fatalf("stats %+v %+v", st.RateLimited, st.Faults)
	}
	// Methods restricts ratio faults.
	s.SetFaults(Faults{Error5xx: 1, Methods: []string{MethodTimeline}})
	if r := get(t, s, matchPath); r.code != 200 {
		t.Fatalf("fault leaked to another method: %d", r.code)
	}
	if err := s.SetFaults(Faults{Error5xx: 2}); err == nil {
		t.Fatal("ratio 2 accepted")
	}
}

func TestFaultsDeterministic(t *testing.T) {
	run := func() []int {
		s, _ := newSim(t, Options{Faults: Faults{Seed: 42, Error5xx: 0.3, Service429: 0.3}})
		var codes []int
		for i := 0; i < 30; i++ {
			codes = append(codes, get(t, s, matchPath).code)
		}
		return codes
	}
	a, b := run(), run()
	n200 := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("run differs at %d: %v vs %v", i, a, b)
		}
		if a[i] == 200 {
			n200++
		}
	}
	if n200 == 0 || n200 == len(a) {
		t.Fatalf("ratios not applied: %v", a)
	}
}

func TestMatchFaults(t *testing.T) {
	s, _ := newSim(t, Options{})
	const id = "NA1_4924008147"
	path := "/americas/lol/match/v5/matches/" + id
	set := func(mf MatchFault) {
		t.Helper()
		if err := s.SetFaults(Faults{Match: map[string]MatchFault{id: mf}}); err != nil {
			t.Fatal(err)
		}
	}
	set(MatchFault{Kind: FaultNotFound})
	for i := 0; i < 3; i++ {
		if r := get(t, s, path); r.code != 404 {
			t.Fatalf("always 404: %d", r.code)
		}
	}
	if r := get(t, s, "/americas/lol/match/v5/matches/NA1_5027407435"); r.code != 200 {
		t.Fatal("fault hit another match")
	}
	set(MatchFault{Kind: FaultNotFoundN, N: 2})
	if a, b, c := get(t, s, path).code, get(t, s, path).code, get(t, s, path).code; a != 404 || b != 404 || c != 200 {
		t.Fatalf("404×2 then OK: %d %d %d", a, b, c)
	}
	// Counted per method: the timeline has its own 2 failures.
	if r := get(t, s, path+"/timeline"); r.code != 404 {
		t.Fatalf("timeline under 404-n: %d", r.code)
	}
	set(MatchFault{Kind: FaultUnavailableN, N: 1})
	if a, b := get(t, s, path).code, get(t, s, path).code; a != 503 || b != 200 {
		t.Fatalf("503×1 then OK: %d %d", a, b)
	}
	set(MatchFault{Kind: FaultPoison})
	r := get(t, s, path)
	if r.code != 200 || json.Valid(r.body) || !bytes.HasPrefix(r.body, []byte(`{`)) {
		t.Fatalf("poison: %d valid=%v", r.code, json.Valid(r.body))
	}
	set(MatchFault{Kind: FaultOversized, N: 3 << 20})
	r = get(t, s, path)
	var m struct {
		Metadata struct{ MatchID string } `json:"metadata"`
	}
	if r.code != 200 || len(r.body) < 3<<20 || !json.Valid(r.body) {
		t.Fatalf("oversized: %d %d bytes valid=%v", r.code, len(r.body), json.Valid(r.body))
	}
	r.json(t, &m)
	if m.Metadata.MatchID != id {
		t.Fatal("oversized body lost its content")
	}
	// Hostile payloads: a gzip bomb, deep nesting, NUL escapes.
	set(MatchFault{Kind: FaultGzipBomb, N: 8 << 20})
	r = get(t, s, path)
	if r.code != 200 || r.hdr.Get("Content-Encoding") != "gzip" || len(r.body) > 1<<20 {
		t.Fatalf("gzip bomb: %d %q %d bytes", r.code, r.hdr.Get("Content-Encoding"), len(r.body))
	}
	zr, err := gzip.NewReader(bytes.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	inflated, err := io.ReadAll(zr)
	if err != nil || len(inflated) < 8<<20 || !json.Valid(inflated) {
		t.Fatalf("gzip bomb inflates to %d bytes, valid=%v, %v", len(inflated), json.Valid(inflated), err)
	}
	set(MatchFault{Kind: FaultDeepJSON, N: 500})
	r = get(t, s, path)
	if r.code != 200 || !json.Valid(r.body) || !bytes.Contains(r.body, []byte(`"simDeep":[[[`)) {
		t.Fatalf("deep json: %d valid=%v", r.code, json.Valid(r.body))
	}
	set(MatchFault{Kind: FaultNUL})
	r = get(t, s, path)
	if r.code != 200 || !json.Valid(r.body) || bytes.Count(r.body, []byte(`\u0000`)) != 2 {
		t.Fatalf("nul: %d valid=%v %d NULs", r.code, json.Valid(r.body), bytes.Count(r.body, []byte(`\u0000`)))
	}
	if err := s.SetFaults(Faults{Match: map[string]MatchFault{id: {Kind: "nope"}}}); err == nil {
		t.Fatal("unknown kind accepted")
	}
	if st := s.Stats(); st.MatchCalls[id] != 13 || st.MatchCalls["NA1_5027407435"] != 1 {
		t.Fatalf("getMatch calls per match %v", st.MatchCalls)
	}
	if st := s.Stats(); st.Faults[FaultNotFound] != 3 || st.Faults[FaultPoison] != 1 {
		t.Fatalf("fault stats %v", st.Faults)
	}
}

func TestTruncatedAndSlowOverNetwork(t *testing.T) {
	s, _ := newSim(t, Options{Faults: Faults{Match: map[string]MatchFault{"NA1_4924008147": {Kind: FaultTruncated}}}})
	base, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	url := strings.Replace(base, "{route}", "americas", 1) + "/lol/match/v5/matches/"
	do := func(c *http.Client, id string) (*http.Response, []byte, error) {
		req, _ := http.NewRequest("GET", url+id, nil)
		req.Header.Set("X-Riot-Token", testKey)
		resp, err := c.Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, b, err
	}
	resp, _, err := do(http.DefaultClient, "NA1_4924008147")
	if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) || resp.StatusCode != 200 {
		t.Fatalf("truncated: err=%v", err)
	}
	// Slow: the delay is far longer than the client timeout; the client times out.
	s.SetFaults(Faults{Slow: 1, SlowDelay: time.Minute})
	c := &http.Client{Timeout: 100 * time.Millisecond}
	if _, _, err := do(c, "NA1_5027407435"); err == nil {
		t.Fatal("slow response did not time out")
	}
	if s.Stats().Faults["slow"] != 1 {
		t.Fatal("slow not counted")
	}
	s.SetFaults(Faults{})
	if resp, b, err := do(http.DefaultClient, "NA1_5027407435"); err != nil || resp.StatusCode != 200 || !json.Valid(b) {
		t.Fatalf("after clearing faults: %v", err)
	}
}

func TestAdminAPI(t *testing.T) {
	s, _ := newSim(t, Options{})
	post := func(path, body string) int {
		req := newRequest("POST", path, body)
		return serve(s, req).Code
	}
	if c := post("/sim/faults", `{"error5xx":1,"match":{"NA1_4924008147":{"kind":"404"}}}`); c != 200 {
		t.Fatalf("POST faults: %d", c)
	}
	if f := s.Faults(); f.Error5xx != 1 || f.Match["NA1_4924008147"].Kind != FaultNotFound {
		t.Fatalf("faults %+v", f)
	}
	if c := post("/sim/faults", `{"bogus":1}`); c != 400 {
		t.Fatalf("unknown field: %d", c)
	}
	r := get(t, s, matchPath)
	if r.code < 500 {
		t.Fatalf("fault not active: %d", r.code)
	}
	var st Stats
	get(t, s, "/sim/stats").json(t, &st)
	if st.Total != 1 || st.MethodCount(MethodMatch, r.code) != 1 || st.Count("americas", MethodMatch, r.code) != 1 {
		t.Fatalf("GET /sim/stats: %+v", st)
	}
	var tr Truth
	get(t, s, "/sim/truth").json(t, &tr)
	if len(tr.Players[DemoPUUID].Matches) != 16 {
		t.Fatal("GET /sim/truth")
	}
	var ps []Player
	get(t, s, "/sim/players").json(t, &ps)
	if len(ps) == 0 || ps[0].PUUID != DemoPUUID {
		t.Fatal("GET /sim/players")
	}
	if c := post("/sim/stats/reset", ""); c != 204 || s.Stats().Total != 0 {
		t.Fatal("reset")
	}
}
