package api

// The read API's cache: shared by API replicas in the read-cache KV
// bucket, per-key TTLs, an in-process layer bounded in bytes, bodies too
// large for a NATS message served uncached.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/services/riftflow/api/apitest"
	"github.com/riftflow/riftflow/streams"
)

// storeMatch inserts a visible match row (and, when timeline is not nil,
// its timeline) straight into Postgres.
func storeMatch(t *testing.T, e *stagetest.Env, id string, match, timeline []byte) {
	t.Helper()
	pool := e.DB
	if _, err := pool.Exec(t.Context(), `INSERT INTO matches (match_id, raw) VALUES ($1, $2::text::json)`, id, string(match)); err != nil {
		t.Fatal(err)
	}
	if timeline != nil {
		if _, err := pool.Exec(t.Context(), `INSERT INTO match_timelines (match_id, raw) VALUES ($1, $2::text::json)`, id, string(timeline)); err != nil {
			t.Fatal(err)
		}
	}
}

// randomJSON is a JSON document of about n bytes that gzip shrinks only
// about twofold (hex digits of random bytes).
func randomJSON(n int) []byte { return []byte(`{"noise":"` + randHex(n/2) + `"}`) }

// TestReadCacheSharedByReplicas: two API replicas (two New, each with
// its own in-process layer) share one cache: a match read through one is
// answered by the other from the read-cache bucket after its row is gone
// from Postgres; an erasure's purge on one replica drops the entry from
// the other's in-process layer too (its watcher); the shared entry carries
// its TTL (Nats-TTL) and the in-process copy expires with it.
func TestReadCacheSharedByReplicas(t *testing.T) {
	e := newEnv(t)
	doc := []byte(`{"metadata":{"matchId":"NA1_71"},"info":{"gameMode":"CLASSIC"}}`)
	storeMatch(t, e, "NA1_71", doc, nil)
	a1, a2 := newAPI(e), newAPI(e)
	s1, s2 := serveWithToken(t, e, a1, ScopeRead), serveWithToken(t, e, a2, ScopeRead)

	if resp, body := apitest.Get(t, s1.URL+"/v1/matches/NA1_71"); resp.StatusCode != 200 || !bytes.Equal(body, doc) {
		t.Fatalf("replica 1: %d %s", resp.StatusCode, body)
	}
	if _, err := e.DB.Exec(t.Context(), `DELETE FROM matches WHERE match_id = 'NA1_71'`); err != nil {
		t.Fatal(err)
	}
	resp, body := apitest.Get(t, s2.URL+"/v1/matches/NA1_71")
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
	kv, err := e.Process.JS.KeyValue(t.Context(), streams.BucketReadCache)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(t.Context(), matchCacheKey("m", "NA1_71"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.Process.JS.Stream(t.Context(), "KV_"+streams.BucketReadCache)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := s.GetMsg(t.Context(), entry.Revision())
	if err != nil || raw.Header.Get("Nats-TTL") != MatchCacheTTL.String() {
		t.Errorf("the shared entry's Nats-TTL is %q (%v), want one day", raw.Header.Get("Nats-TTL"), err)
	}
	// An erasure on replica 1 reaches replica 2's in-process layer.
	if _, ok := a2.cache.local.GetIfPresent(matchCacheKey("m", "NA1_71")); !ok {
		t.Fatal("replica 2 did not keep the entry in process")
	}
	if n, err := a1.cache.purge(t.Context(), []string{matchCacheKey("m", "NA1_71")}); err != nil || n != 1 {
		t.Fatalf("purge: %d %v", n, err)
	}
	e.Wait("replica 2 to drop the purged entry", func() bool {
		_, ok := a2.cache.local.GetIfPresent(matchCacheKey("m", "NA1_71"))
		return !ok
	})
	if resp, _ := apitest.Get(t, s2.URL+"/v1/matches/NA1_71"); resp.StatusCode != 404 {
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
	e := newEnv(t)
	c := newReadCache(t.Context(), e.Process.JS, 1<<20, e.Process.Log)
	clock := &fakeClock{t: time.Now()}
	c.now = clock.Now
	loads := 0
	load := func(context.Context) ([]byte, error) { loads++; return []byte(`{"n":1}`), nil }
	get := func() {
		t.Helper()
		if _, err := c.get(t.Context(), "t.NA1_ttl", time.Second, load); err != nil {
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
	e.Wait("the server to expire the shared entry", func() bool {
		_, err := c.kv.Get(t.Context(), "t.NA1_ttl")
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
	e := newEnv(t)
	const budget = 1 << 20
	t.Setenv("API_READ_CACHE_MEMORY_BYTES", fmt.Sprint(budget))
	for i := range 48 {
		storeMatch(t, e, fmt.Sprintf("NA1_%d", 100+i), []byte(`{}`), randomJSON(200<<10))
	}
	a := newAPI(e)
	srv := serveWithToken(t, e, a, ScopeRead)
	for i := range 48 {
		if resp, _ := apitest.Get(t, fmt.Sprintf("%s/v1/matches/NA1_%d/timeline", srv.URL, 100+i)); resp.StatusCode != 200 {
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
	storeMatch(t, e, "NA1_999", []byte(`{}`), randomJSON(400<<10))
	if resp, _ := apitest.Get(t, srv.URL+"/v1/matches/NA1_999/timeline"); resp.StatusCode != 200 {
		t.Fatalf("big timeline: %d", resp.StatusCode)
	}
	if _, ok := a.cache.local.GetIfPresent(matchCacheKey("t", "NA1_999")); ok {
		t.Error("a body over an eighth of the bound is held in process")
	}
}

// TestReadCacheOversizedBody: a body whose gzip is larger than the
// server's max_payload is served whole, and cached nowhere.
func TestReadCacheOversizedBody(t *testing.T) {
	e := newEnv(t)
	max := int(e.Process.NC.MaxPayload())
	doc := randomJSON(3 * max) // hex of random bytes: gzip ~1.5 max
	storeMatch(t, e, "NA1_5", []byte(`{}`), doc)
	a := newAPI(e)
	if a.cache.maxValue != min(max, 1<<20)-kvPutOverhead {
		t.Errorf("largest shared value %d, want the server's max_payload %d (or the bucket's max_value_size) less %d", a.cache.maxValue, max, kvPutOverhead)
	}
	srv := serveWithToken(t, e, a, ScopeRead)
	for i := range 2 {
		if resp, body := apitest.Get(t, srv.URL+"/v1/matches/NA1_5/timeline"); resp.StatusCode != 200 || !bytes.Equal(body, doc) {
			t.Fatalf("GET %d: %d, %d bytes, want the %d-byte document", i, resp.StatusCode, len(body), len(doc))
		}
	}
	if a.cache.oversized.Load() != 2 || a.cache.misses.Load() != 2 {
		t.Errorf("oversized %d, misses %d; want 2 and 2 (served uncached)", a.cache.oversized.Load(), a.cache.misses.Load())
	}
	kv, _ := e.Process.JS.KeyValue(t.Context(), streams.BucketReadCache)
	if _, err := kv.Get(t.Context(), matchCacheKey("t", "NA1_5")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the oversized body is in the bucket: %v", err)
	}
}

// TestReadCacheHeapBound (issue 27 finding 7, measured): 100 distinct
// GETs of the largest recorded timeline (1.7 MB of JSON) grow the heap by
// at most twice the in-process bound (4 MiB here; the 100 gzip bodies
// are 10.6 MB), where a cache of 2,000 whole bodies held all 164 MiB of
// them.
func TestReadCacheHeapBound(t *testing.T) {
	body, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "riot-fixtures", "timeline", "NA1_3988447001.json"))
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
