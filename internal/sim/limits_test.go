package sim

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

const accountPath = "/americas/riot/account/v1/accounts/by-riot-id/LugnutsK/000"

func TestAppRateLimitFixedWindow(t *testing.T) {
	s, clk := newSim(t, Options{Limits: RateLimits{App: "3:1,6:10"}})
	want := []struct {
		code      int
		count     string
		retry     string
		limitType string
	}{
		{200, "1:1,1:10", "", ""},
		{200, "2:1,2:10", "", ""},
		{200, "3:1,3:10", "", ""},
		{429, "4:1,4:10", "1", "application"}, // over 3:1; 429s count too
	}
	for i, w := range want {
		r := get(t, s, accountPath)
		if r.code != w.code || r.hdr.Get("X-App-Rate-Limit") != "3:1,6:10" || r.hdr.Get("X-App-Rate-Limit-Count") != w.count ||
			r.hdr.Get("Retry-After") != w.retry || r.hdr.Get("X-Rate-Limit-Type") != w.limitType {
			t.Fatalf("call %d: %d count=%q retry=%q type=%q", i+1, r.code, r.hdr.Get("X-App-Rate-Limit-Count"), r.hdr.Get("Retry-After"), r.hdr.Get("X-Rate-Limit-Type"))
		}
		if r.hdr.Get("X-Method-Rate-Limit") != DefaultMethodLimits[MethodAccountByRiotID] || r.hdr.Get("X-Method-Rate-Limit-Count") == "" {
			t.Fatalf("method headers %v", r.hdr)
		}
		if w.code == 429 && riotMessage(t, r) != "Rate limit exceeded" {
			t.Fatal("429 body")
		}
	}
	// The 1 s window started at the first call; just before it ends: still limited.
	clk.Advance(999 * time.Millisecond)
	if r := get(t, s, accountPath); r.code != 429 {
		t.Fatalf("before reset: %d", r.code)
	}
	clk.Advance(time.Millisecond)
	r := get(t, s, accountPath)
	if r.code != 200 || r.hdr.Get("X-App-Rate-Limit-Count") != "1:1,6:10" {
		t.Fatalf("after reset: %d %q", r.code, r.hdr.Get("X-App-Rate-Limit-Count"))
	}
	// The 10 s window is now full (6 of 6): the next call is refused with Retry-After until that window resets (10 s from the first call).
	clk.Advance(500 * time.Millisecond)
	r = get(t, s, accountPath)
	if r.code != 429 || r.hdr.Get("Retry-After") != "9" { // 10 - 1.5 = 8.5 → 9
		t.Fatalf("10s window: %d retry=%q", r.code, r.hdr.Get("Retry-After"))
	}
	// A different routing value has its own application bucket.
	if r := get(t, s, "/europe/riot/account/v1/accounts/by-riot-id/LugnutsK/000"); r.code != 200 || r.hdr.Get("X-App-Rate-Limit-Count") != "1:1,1:10" {
		t.Fatalf("europe: %d %q", r.code, r.hdr.Get("X-App-Rate-Limit-Count"))
	}
	st := s.Stats()
	if st.RateLimited["application"] != 3 || st.Violations != 3 || st.Count("americas", MethodAccountByRiotID, 429) != 3 {
		t.Fatalf("stats %+v", st)
	}
	var max1 int
	for _, b := range st.Buckets {
		if b.Route == "americas" && b.Method == "" && b.WindowSeconds == 1 {
			max1 = b.MaxCount
		}
	}
	if max1 != 5 { // 4 in the first window +1 in the 999 ms call
		t.Fatalf("max count in the americas 1 s window: %d, want 5", max1)
	}
	// The ended 1 s instance: 5 counted, full at the 3rd request, last one
	// 999 ms after its start; the 10 s window has not ended yet.
	h := s.WindowHistory("americas", "", 1)
	if len(h) != 1 || h[0].Count != 5 || !h[0].Filled.Equal(h[0].Start) || h[0].Last.Sub(h[0].Start) != 999*time.Millisecond {
		t.Fatalf("1 s window history: %+v", h)
	}
	if h := s.WindowHistory("americas", "", 10); len(h) != 0 {
		t.Fatalf("10 s window history: %+v", h)
	}
	// The same over HTTP (GET /sim/windows), and a clear 400 without its
	// parameters.
	var hh []WindowInstance
	get(t, s, "/sim/windows?route=americas&secs=1").json(t, &hh)
	if len(hh) != 1 || hh[0].Count != 5 {
		t.Fatalf("GET /sim/windows: %+v", hh)
	}
	if r := get(t, s, "/sim/windows?route=americas"); r.code != 400 || !strings.Contains(string(r.body), "secs=") {
		t.Fatalf("GET /sim/windows without secs: %d %s", r.code, r.body)
	}
	s.ResetStats()
	if st := s.Stats(); st.Total != 0 || st.Violations != 0 {
		t.Fatalf("reset: %+v", st)
	}
}

