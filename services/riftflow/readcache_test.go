package riftflow

// The read API's ranks and reports routes, and its read cache: shared by
// API replicas in the read-cache KV bucket, per-key TTLs, an in-process
// layer bounded in bytes, bodies too large for a NATS message served
// uncached.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/streams"
)

// getFrom GETs url (with extra header pairs) and returns the answer and its
// body; a request without an answer fails the test.
func getFrom(t *testing.T, url string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// TestPlayerRanksAndReports: GET /v1/players/{puuid}/ranks and /reports
// answer the stored league snapshots and weekly reports of that player
// only, newest first, in pages joined by an opaque cursor, with an ETag
// (304 on If-None-Match) and design 002's 5-minute Cache-Control; bad
// paging is 400; `riftflow show --ranks` and `--reports` print the same.
func TestPlayerRanksAndReports(t *testing.T) {
	h := startHarness(t, harnessOptions{noRun: true})
	st := h.st.Infra.Store
	const p, other = "puuid-ranks-player", "puuid-someone-else"
	day0 := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	var entries []store.LeagueEntry
	for d := 0; d < 3; d++ {
		for _, q := range []string{"RANKED_FLEX_SR", "RANKED_SOLO_5x5"} {
			entries = append(entries, store.LeagueEntry{PUUID: p, QueueType: q, SnapshotDate: day0.AddDate(0, 0, d),
				Platform: "na1", Tier: "GOLD", Rank: "II", LeaguePoints: 10*d + len(q)})
		}
	}
	entries = append(entries, store.LeagueEntry{PUUID: other, QueueType: "RANKED_SOLO_5x5", SnapshotDate: day0.AddDate(0, 0, 9), Tier: "IRON"})
	if err := st.UpsertLeagueEntries(h.ctx, entries); err != nil {
		t.Fatal(err)
	}
	lp := 17
	for w := 0; w < 3; w++ {
		if err := st.SaveWeeklyReport(h.ctx, store.WeeklyReport{PUUID: p, WeekStart: day0.AddDate(0, 0, -7*w),
			WeeklyStats: store.WeeklyStats{Games: w + 1, Wins: w, TopChampions: []store.ChampionStat{{ChampionName: "Ahri", Games: w + 1}}},
			LPChange:    &lp}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SaveWeeklyReport(h.ctx, store.WeeklyReport{PUUID: other, WeekStart: day0.AddDate(0, 0, 7)}); err != nil {
		t.Fatal(err)
	}
	srv := apiServer(t, h.st.Infra, ScopeRead)

	var ranks []string
	cursor := ""
	for page := 0; ; page++ {
		resp, body := getFrom(t, srv.URL+"/v1/players/"+p+"/ranks?limit=4&cursor="+cursor)
		var rp ranksPage
		if resp.StatusCode != 200 || json.Unmarshal(body, &rp) != nil || page > 2 {
			t.Fatalf("ranks page %d: %d %s", page, resp.StatusCode, body)
		}
		if cc := resp.Header.Get("Cache-Control"); cc != "public, max-age=300" || resp.Header.Get("ETag") == "" {
			t.Errorf("ranks: Cache-Control %q, ETag %q", cc, resp.Header.Get("ETag"))
		}
		if r2, _ := getFrom(t, srv.URL+"/v1/players/"+p+"/ranks?limit=4&cursor="+cursor, "If-None-Match", resp.Header.Get("ETag")); r2.StatusCode != http.StatusNotModified {
			t.Errorf("ranks with If-None-Match: %d, want 304", r2.StatusCode)
		}
		for _, r := range rp.Ranks {
			ranks = append(ranks, r.SnapshotDate+" "+r.QueueType)
		}
		if cursor = rp.Next; cursor == "" {
			break
		}
	}
	want := []string{"2026-11-22 RANKED_SOLO_5x5", "2026-11-22 RANKED_FLEX_SR", "2026-11-21 RANKED_SOLO_5x5",
		"2026-11-21 RANKED_FLEX_SR", "2026-11-20 RANKED_SOLO_5x5", "2026-11-20 RANKED_FLEX_SR"}
	if !reflect.DeepEqual(ranks, want) {
		t.Errorf("ranks %v, want %v", ranks, want)
	}

	resp, body := getFrom(t, srv.URL+"/v1/players/"+p+"/reports?limit=2")
	var rp reportsPage
	if resp.StatusCode != 200 || json.Unmarshal(body, &rp) != nil || len(rp.Reports) != 2 || rp.Next == "" ||
		rp.Reports[0].WeekStart != "2026-11-20" || rp.Reports[1].WeekStart != "2026-11-13" || rp.Reports[0].Games != 1 ||
		rp.Reports[0].LPChange == nil || *rp.Reports[0].LPChange != 17 || !strings.Contains(string(rp.Reports[0].TopChampions), "Ahri") {
		t.Fatalf("reports page 1: %d %s", resp.StatusCode, body)
	}
	resp, body = getFrom(t, srv.URL+"/v1/players/"+p+"/reports?limit=2&cursor="+rp.Next)
	rp = reportsPage{}
	if err := json.Unmarshal(body, &rp); resp.StatusCode != 200 || err != nil || len(rp.Reports) != 1 ||
		rp.Reports[0].WeekStart != "2026-11-06" || rp.Next != "" {
		t.Errorf("reports page 2: %d %s", resp.StatusCode, body)
	}
	for path, code := range map[string]int{"/ranks?limit=0": 400, "/ranks?cursor=bm9wZQ": 400, "/reports?limit=101": 400, "/reports?cursor=%21": 400} {
		if resp, _ := getFrom(t, srv.URL+"/v1/players/"+p+path); resp.StatusCode != code || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("GET %s: %d %s, want %d problem+json", path, resp.StatusCode, resp.Header.Get("Content-Type"), code)
		}
	}

	// riftflow show reads the same (the player must have an account row).
	if err := st.UpsertAccount(h.ctx, store.Account{PUUID: p, Platform: "na1"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", h.st.Infra.Env.Postgres.URL.Reveal())
	for flag, n := range map[string]int{"--ranks": 6, "--reports": 3} {
		var out, errOut bytes.Buffer
		if rc := Main([]string{"show", "--puuid", p, flag}, &out, &errOut); rc != 0 {
			t.Fatalf("riftflow show %s: %d %s", flag, rc, errOut.String())
		}
		if got := strings.Count(out.String(), `"snapshot_date"`) + strings.Count(out.String(), `"week_start"`); got != n {
			t.Errorf("riftflow show %s: %d rows, want %d:\n%s", flag, got, n, out.String())
		}
	}
}

// storeMatch inserts a visible match row (and, when timeline is not nil,
// its timeline) straight into Postgres.
func storeMatch(t *testing.T, h *harness, id string, match, timeline []byte) {
	t.Helper()
	pool := h.db
	if _, err := pool.Exec(h.ctx, `INSERT INTO matches (match_id, raw) VALUES ($1, $2::text::json)`, id, string(match)); err != nil {
		t.Fatal(err)
	}
	if timeline != nil {
		if _, err := pool.Exec(h.ctx, `INSERT INTO match_timelines (match_id, raw) VALUES ($1, $2::text::json)`, id, string(timeline)); err != nil {
			t.Fatal(err)
		}
	}
}

// randomJSON is a JSON document of about n bytes that gzip shrinks only
// about twofold (hex digits of random bytes).
func randomJSON(n int) []byte {
	b := make([]byte, n/2)
	rand.Read(b)
	return []byte(`{"noise":"` + hex.EncodeToString(b) + `"}`)
}

// TestReadCacheSharedByReplicas: two API replicas (two NewAPI, each with
// its own in-process layer) share one cache: a match read through one is
// answered by the other from the read-cache bucket after its row is gone
// from Postgres; an erasure's purge on one replica drops the entry from
// the other's in-process layer too (its watcher); the shared entry carries
// its TTL (Nats-TTL) and the in-process copy expires with it.
func TestReadCacheSharedByReplicas(t *testing.T) {
	h := startHarness(t, harnessOptions{noRun: true})
	doc := []byte(`{"metadata":{"matchId":"NA1_71"},"info":{"gameMode":"CLASSIC"}}`)
	storeMatch(t, h, "NA1_71", doc, nil)
	a1, a2 := NewAPI(h.st.Infra), NewAPI(h.st.Infra)
	s1 := httptest.NewServer(withToken(t, h.st.Infra, a1.Handler(), ScopeRead))
	s2 := httptest.NewServer(withToken(t, h.st.Infra, a2.Handler(), ScopeRead))
	t.Cleanup(s1.Close)
	t.Cleanup(s2.Close)

	if resp, body := getFrom(t, s1.URL+"/v1/matches/NA1_71"); resp.StatusCode != 200 || !bytes.Equal(body, doc) {
		t.Fatalf("replica 1: %d %s", resp.StatusCode, body)
	}
	if _, err := h.db.Exec(h.ctx, `DELETE FROM matches WHERE match_id = 'NA1_71'`); err != nil {
		t.Fatal(err)
	}
	resp, body := getFrom(t, s2.URL+"/v1/matches/NA1_71")
	if resp.StatusCode != 200 || !bytes.Equal(body, doc) || a2.cache.sharedHits.Load() != 1 || a2.cache.misses.Load() != 0 {
		t.Fatalf("replica 2 after the row is gone: %d %s (shared hits %d, misses %d), want the shared entry",
			resp.StatusCode, body, a2.cache.sharedHits.Load(), a2.cache.misses.Load())
	}
	// A client taking gzip gets the stored gzip bytes, tagged apart.
	req, _ := http.NewRequest("GET", s2.URL+"/v1/matches/NA1_71", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	gz, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	gz.Body.Close()
	if gz.Header.Get("Content-Encoding") != "gzip" || !strings.HasSuffix(gz.Header.Get("ETag"), `-gz"`) || a2.cache.localHits.Load() != 1 {
		t.Errorf("gzip answer: Content-Encoding %q, ETag %q, local hits %d", gz.Header.Get("Content-Encoding"), gz.Header.Get("ETag"), a2.cache.localHits.Load())
	}
	// The shared entry has design 002's one-day TTL.
	kv, err := h.st.Infra.JS.KeyValue(h.ctx, streams.BucketReadCache)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(h.ctx, matchCacheKey("m", "NA1_71"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := h.st.Infra.JS.Stream(h.ctx, "KV_"+streams.BucketReadCache)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := s.GetMsg(h.ctx, e.Revision())
	if err != nil || raw.Header.Get("Nats-TTL") != MatchCacheTTL.String() {
		t.Errorf("the shared entry's Nats-TTL is %q (%v), want one day", raw.Header.Get("Nats-TTL"), err)
	}
	// An erasure on replica 1 reaches replica 2's in-process layer.
	if _, ok := a2.cache.local.GetIfPresent(matchCacheKey("m", "NA1_71")); !ok {
		t.Fatal("replica 2 did not keep the entry in process")
	}
	if n, err := a1.cache.purge(h.ctx, []string{matchCacheKey("m", "NA1_71")}); err != nil || n != 1 {
		t.Fatalf("purge: %d %v", n, err)
	}
	waitFor(t, "replica 2 to drop the purged entry", 10*time.Second, func() bool {
		_, ok := a2.cache.local.GetIfPresent(matchCacheKey("m", "NA1_71"))
		return !ok
	})
	if resp, _ := getFrom(t, s2.URL+"/v1/matches/NA1_71"); resp.StatusCode != 404 {
		t.Errorf("after the purge replica 2 answers %d, want 404 (the row is gone)", resp.StatusCode)
	}
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestReadCacheTTL: with a 1-second TTL, the in-process copy ends at the
// TTL on the (injected) clock, and the shared entry is removed by the NATS
// server, after which the body is loaded again.
func TestReadCacheTTL(t *testing.T) {
	h := startHarness(t, harnessOptions{noRun: true})
	c := newReadCache(h.ctx, h.st.Infra.JS, 1<<20, h.st.Infra.Log)
	clock := &fakeClock{t: time.Now()}
	c.now = clock.Now
	loads := 0
	load := func(context.Context) ([]byte, error) { loads++; return []byte(`{"n":1}`), nil }
	get := func() {
		t.Helper()
		if _, err := c.get(h.ctx, "t.NA1_ttl", time.Second, load); err != nil {
			t.Fatal(err)
		}
	}
	get()
	get()
	if loads != 1 || c.localHits.Load() != 1 {
		t.Fatalf("loads %d, local hits %d; want 1 and 1", loads, c.localHits.Load())
	}
	clock.Add(2 * time.Second)
	get()
	if c.localHits.Load() != 1 {
		t.Errorf("an in-process copy past its TTL was served")
	}
	waitFor(t, "the server to expire the shared entry", 30*time.Second, func() bool {
		_, err := c.kv.Get(h.ctx, "t.NA1_ttl")
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	clock.Add(2 * time.Second)
	before := loads
	get()
	if loads != before+1 {
		t.Errorf("after the shared entry expired: %d loads, want %d", loads, before+1)
	}
}

// TestReadCacheByteBound (issue 27 finding 7): the in-process layer is
// bounded in bytes, not entries: 48 distinct timeline GETs of ~200 KB
// each (gzip ~100 KB) through an API whose layer holds 1 MiB leave at most
// 1 MiB in process; a body over an eighth of the bound is not held at all.
func TestReadCacheByteBound(t *testing.T) {
	h := startHarness(t, harnessOptions{noRun: true})
	const budget = 1 << 20
	t.Setenv("API_READ_CACHE_MEMORY_BYTES", fmt.Sprint(budget))
	for i := range 48 {
		storeMatch(t, h, fmt.Sprintf("NA1_%d", 100+i), []byte(`{}`), randomJSON(200<<10))
	}
	a := NewAPI(h.st.Infra)
	srv := httptest.NewServer(withToken(t, h.st.Infra, a.Handler(), ScopeRead))
	t.Cleanup(srv.Close)
	for i := range 48 {
		if resp, _ := getFrom(t, fmt.Sprintf("%s/v1/matches/NA1_%d/timeline", srv.URL, 100+i)); resp.StatusCode != 200 {
			t.Fatalf("timeline %d: %d", i, resp.StatusCode)
		}
	}
	a.cache.local.CleanUp()
	held, n := a.cache.local.WeightedSize(), a.cache.local.EstimatedSize()
	t.Logf("in process: %d entries, %d bytes (bound %d); all 48 gzip bodies: ~%d KB", n, held, budget, 48*100)
	if held > budget || n >= 48 {
		t.Errorf("in process: %d entries, %d bytes; want at most %d bytes", n, held, budget)
	}
	// One body over budget/8 is never held in process.
	storeMatch(t, h, "NA1_999", []byte(`{}`), randomJSON(400<<10))
	if resp, _ := getFrom(t, srv.URL+"/v1/matches/NA1_999/timeline"); resp.StatusCode != 200 {
		t.Fatalf("big timeline: %d", resp.StatusCode)
	}
	if _, ok := a.cache.local.GetIfPresent(matchCacheKey("t", "NA1_999")); ok {
		t.Error("a body over an eighth of the bound is held in process")
	}
}

// TestReadCacheOversizedBody: a body whose gzip is larger than the
// server's max_payload is served whole, and cached nowhere.
func TestReadCacheOversizedBody(t *testing.T) {
	h := startHarness(t, harnessOptions{noRun: true})
	max := int(h.st.Infra.NC.MaxPayload())
	doc := randomJSON(3 * max) // hex of random bytes: gzip ~1.5 max
	storeMatch(t, h, "NA1_5", []byte(`{}`), doc)
	a := NewAPI(h.st.Infra)
	if a.cache.maxValue != min(max, 1<<20)-kvPutOverhead {
		t.Errorf("largest shared value %d, want the server's max_payload %d (or the bucket's max_value_size) less %d", a.cache.maxValue, max, kvPutOverhead)
	}
	srv := httptest.NewServer(withToken(t, h.st.Infra, a.Handler(), ScopeRead))
	t.Cleanup(srv.Close)
	for i := range 2 {
		if resp, body := getFrom(t, srv.URL+"/v1/matches/NA1_5/timeline"); resp.StatusCode != 200 || !bytes.Equal(body, doc) {
			t.Fatalf("GET %d: %d, %d bytes, want the %d-byte document", i, resp.StatusCode, len(body), len(doc))
		}
	}
	if a.cache.oversized.Load() != 2 || a.cache.misses.Load() != 2 {
		t.Errorf("oversized %d, misses %d; want 2 and 2 (served uncached)", a.cache.oversized.Load(), a.cache.misses.Load())
	}
	kv, _ := h.st.Infra.JS.KeyValue(h.ctx, streams.BucketReadCache)
	if _, err := kv.Get(h.ctx, matchCacheKey("t", "NA1_5")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the oversized body is in the bucket: %v", err)
	}
}

// TestReadCacheHeapBound (issue 27 finding 7, measured): 100 distinct
// GETs of the largest recorded timeline (1.7 MB of JSON) grow the heap by
// at most twice the in-process bound (4 MiB here; the 100 gzip bodies
// are 10.6 MB), where a cache of 2,000 whole bodies held all 164 MiB of
// them.
func TestReadCacheHeapBound(t *testing.T) {
	body, err := os.ReadFile(filepath.Join("..", "..", "testdata", "riot-fixtures", "timeline", "NA1_3988447001.json"))
	if err != nil {
		t.Skip("no recorded fixtures:", err)
	}
	const budget, gets = 4 << 20, 100
	c := newReadCache(context.Background(), nil, budget, slog.Default())
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range gets {
		if _, err := c.get(context.Background(), fmt.Sprintf("t.NA1_%d", i), MatchCacheTTL, func(context.Context) ([]byte, error) {
			return bytes.Clone(body), nil // as Postgres hands a fresh copy each time
		}); err != nil {
			t.Fatal(err)
		}
	}
	c.local.CleanUp()
	runtime.GC()
	runtime.ReadMemStats(&after)
	growth := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d distinct %d-byte timelines: heap +%.1f MiB, in process %d entries, %.1f MiB (bound %d MiB); whole bodies would be %.0f MiB",
		gets, len(body), float64(growth)/(1<<20), c.local.EstimatedSize(), float64(c.local.WeightedSize())/(1<<20), budget>>20,
		float64(gets*len(body))/(1<<20))
	if growth > 2*budget || c.local.WeightedSize() > budget {
		t.Errorf("heap grew by %d bytes, in process %d bytes; want at most %d and %d", growth, c.local.WeightedSize(), 2*budget, budget)
	}
}