func TestMethodRateLimit(t *testing.T) {
	s, clk := newSim(t, Options{Limits: RateLimits{App: "100:1", Method: map[string]string{MethodMatch: "2:10", "europe/" + MethodMatch: "1:10"}}})
	path := "/americas/lol/match/v5/matches/NA1_5027407435"
	for i := 0; i < 2; i++ {
		if r := get(t, s, path); r.code != 200 || r.hdr.Get("X-Method-Rate-Limit") != "2:10" {
			t.Fatalf("call %d: %d %v", i, r.code, r.hdr)
		}
	}
	clk.Advance(2500 * time.Millisecond)
	r := get(t, s, path)
	if r.code != 429 || r.hdr.Get("X-Rate-Limit-Type") != "method" || r.hdr.Get("Retry-After") != "8" ||
		r.hdr.Get("X-Method-Rate-Limit-Count") != "3:10" || r.hdr.Get("X-App-Rate-Limit-Count") != "1:1" {
		t.Fatalf("method 429: %d %v", r.code, r.hdr)
	}
	// Other methods on the same route are not affected.
	if r := get(t, s, "/americas/lol/match/v5/matches/by-puuid/"+DemoPUUID+"/ids"); r.code != 200 {
		t.Fatalf("ids: %d", r.code)
	}
	// Per-route override.
	if r := get(t, s, "/europe/lol/match/v5/matches/NA1_5027407435"); r.hdr.Get("X-Method-Rate-Limit") != "1:10" {
		t.Fatalf("override: %v", r.hdr)
	}
	if s.Stats().RateLimited["method"] != 1 {
		t.Fatal("method 429 not counted")
	}
}

func TestRateLimitScaleAndReverse(t *testing.T) {
	// TimeScale 0.1: the nominal 10 s window lasts 1 s; headers keep 10.
	s, clk := newSim(t, Options{TimeScale: 0.1, Limits: RateLimits{App: "1:10"}, Faults: Faults{ReverseHeaders: true}})
	get(t, s, accountPath)
	clk.Advance(300 * time.Millisecond)
	r := get(t, s, accountPath)
	if r.code != 429 || r.hdr.Get("X-App-Rate-Limit") != "1:10" || r.hdr.Get("Retry-After") != "7" {
		t.Fatalf("scaled: %d %v", r.code, r.hdr)
	}
	clk.Advance(700 * time.Millisecond)
	if r := get(t, s, accountPath); r.code != 200 {
		t.Fatalf("after scaled window: %d", r.code)
	}
	s2, _ := newSim(t, Options{Limits: RateLimits{App: "20:1,100:120"}, Faults: Faults{ReverseHeaders: true}})
	r = get(t, s2, accountPath)
	if r.hdr.Get("X-App-Rate-Limit") != "100:120,20:1" || r.hdr.Get("X-App-Rate-Limit-Count") != "1:120,1:1" {
		t.Fatalf("reversed: %v", r.hdr)
	}
	if _, err := New(Options{APIKey: "k", Limits: RateLimits{App: "20/1"}}); err == nil {
		t.Fatal("bad limit spec accepted")
	}
}

// TestConcurrentRateLimit fires many requests at once with a frozen clock:
// exactly the limit succeed, whatever the interleaving. Run with -race.
func TestConcurrentRateLimit(t *testing.T) {
	s, _ := newSim(t, Options{Limits: RateLimits{App: "20:1,100:120"}})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	var wg sync.WaitGroup
	codes := make(chan int, 60)
	for i := 0; i < 60; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			path := accountPath
			if i%2 == 1 {
				path = "/americas/lol/match/v5/matches/NA1_5027407435"
			}
			req, _ := http.NewRequest("GET", srv.URL+path, nil)
			req.Header.Set("X-Riot-Token", testKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}(i)
	}
	wg.Wait()
	close(codes)
	n := map[int]int{}
	for c := range codes {
		n[c]++
	}
	if n[200] != 20 || n[429] != 40 {
		t.Fatalf("codes %v", n)
	}
	st := s.Stats()
	if st.Total != 60 || st.RateLimited["application"] != 40 {
		t.Fatalf("stats total=%d app429=%d", st.Total, st.RateLimited["application"])
	}
	for _, b := range st.Buckets {
		if b.Method == "" && b.WindowSeconds == 1 && b.MaxCount != 60 {
			t.Fatalf("max count %d", b.MaxCount)
		}
	}
}
