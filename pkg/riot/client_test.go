package riot

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const testKey = "RGAPI-00000000-test-key-secret"

// testLimiter is a Limiter double: it admits everything at once (or returns
// err), records each Call, and checks that every Permit is settled exactly once.
type testLimiter struct {
	t   *testing.T
	err error

	mu      sync.Mutex
	calls   []Call
	done    []int // statuses passed to Done
	cancels int
	headers []http.Header
}

func (l *testLimiter) Acquire(ctx context.Context, c Call) (Permit, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, c)
	if l.err != nil {
		return nil, l.err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &testPermit{l: l}, nil
}

func (l *testLimiter) snapshot() (calls []Call, done []int, cancels int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Call(nil), l.calls...), append([]int(nil), l.done...), l.cancels
}

type testPermit struct {
	l       *testLimiter
	settled atomic.Bool
}

func (p *testPermit) Done(status int, h http.Header) {
	if p.settled.Swap(true) {
		p.l.t.Errorf("permit settled twice (Done %d)", status)
	}
	p.l.mu.Lock()
	p.l.done = append(p.l.done, status)
	p.l.headers = append(p.l.headers, h)
	p.l.mu.Unlock()
}

func (p *testPermit) Send() bool { return true }
func (p *testPermit) Written()   {}

func (p *testPermit) Cancel() {
	if p.settled.Swap(true) {
		p.l.t.Errorf("permit settled twice (Cancel)")
	}
	p.l.mu.Lock()
	p.l.cancels++
	p.l.mu.Unlock()
}

// fakeRiot is an httptest server whose answers the test scripts per request.
type fakeRiot struct {
	*httptest.Server
	hits    atomic.Int32
	mu      sync.Mutex
	reqs    []*http.Request
	handler http.HandlerFunc
}

func newFakeRiot(t *testing.T, h http.HandlerFunc) *fakeRiot {
	t.Helper()
	f := &fakeRiot{handler: h}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.hits.Add(1)
		f.mu.Lock()
		f.reqs = append(f.reqs, r.Clone(context.Background()))
		h := f.handler
		f.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeRiot) setHandler(h http.HandlerFunc) {
	f.mu.Lock()
	f.handler = h
	f.mu.Unlock()
}

func (f *fakeRiot) lastRequest(t *testing.T) *http.Request {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) == 0 {
		t.Fatal("no request reached the server")
	}
	return f.reqs[len(f.reqs)-1]
}

// sleepRecorder replaces Config.Sleep: it records waits and returns at once.
type sleepRecorder struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (s *sleepRecorder) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.waits = append(s.waits, d)
	s.mu.Unlock()
	return ctx.Err()
}

var fixedNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newTestClient(t *testing.T, f *fakeRiot, mod func(*Config)) (*Client, *testLimiter, *sleepRecorder) {
	t.Helper()
	lim := &testLimiter{t: t}
	sl := &sleepRecorder{}
	cfg := Config{
		APIKey:  testKey,
		BaseURL: f.URL + "/{route}",
		Limiter: lim,
		Timeout: 2 * time.Second,
		Logger:  slog.New(slog.DiscardHandler),
		Now:     func() time.Time { return fixedNow },
		Sleep:   sl.sleep,
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, lim, sl
}

func kindOf(t *testing.T, err error) *Error {
	t.Helper()
	var re *Error
	if !errors.As(err, &re) {
		t.Fatalf("error %v (%T) is not a *riot.Error", err, err)
	}
	if strings.Contains(err.Error(), testKey) {
		t.Errorf("error text contains the API key: %v", err)
	}
	return re
}

func gzipBytes(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

const puuid = "jkxCVExyvEawqoKz-BfIgcvOyT4z8YbYmRSISvxObtrq-JAfX8mCJ4OpEvQ_b9aHJRLZ-NNIfhHr8g"

func TestNewValidates(t *testing.T) {
	lim := &testLimiter{t: t}
	for name, cfg := range map[string]Config{
		"no key":        {Limiter: lim},
		"blank key":     {APIKey: "  ", Limiter: lim},
		"no limiter":    {APIKey: testKey},
		"no {route}":    {APIKey: testKey, Limiter: lim, BaseURL: "https://na1.api.riotgames.com"},
		"bad scheme":    {APIKey: testKey, Limiter: lim, BaseURL: "ftp://{route}.example"},
		"query":         {APIKey: testKey, Limiter: lim, BaseURL: "https://{route}.example?api_key=x"},
		"no host":       {APIKey: testKey, Limiter: lim, BaseURL: "http:///{route}"},
		"credentials":   {APIKey: testKey, Limiter: lim, BaseURL: "https://u:p@{route}.example"},
		"unparsable":    {APIKey: testKey, Limiter: lim, BaseURL: "http://[::1/{route}"},
		"relative path": {APIKey: testKey, Limiter: lim, BaseURL: "/{route}"},
	} {
		c, err := New(cfg)
		if err == nil {
			t.Errorf("%s: New succeeded", name)
			continue
		}
		if c != nil {
			t.Errorf("%s: non-nil client with error", name)
		}
		if strings.Contains(err.Error(), testKey) {
			t.Errorf("%s: error contains key", name)
		}
	}
	for _, base := range []string{"", DefaultBaseURL, "http://127.0.0.1:8080/{route}", "http://127.0.0.1:8080/{route}/"} {
		if _, err := New(Config{APIKey: testKey, Limiter: lim, BaseURL: base}); err != nil {
			t.Errorf("New(BaseURL %q): %v", base, err)
		}
	}
}

func TestAccountByRiotIDRequest(t *testing.T) {
	body := []byte(`{"puuid":"` + puuid + `","gameName":"SSG Xayah/ü","tagLine":"NA1"}`)
	f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("X-App-Rate-Limit", "20:1,100:120")
		w.Write(gzipBytes(t, body))
	})
	c, lim, _ := newTestClient(t, f, nil)
	acc, err := c.AccountByRiotID(context.Background(), Europe, RiotID{GameName: "SSG Xayah/ü", TagLine: "NA1"})
	if err != nil {
		t.Fatal(err)
	}
	if acc.PUUID != puuid || acc.GameName != "SSG Xayah/ü" || acc.RiotID().String() != "SSG Xayah/ü#NA1" {
		t.Errorf("account = %+v", acc)
	}
	r := f.lastRequest(t)
	if got, want := r.URL.EscapedPath(), "/europe/riot/account/v1/accounts/by-riot-id/SSG%20Xayah%2F%C3%BC/NA1"; got != want {
		t.Errorf("path = %s, want %s", got, want)
	}
	if got := r.Header.Get("X-Riot-Token"); got != testKey {
		t.Errorf("X-Riot-Token = %q", got)
	}
	if got := r.Header.Get("Accept-Encoding"); got != "gzip" {
		t.Errorf("Accept-Encoding = %q, want gzip", got)
	}
	if strings.Contains(r.URL.String(), testKey) || r.URL.RawQuery != "" {
		t.Errorf("key or query in URL: %s", r.URL)
	}
	calls, done, cancels := lim.snapshot()
	if len(calls) != 1 || calls[0] != (Call{Route: "europe", Method: MethodAccountByRiotID}) {
		t.Errorf("limiter calls = %+v", calls)
	}
	if len(done) != 1 || done[0] != 200 || cancels != 0 {
		t.Errorf("permits: done=%v cancels=%d", done, cancels)
	}
	if lim.headers[0].Get("X-App-Rate-Limit") != "20:1,100:120" {
		t.Errorf("limiter did not get the response headers: %v", lim.headers[0])
	}
}

func TestEndpointsPathsAndDecoding(t *testing.T) {
	matchBody, err := os.ReadFile(filepath.Join("testdata", "match_JP1_456819992.json"))
	if err != nil {
		t.Fatal(err)
	}
	tlBody, err := os.ReadFile(filepath.Join("testdata", "timeline_EUW1_6834713231.json"))
	if err != nil {
		t.Fatal(err)
	}
	f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case p == "/asia/lol/match/v5/matches/JP1_456819992":
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(gzipBytes(t, matchBody))
		case p == "/europe/lol/match/v5/matches/EUW1_6834713231/timeline":
			w.Write(tlBody) // uncompressed is fine too
		case p == "/jp1/lol/league/v4/entries/by-puuid/"+puuid:
			w.Write([]byte(`[{"leagueId":"x","puuid":"` + puuid + `","queueType":"RANKED_SOLO_5x5","tier":"GOLD","rank":"II","leaguePoints":42,"wins":10.0,"losses":9,"hotStreak":true,"veteran":false,"freshBlood":false,"inactive":false}]`))
		case p == "/americas/riot/account/v1/accounts/by-puuid/"+puuid:
			w.Write([]byte(`{"puuid":"` + puuid + `"}`))
		case p == "/asia/lol/match/v5/matches/by-puuid/"+puuid+"/ids":
			w.Write([]byte(`["JP1_2","JP1_1"]`))
		default:
			http.NotFound(w, r)
		}
	})
	c, lim, _ := newTestClient(t, f, nil)
	ctx := context.Background()

	m, raw, err := c.Match(ctx, Asia, "JP1_456819992")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, matchBody) || m.Metadata.MatchID != "JP1_456819992" || len(m.Info.Participants) != 1 || m.Info.QueueID != 1810 {
		t.Errorf("Match: raw equal=%v id=%s", bytes.Equal(raw, matchBody), m.Metadata.MatchID)
	}
	tl, raw, err := c.Timeline(ctx, Europe, "EUW1_6834713231")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, tlBody) || len(tl.Info.Participants) != 0 || len(tl.Info.Frames) != 1 {
		t.Errorf("Timeline: participants=%d frames=%d", len(tl.Info.Participants), len(tl.Info.Frames))
	}
	es, err := c.LeagueEntriesByPUUID(ctx, "jp1", puuid)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || es[0].LeaguePoints != 42 || es[0].Wins != 10 || !es[0].HotStreak {
		t.Errorf("league = %+v", es)
	}
	acc, err := c.AccountByPUUID(ctx, Americas, puuid)
	if err != nil || acc.PUUID != puuid || acc.GameName != "" {
		t.Errorf("AccountByPUUID = %+v, %v", acc, err)
	}
	ids, err := c.MatchIDsByPUUID(ctx, Asia, puuid, MatchIDsQuery{})
	if err != nil || len(ids) != 2 || ids[0] != "JP1_2" {
		t.Errorf("MatchIDsByPUUID = %v, %v", ids, err)
	}
	calls, _, _ := lim.snapshot()
	wantMethods := []string{MethodMatch, MethodTimeline, MethodLeagueEntriesByPUUID, MethodAccountByPUUID, MethodMatchIDsByPUUID}
	wantRoutes := []string{"asia", "europe", "jp1", "americas", "asia"}
	for i, call := range calls {
		if call.Method != wantMethods[i] || call.Route != wantRoutes[i] {
			t.Errorf("call %d = %+v, want %s on %s", i, call, wantMethods[i], wantRoutes[i])
		}
	}
}

func TestInvalidArgumentsSendNothing(t *testing.T) {
	f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`[]`)) })
	c, lim, _ := newTestClient(t, f, nil)
	ctx := context.Background()
	q := func(mod func(*MatchIDsQuery)) MatchIDsQuery {
		var m MatchIDsQuery
		mod(&m)
		return m
	}
	neg := -1
	cases := map[string]func() error{
		"count 101": func() error {
			_, err := c.MatchIDsByPUUID(ctx, Asia, puuid, q(func(m *MatchIDsQuery) { m.Count = 101 }))
			return err
		},
		"count -1": func() error {
			_, err := c.MatchIDsByPUUID(ctx, Asia, puuid, q(func(m *MatchIDsQuery) { m.Count = -1 }))
			return err
		},
		"start -1": func() error {
			_, err := c.MatchIDsByPUUID(ctx, Asia, puuid, q(func(m *MatchIDsQuery) { m.Start = -1 }))
			return err
		},
		"startTime in ms": func() error {
			_, err := c.MatchIDsByPUUID(ctx, Asia, puuid, q(func(m *MatchIDsQuery) { m.StartTime = 1_700_000_000_000 }))
			return err
		},
		"end before start": func() error {
			_, err := c.MatchIDsByPUUID(ctx, Asia, puuid, q(func(m *MatchIDsQuery) { m.StartTime, m.EndTime = 20, 10 }))
			return err
		},
		"bad type": func() error {
			_, err := c.MatchIDsByPUUID(ctx, Asia, puuid, q(func(m *MatchIDsQuery) { m.Type = "aram" }))
			return err
		},
		"negative queue": func() error {
			_, err := c.MatchIDsByPUUID(ctx, Asia, puuid, q(func(m *MatchIDsQuery) { m.Queue = &neg }))
			return err
		},
		"empty puuid":       func() error { _, err := c.MatchIDsByPUUID(ctx, Asia, "", MatchIDsQuery{}); return err },
		"bad region":        func() error { _, err := c.MatchIDsByPUUID(ctx, "mars", puuid, MatchIDsQuery{}); return err },
		"account on sea":    func() error { _, err := c.AccountByPUUID(ctx, SEA, puuid); return err },
		"empty tag":         func() error { _, err := c.AccountByRiotID(ctx, Asia, RiotID{GameName: "x"}); return err },
		"match wrong route": func() error { _, _, err := c.Match(ctx, Europe, "NA1_4223689858"); return err },
		"match bad id":      func() error { _, _, err := c.Match(ctx, Americas, "NA1_42x"); return err },
		"timeline bad id":   func() error { _, _, err := c.Timeline(ctx, Americas, "4223689858"); return err },
		"unknown platform":  func() error { _, err := c.LeagueEntriesByPUUID(ctx, "xx1", puuid); return err },
	}
	for name, call := range cases {
		if e := kindOf(t, call()); e.Kind != KindBadRequest {
			t.Errorf("%s: kind %v, want bad_request", name, e.Kind)
		}
	}
	if n := f.hits.Load(); n != 0 {
		t.Errorf("%d requests reached the server", n)
	}
	if calls, _, _ := lim.snapshot(); len(calls) != 0 {
		t.Errorf("limiter consulted %d times", len(calls))
	}
}

func TestMatchIDsQueryParameters(t *testing.T) {
	f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`["NA1_1"]`)) })
	c, _, _ := newTestClient(t, f, nil)
	queue := 420
	_, err := c.MatchIDsByPUUID(context.Background(), Americas, puuid, MatchIDsQuery{
		Start: 100, Count: 100, StartTime: 1_700_000_000, EndTime: 1_700_086_400, Queue: &queue, Type: "ranked",
	})
	if err != nil {
		t.Fatal(err)
	}
	got := f.lastRequest(t).URL.Query()
	want := map[string]string{"start": "100", "count": "100", "startTime": "1700000000", "endTime": "1700086400", "queue": "420", "type": "ranked"}
	for k, v := range want {
		if got.Get(k) != v {
			t.Errorf("query %s = %q, want %q", k, got.Get(k), v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("query = %v, want exactly %v", got, want)
	}
	// Zero values are omitted.
	if _, err := c.MatchIDsByPUUID(context.Background(), Americas, puuid, MatchIDsQuery{}); err != nil {
		t.Fatal(err)
	}
	if q := f.lastRequest(t).URL.RawQuery; q != "" {
		t.Errorf("empty query sent %q", q)
	}
}

func TestStatusKinds(t *testing.T) {
	cases := []struct {
		name    string
		status  int
		headers map[string]string
		body    string
		kind    Kind
	}{
		{"404 json", 404, nil, `{"status":{"message":"Data not found - match file not found","status_code":404}}`, KindNotFound},
		{"404 no body", 404, nil, "", KindNotFound},
		{"400", 400, nil, `{"status":{"message":"Bad Request - Exception decrypting x","status_code":400}}`, KindBadRequest},
		{"405", 405, nil, "", KindBadRequest},
		{"415", 415, nil, "<html>nope</html>", KindBadRequest},
		{"422", 422, nil, "", KindBadRequest},
		{"500", 500, nil, "", KindServer},
		{"502 html", 502, nil, "<html>Bad Gateway</html>", KindServer},
		{"503", 503, nil, `{"status":{"message":"Service unavailable","status_code":503}}`, KindServer},
		{"504", 504, nil, "", KindServer},
		{"429 app", 429, map[string]string{"Retry-After": "3", "X-Rate-Limit-Type": "application"}, "", KindRateLimited},
		{"429 service no headers", 429, nil, "", KindRateLimited},
		{"200 invalid json", 200, nil, `{"metadata":`, KindDecode},
		{"200 wrong shape", 200, nil, `{"foo":1}`, KindDecode},
		{"200 html", 200, nil, `<html></html>`, KindDecode},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.headers {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
				w.Write([]byte(tc.body))
			})
			c, lim, sl := newTestClient(t, f, func(c *Config) { c.MaxRetries = -1 })
			_, _, err := c.Match(context.Background(), Americas, "NA1_4223689858")
			e := kindOf(t, err)
			if e.Kind != tc.kind || e.Status != tc.status || e.Op != MethodMatch || e.Route != "americas" {
				t.Errorf("got %+v, want kind %v status %d", e, tc.kind, tc.status)
			}
			if tc.body != "" && strings.HasPrefix(tc.body, `{"status"`) && e.Msg == "" {
				t.Errorf("Riot's message not kept: %v", e)
			}
			_, done, cancels := lim.snapshot()
			if len(done) != 1 || done[0] != tc.status || cancels != 0 {
				t.Errorf("permit: done=%v cancels=%d, want one Done(%d)", done, cancels, tc.status)
			}
			if f.hits.Load() != 1 || len(sl.waits) != 0 {
				t.Errorf("hits=%d waits=%v, want one request and no retry", f.hits.Load(), sl.waits)
			}
			if r, _, _ := c.KeyRejected(); r {
				t.Error("key marked rejected")
			}
		})
	}
}

func TestRateLimitedRetryAt(t *testing.T) {
	cases := []struct {
		retryAfter string // "" = header absent
		limitType  string
		want       time.Duration
	}{
		{"3", "application", 3*time.Second + RetryAfterMargin},
		{"0", "method", RetryAfterMargin},
		{"1.5", "service", 2 * time.Second},
		{"", "", time.Second},     // missing: never "now", backoff from 1 s
		{"soon", "", time.Second}, // unparsable
		{"-4", "", time.Second},   // negative
		{fixedNow.Add(10 * time.Second).Format(http.TimeFormat), "server", 10*time.Second + RetryAfterMargin},
	}
	for _, tc := range cases {
		t.Run(tc.retryAfter+"/"+tc.limitType, func(t *testing.T) {
			f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) {
				if tc.retryAfter != "" {
					w.Header().Set("Retry-After", tc.retryAfter)
				}
				if tc.limitType != "" {
					w.Header().Set("X-Rate-Limit-Type", tc.limitType)
				}
				w.WriteHeader(429)
			})
			c, _, _ := newTestClient(t, f, func(c *Config) { c.MaxRetries = -1 })
			_, err := c.AccountByPUUID(context.Background(), Asia, puuid)
			e := kindOf(t, err)
			if e.Kind != KindRateLimited || e.LimitType != tc.limitType {
				t.Fatalf("got %+v", e)
			}
			if got := e.RetryAt.Sub(fixedNow); got != tc.want {
				t.Errorf("RetryAt = now+%v, want now+%v", got, tc.want)
			}
			if !e.Retryable() {
				t.Error("429 not retryable")
			}
		})
	}
}

func TestRateLimitRetries(t *testing.T) {
	t.Run("retried within budget", func(t *testing.T) {
		var n atomic.Int32
		f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) <= 2 {
				w.Header().Set("Retry-After", "2")
				w.Header().Set("X-Rate-Limit-Type", "method")
				w.WriteHeader(429)
				return
			}
			w.Write([]byte(`["NA1_1"]`))
		})
		c, lim, sl := newTestClient(t, f, nil) // MaxRetries default 2
		ids, err := c.MatchIDsByPUUID(context.Background(), Americas, puuid, MatchIDsQuery{})
		if err != nil || len(ids) != 1 {
			t.Fatalf("ids=%v err=%v", ids, err)
		}
		calls, done, _ := lim.snapshot()
		if len(calls) != 3 || fmt.Sprint(done) != "[429 429 200]" {
			t.Errorf("acquires=%d done=%v, want 3 and [429 429 200]", len(calls), done)
		}
		want := 2*time.Second + RetryAfterMargin
		if len(sl.waits) != 2 || sl.waits[0] != want || sl.waits[1] != want {
			t.Errorf("waits = %v, want two of %v", sl.waits, want)
		}
	})
	t.Run("missing Retry-After backs off exponentially then gives up", func(t *testing.T) {
		f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(429) })
		c, _, sl := newTestClient(t, f, nil)
		_, err := c.MatchIDsByPUUID(context.Background(), Americas, puuid, MatchIDsQuery{})
		e := kindOf(t, err)
		if e.Kind != KindRateLimited || f.hits.Load() != 3 {
			t.Errorf("kind=%v hits=%d, want rate_limited after 3 requests", e.Kind, f.hits.Load())
		}
		if fmt.Sprint(sl.waits) != "[1s 2s]" {
			t.Errorf("waits = %v, want [1s 2s]", sl.waits)
		}
		if got := e.RetryAt.Sub(fixedNow); got != 4*time.Second {
			t.Errorf("final RetryAt = now+%v, want now+4s", got)
		}
	})
	t.Run("not retried past the deadline", func(t *testing.T) {
		f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(429)
		})
		c, _, sl := newTestClient(t, f, func(c *Config) { c.Now = time.Now })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c.MatchIDsByPUUID(ctx, Americas, puuid, MatchIDsQuery{})
		if e := kindOf(t, err); e.Kind != KindRateLimited || f.hits.Load() != 1 || len(sl.waits) != 0 {
			t.Errorf("kind=%v hits=%d waits=%v, want one request, no wait", e.Kind, f.hits.Load(), sl.waits)
		}
	})
	t.Run("limiter refusal is returned, not retried", func(t *testing.T) {
		f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`[]`)) })
		c, lim, sl := newTestClient(t, f, nil)
		at := fixedNow.Add(time.Minute)
		lim.err = &Error{Kind: KindRateLimited, RetryAt: at, LimitType: "application"}
		_, err := c.MatchIDsByPUUID(context.Background(), Americas, puuid, MatchIDsQuery{})
		e := kindOf(t, err)
		if e.Kind != KindRateLimited || !e.RetryAt.Equal(at) || e.Op != MethodMatchIDsByPUUID || e.Route != "americas" {
			t.Errorf("got %+v", e)
		}
		if f.hits.Load() != 0 || len(sl.waits) != 0 {
			t.Errorf("hits=%d waits=%v", f.hits.Load(), sl.waits)
		}
	})
	t.Run("limiter context error", func(t *testing.T) {
		f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`[]`)) })
		c, _, _ := newTestClient(t, f, nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := c.MatchIDsByPUUID(ctx, Americas, puuid, MatchIDsQuery{})
		if !errors.Is(err, context.Canceled) || f.hits.Load() != 0 {
			t.Errorf("err=%v hits=%d, want context.Canceled and no request", err, f.hits.Load())
		}
		kindOf(t, err)
	})
}

func TestServerRetries(t *testing.T) {
	script := func(statuses ...int) http.HandlerFunc {
		var n atomic.Int32
		return func(w http.ResponseWriter, r *http.Request) {
			i := int(n.Add(1)) - 1
			if i < len(statuses) {
				w.WriteHeader(statuses[i])
				return
			}
			w.Write([]byte(`[]`))
		}
	}
	mod := func(c *Config) { c.ServerRetries = 2; c.ServerRetryBase = 10 * time.Millisecond }

	f := newFakeRiot(t, script(503, 500))
	c, _, sl := newTestClient(t, f, mod)
	if _, err := c.MatchIDsByPUUID(context.Background(), Americas, puuid, MatchIDsQuery{}); err != nil {
		t.Fatalf("interactive call not retried to success: %v", err)
	}
	if f.hits.Load() != 3 || fmt.Sprint(sl.waits) != "[10ms 20ms]" {
		t.Errorf("hits=%d waits=%v, want 3 and [10ms 20ms]", f.hits.Load(), sl.waits)
	}

	f = newFakeRiot(t, script(503))
	c, _, sl = newTestClient(t, f, mod)
	_, err := c.MatchIDsByPUUID(WithBackground(context.Background()), Americas, puuid, MatchIDsQuery{})
	if e := kindOf(t, err); e.Kind != KindServer || f.hits.Load() != 1 || len(sl.waits) != 0 {
		t.Errorf("background: kind=%v hits=%d, want server error after 1 request", e.Kind, f.hits.Load())
	}

	f = newFakeRiot(t, script(503))
	c, _, _ = newTestClient(t, f, nil) // default: no server retries
	_, err = c.MatchIDsByPUUID(context.Background(), Americas, puuid, MatchIDsQuery{})
	if e := kindOf(t, err); e.Kind != KindServer || f.hits.Load() != 1 {
		t.Errorf("default: kind=%v hits=%d", e.Kind, f.hits.Load())
	}

	f = newFakeRiot(t, script(400, 404))
	c, _, sl = newTestClient(t, f, mod)
	_, err = c.MatchIDsByPUUID(context.Background(), Americas, puuid, MatchIDsQuery{})
	if e := kindOf(t, err); e.Kind != KindBadRequest || f.hits.Load() != 1 || len(sl.waits) != 0 {
		t.Errorf("4xx retried: kind=%v hits=%d", e.Kind, f.hits.Load())
	}
}

// failOnceThen answers the first request with status and a Retry-After
// header, and every later one 200 with body.
func failOnceThen(status int, retryAfter, body string) http.HandlerFunc {
	var n atomic.Int32
	return func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("Retry-After", retryAfter)
			w.WriteHeader(status)
			return
		}
		w.Write([]byte(body))
	}
}

// TestServerRetryAfter: a 503 with Retry-After sets RetryAt (no margin),
// so callers wait at least that long; without it RetryAt stays zero and the
// caller's own schedule applies. The in-process server retry waits the
// longer of its backoff and the Retry-After.
func TestServerRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		retryAfter string
		want       time.Duration // RetryDelay(now, 1s)
	}{{"7", 7 * time.Second}, {"", time.Second}, {"0", time.Second}, {"soon", time.Second}} {
		f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) {
			if tc.retryAfter != "" {
				w.Header().Set("Retry-After", tc.retryAfter)
			}
			w.WriteHeader(503)
		})
		c, _, _ := newTestClient(t, f, nil)
		_, err := c.MatchIDsByPUUID(context.Background(), Americas, puuid, MatchIDsQuery{})
		e := kindOf(t, err)
		if e.Kind != KindServer {
			t.Fatalf("Retry-After %q: kind %v", tc.retryAfter, e.Kind)
		}
		if got := e.RetryDelay(fixedNow, time.Second); got != tc.want {
			t.Errorf("Retry-After %q: RetryDelay %v, want %v", tc.retryAfter, got, tc.want)
		}
	}

	f := newFakeRiot(t, failOnceThen(503, "2", `[]`))
	c, _, sl := newTestClient(t, f, func(c *Config) { c.ServerRetries = 1; c.ServerRetryBase = 10 * time.Millisecond })
	if _, err := c.MatchIDsByPUUID(context.Background(), Americas, puuid, MatchIDsQuery{}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(sl.waits) != "[2s]" {
		t.Errorf("server retry waited %v, want [2s] (the Retry-After)", sl.waits)
	}
}

func TestBackgroundPriority(t *testing.T) {
	f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`[]`)) })
	c, lim, _ := newTestClient(t, f, nil)
	ctx := context.Background()
	if IsBackground(ctx) || !IsBackground(WithBackground(ctx)) {
		t.Fatal("IsBackground wrong")
	}
	c.MatchIDsByPUUID(ctx, Americas, puuid, MatchIDsQuery{})
	c.MatchIDsByPUUID(WithBackground(ctx), Americas, puuid, MatchIDsQuery{})
	calls, _, _ := lim.snapshot()
	if len(calls) != 2 || calls[0].Background || !calls[1].Background {
		t.Errorf("calls = %+v, want interactive then background", calls)
	}
}

func TestTransportErrors(t *testing.T) {
	t.Run("timeout", func(t *testing.T) {
		release := make(chan struct{})
		f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		})
		defer close(release)
		c, lim, _ := newTestClient(t, f, func(c *Config) { c.Timeout = 50 * time.Millisecond })
		_, err := c.AccountByPUUID(context.Background(), Europe, puuid)
		e := kindOf(t, err)
		if e.Kind != KindTransport || !strings.Contains(e.Msg, "timeout") {
			t.Errorf("got %+v, want transport timeout", e)
		}
		if _, done, _ := lim.snapshot(); fmt.Sprint(done) != "[0]" {
			t.Errorf("done = %v, want [0]", done)
		}
	})
	t.Run("connection refused", func(t *testing.T) {
		f := newFakeRiot(t, nil)
		c, lim, _ := newTestClient(t, f, nil)
		f.Close()
		_, err := c.AccountByPUUID(context.Background(), Europe, puuid)
		if e := kindOf(t, err); e.Kind != KindTransport || e.Status != 0 {
			t.Errorf("got %+v", e)
		}
		if _, done, _ := lim.snapshot(); fmt.Sprint(done) != "[0]" {
			t.Errorf("done = %v, want [0]", done)
		}
	})
	t.Run("truncated gzip", func(t *testing.T) {
		z := gzipBytes(t, []byte(`{"puuid":"`+puuid+`","gameName":"a","tagLine":"b"}`))
		f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(z[:len(z)-10])
		})
		c, _, _ := newTestClient(t, f, nil)
		_, err := c.AccountByPUUID(context.Background(), Europe, puuid)
		if e := kindOf(t, err); e.Kind != KindTransport {
			t.Errorf("got %+v, want transport", e)
		}
	})
	t.Run("body over the cap", func(t *testing.T) {
		f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(gzipBytes(t, bytes.Repeat([]byte(" "), 4096)))
		})
		c, _, _ := newTestClient(t, f, func(c *Config) { c.MaxBodyBytes = 1024 })
		_, err := c.AccountByPUUID(context.Background(), Europe, puuid)
		if e := kindOf(t, err); e.Kind != KindDecode {
			t.Errorf("got %+v, want decode", e)
		}
	})
}

func TestKeyGuard(t *testing.T) {
	for _, status := range []int{401, 403} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(status)
				w.Write([]byte(`{"status":{"message":"Forbidden","status_code":403}}`))
			})
			var logs bytes.Buffer
			var hook []int
			c, lim, _ := newTestClient(t, f, func(c *Config) {
				c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
				c.OnKeyRejected = func(s int) { hook = append(hook, s) }
			})
			for i := range 3 {
				_, err := c.AccountByPUUID(context.Background(), Europe, puuid)
				if e := kindOf(t, err); e.Kind != KindKeyRejected || e.Status != status {
					t.Errorf("call %d: %+v", i, e)
				}
				_, _, err = c.Match(context.Background(), Americas, "NA1_4223689858")
				if e := kindOf(t, err); e.Kind != KindKeyRejected {
					t.Errorf("call %d on another route: %+v", i, e)
				}
			}
			// Two answers in a row from key endpoints prove it; then nothing
			// more is sent.
			if f.hits.Load() != DefaultKeyRejectAfter {
				t.Errorf("%d requests sent, want %d", f.hits.Load(), DefaultKeyRejectAfter)
			}
			if calls, _, _ := lim.snapshot(); len(calls) != DefaultKeyRejectAfter {
				t.Errorf("limiter consulted %d times, want %d", len(calls), DefaultKeyRejectAfter)
			}
			rejected, st, at := c.KeyRejected()
			if !rejected || st != status || !at.Equal(fixedNow) {
				t.Errorf("KeyRejected() = %v %d %v", rejected, st, at)
			}
			if fmt.Sprint(hook) != fmt.Sprintf("[%d]", status) {
				t.Errorf("hook calls = %v", hook)
			}
			if n := strings.Count(logs.String(), "level=ERROR"); n != 1 {
				t.Errorf("%d error logs, want 1:\n%s", n, logs.String())
			}
			if strings.Contains(logs.String(), testKey) {
				t.Error("log contains the key")
			}
		})
	}
	t.Run("RejectKey from outside", func(t *testing.T) {
		f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`[]`)) })
		hooked := false
		c, _, _ := newTestClient(t, f, func(c *Config) { c.OnKeyRejected = func(int) { hooked = true } })
		if _, err := c.MatchIDsByPUUID(context.Background(), Americas, puuid, MatchIDsQuery{}); err != nil {
			t.Fatal(err)
		}
		c.RejectKey(403)
		c.RejectKey(401) // first status wins
		_, err := c.MatchIDsByPUUID(context.Background(), Americas, puuid, MatchIDsQuery{})
		if e := kindOf(t, err); e.Kind != KindKeyRejected || e.Status != 403 {
			t.Errorf("got %+v", e)
		}
		if f.hits.Load() != 1 || hooked {
			t.Errorf("hits=%d hooked=%v, want 1 and false", f.hits.Load(), hooked)
		}
	})
	t.Run("rejected while waiting in the limiter", func(t *testing.T) {
		f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`[]`)) })
		var c *Client
		lim := &rejectingLimiter{testLimiter: testLimiter{t: t}, reject: func() { c.RejectKey(401) }}
		var err error
		c, err = New(Config{APIKey: testKey, BaseURL: f.URL + "/{route}", Limiter: lim, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.MatchIDsByPUUID(context.Background(), Americas, puuid, MatchIDsQuery{})
		if e := kindOf(t, err); e.Kind != KindKeyRejected {
			t.Errorf("got %+v", e)
		}
		if _, done, cancels := lim.snapshot(); f.hits.Load() != 0 || len(done) != 0 || cancels != 1 {
			t.Errorf("hits=%d done=%v cancels=%d, want the permit cancelled", f.hits.Load(), done, cancels)
		}
	})
}

// rejectingLimiter marks the key rejected while a call holds its permit.
type rejectingLimiter struct {
	testLimiter
	reject func()
}

func (l *rejectingLimiter) Acquire(ctx context.Context, c Call) (Permit, error) {
	p, err := l.testLimiter.Acquire(ctx, c)
	l.reject()
	return p, err
}

func TestBreaker(t *testing.T) {
	var status atomic.Int32
	status.Store(500)
	f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) {
		if s := int(status.Load()); s != 200 {
			w.WriteHeader(s)
			return
		}
		w.Write([]byte(`[]`))
	})
	const brTimeout = 40 * time.Millisecond
	c, lim, _ := newTestClient(t, f, func(c *Config) {
		c.BreakerFailures = 3
		c.BreakerTimeout = brTimeout
		c.Now = time.Now // RetryAt is compared with gobreaker's clock
	})
	ctx := context.Background()
	call := func() error { _, err := c.MatchIDsByPUUID(ctx, Americas, puuid, MatchIDsQuery{}); return err }

	for i := range 3 {
		if e := kindOf(t, call()); e.Kind != KindServer {
			t.Fatalf("call %d: %+v", i, e)
		}
	}
	if got := c.BreakerState("americas"); got != "open" {
		t.Fatalf("breaker %s after 3 failures, want open", got)
	}
	before := time.Now()
	e := kindOf(t, call())
	if e.Kind != KindBreakerOpen || !e.Retryable() {
		t.Fatalf("got %+v, want breaker_open", e)
	}
	if e.RetryAt.Before(before) || e.RetryAt.After(before.Add(brTimeout)) {
		t.Errorf("RetryAt %v not within (now, now+%v]", e.RetryAt, brTimeout)
	}
	if f.hits.Load() != 3 {
		t.Errorf("hits = %d, want 3 (open breaker sends nothing)", f.hits.Load())
	}
	if calls, _, _ := lim.snapshot(); len(calls) != 3 {
		t.Errorf("limiter consulted %d times while open, want 3", len(calls))
	}
	// Another route has its own breaker.
	if _, err := c.LeagueEntriesByPUUID(ctx, "na1", puuid); kindOf(t, err).Kind != KindServer {
		t.Errorf("na1 call: %v, want server error from its own closed breaker", err)
	}

	// Half-open: a failing probe reopens it.
	time.Sleep(brTimeout + 10*time.Millisecond)
	if e := kindOf(t, call()); e.Kind != KindServer {
		t.Fatalf("probe: %+v", e)
	}
	if got := c.BreakerState("americas"); got != "open" {
		t.Errorf("after failed probe: %s, want open", got)
	}
	// Half-open: a successful probe closes it.
	time.Sleep(brTimeout + 10*time.Millisecond)
	status.Store(200)
	if err := call(); err != nil {
		t.Fatalf("probe: %v", err)
	}
	if got := c.BreakerState("americas"); got != "closed" {
		t.Errorf("after good probe: %s, want closed", got)
	}
}

func TestBreakerIgnoresClientSideErrors(t *testing.T) {
	var status atomic.Int32
	held := make(chan struct{}, 1)
	f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("start") == "1" {
			held <- struct{}{}
			<-r.Context().Done() // held until the caller gives up
			return
		}
		w.WriteHeader(int(status.Load()))
	})
	c, _, _ := newTestClient(t, f, func(c *Config) { c.BreakerFailures = 2; c.MaxRetries = -1 })
	for _, s := range []int{404, 429, 400, 415} {
		status.Store(int32(s))
		for range 4 {
			c.MatchIDsByPUUID(context.Background(), Americas, puuid, MatchIDsQuery{})
		}
	}
	for range 4 {
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-held; cancel() }() // the caller gives up once Riot has the request
		_, err := c.MatchIDsByPUUID(ctx, Americas, puuid, MatchIDsQuery{Start: 1})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled call: %v", err)
		}
		cancel()
	}
	if got := c.BreakerState("americas"); got != "closed" {
		t.Errorf("breaker %s after 4xx/429/cancellations, want closed", got)
	}
	status.Store(200)
	if f.hits.Load() != 20 {
		t.Errorf("hits = %d, want 20", f.hits.Load())
	}
}

func TestParseRetryAfter(t *testing.T) {
	for in, want := range map[string]time.Duration{"1": time.Second, " 2 ": 2 * time.Second, "0": 0, "0.25": 250 * time.Millisecond} {
		if got, ok := parseRetryAfter(in, fixedNow); !ok || got != want {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "x", "-1", "NaN", "1e9"} {
		if got, ok := parseRetryAfter(in, fixedNow); ok {
			t.Errorf("parseRetryAfter(%q) = %v, want not ok", in, got)
		}
	}
}

func TestKeyGuardConcurrent(t *testing.T) {
	f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(403) })
	var hooks atomic.Int32
	c, lim, _ := newTestClient(t, f, func(c *Config) { c.OnKeyRejected = func(int) { hooks.Add(1) } })
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			_, _, err := c.Match(context.Background(), Europe, "EUW1_1")
			if e := kindOf(t, err); e.Kind != KindKeyRejected {
				t.Errorf("got %+v", e)
			}
		})
	}
	wg.Wait()
	if hooks.Load() != 1 {
		t.Errorf("OnKeyRejected called %d times, want 1", hooks.Load())
	}
	calls, done, cancels := lim.snapshot()
	if len(calls) < 1 || len(done)+cancels != len(calls) || int(f.hits.Load()) != len(done) {
		t.Errorf("acquires=%d done=%d cancels=%d hits=%d", len(calls), len(done), cancels, f.hits.Load())
	}
}

// A redirect to another host is refused: the key never reaches it. A
// redirect on the same host is followed, with the key.
func TestRedirectNeverCarriesTheKeyAway(t *testing.T) {
	var leaked atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Riot-Token") != "" {
			leaked.Add(1)
		}
		w.Write([]byte(`{"puuid":"p","gameName":"a","tagLine":"b"}`))
	}))
	t.Cleanup(other.Close)
	f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/by-riot-id/away/b"):
			http.Redirect(w, r, other.URL+"/steal", http.StatusFound)
		case strings.HasSuffix(r.URL.Path, "/by-riot-id/here/b"):
			http.Redirect(w, r, "/americas/riot/account/v1/accounts/by-riot-id/moved/b", http.StatusMovedPermanently)
		default:
			w.Write([]byte(`{"puuid":"p","gameName":"moved","tagLine":"b"}`))
		}
	})
	c, _, _ := newTestClient(t, f, nil)
	_, err := c.AccountByRiotID(t.Context(), Americas, RiotID{GameName: "away", TagLine: "b"})
	if !errors.Is(err, ErrCrossHostRedirect) {
		t.Fatalf("cross-host redirect: err = %v, want ErrCrossHostRedirect", err)
	}
	if leaked.Load() != 0 || strings.Contains(err.Error(), testKey) {
		t.Fatal("the API key reached the other host or the error")
	}
	acc, err := c.AccountByRiotID(t.Context(), Americas, RiotID{GameName: "here", TagLine: "b"})
	if err != nil || acc.GameName != "moved" {
		t.Fatalf("same-host redirect: %+v, %v", acc, err)
	}
	if got := f.lastRequest(t).Header.Get("X-Riot-Token"); got != testKey {
		t.Errorf("same-host redirect lost the key: %q", got)
	}
}

// clientClock is a settable clock for Config.Now.
type clientClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clientClock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clientClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// Issue 27 finding 6: a 401/403 proves the key rejected only when
// KeyRejectAfter of them come in a row from account-v1 or match-v5, and
// never through a redirect. An endpoint the key is not approved for, a
// redirect target on Riot's host that answers 403, and a 403 between two
// successes fail their own call only: later calls are still sent.
func TestKeyRejectionNeedsProof(t *testing.T) {
	var status atomic.Int32
	f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/by-riot-id/moved/") {
			http.Redirect(w, r, "/americas/riot/account/v1/accounts/by-riot-id/impostor/b", http.StatusFound)
			return
		}
		if strings.Contains(r.URL.Path, "/impostor/") || strings.Contains(r.URL.Path, "/league/") {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		if st := status.Load(); st != 0 {
			w.WriteHeader(int(st))
			return
		}
		w.Write([]byte(`{"puuid":"p","gameName":"a","tagLine":"b"}`))
	})
	var hooked atomic.Int32
	c, _, _ := newTestClient(t, f, func(c *Config) { c.OnKeyRejected = func(int) { hooked.Add(1) } })
	ctx := t.Context()
	for range 5 {
		if _, err := c.LeagueEntriesByPUUID(ctx, "euw1", puuid); kindOf(t, err).Kind != KindKeyRejected {
			t.Fatalf("league-v4 403: %v", err)
		}
		if _, err := c.AccountByRiotID(ctx, Americas, RiotID{GameName: "moved", TagLine: "b"}); kindOf(t, err).Kind != KindKeyRejected {
			t.Fatalf("redirect target's 403: %v", err)
		}
	}
	for _, st := range []int32{403, 0, 401, 0, 403} { // never two in a row
		status.Store(st)
		c.AccountByPUUID(ctx, Europe, puuid)
	}
	if rejected, _, _ := c.KeyRejected(); rejected || hooked.Load() != 0 {
		t.Fatalf("key rejected without proof (hook %d)", hooked.Load())
	}
	before := f.hits.Load()
	status.Store(0)
	if _, err := c.AccountByPUUID(ctx, Europe, puuid); err != nil || f.hits.Load() != before+1 {
		t.Fatalf("a call after unproven 403s: %v, sent %d", err, f.hits.Load()-before)
	}
	status.Store(401)
	c.AccountByPUUID(ctx, Europe, puuid)
	c.AccountByPUUID(ctx, Europe, puuid)
	if rejected, st, _ := c.KeyRejected(); !rejected || st != 401 || hooked.Load() != 1 {
		t.Fatalf("two 401s in a row from account-v1: rejected=%v status=%d hook=%d", rejected, st, hooked.Load())
	}
}

// A rejected key is probed: the first key-endpoint call KeyProbeMin after
// the rejection goes to Riot (outside the limiter), a 403 doubles the wait,
// and an accepted probe clears the rejection (OnKeyAccepted) so calls
// resume through the limiter. Before each probe is due nothing is sent.
func TestKeyProbeClearsRejection(t *testing.T) {
	var status atomic.Int32
	status.Store(403)
	f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) {
		if st := status.Load(); st != 0 {
			w.WriteHeader(int(st))
			return
		}
		w.Write([]byte(`["NA1_1"]`))
	})
	clock := &clientClock{t: fixedNow}
	var accepted atomic.Int32
	c, lim, _ := newTestClient(t, f, func(c *Config) {
		c.Now = clock.now
		c.KeyProbeMin, c.KeyProbeMax = time.Minute, 3*time.Minute
		c.OnKeyAccepted = func() { accepted.Add(1) }
	})
	ctx := t.Context()
	call := func() error { _, err := c.MatchIDsByPUUID(ctx, Americas, puuid, MatchIDsQuery{}); return err }
	call()
	call()
	if rejected, _, _ := c.KeyRejected(); !rejected {
		t.Fatal("not rejected after two 403s")
	}
	if got := c.KeyProbeAt(); !got.Equal(fixedNow.Add(time.Minute)) {
		t.Fatalf("KeyProbeAt = %v, want rejection + 1m", got)
	}
	sent := func() int32 { return f.hits.Load() }
	n := sent()
	clock.add(59 * time.Second)
	if err := call(); kindOf(t, err).Kind != KindKeyRejected || sent() != n {
		t.Fatalf("before the probe is due: %v, %d sent", err, sent()-n)
	}
	clock.add(time.Second)
	if err := call(); kindOf(t, err).Kind != KindKeyRejected || sent() != n+1 {
		t.Fatalf("the first probe: %v, %d sent", err, sent()-n)
	}
	if got := c.KeyProbeAt(); !got.Equal(clock.now().Add(2 * time.Minute)) {
		t.Fatalf("after a refused probe KeyProbeAt = %v, want now + 2m", got)
	}
	clock.add(2 * time.Minute)
	call() // refused again: the wait is capped at 3m
	if got := c.KeyProbeAt(); !got.Equal(clock.now().Add(3 * time.Minute)) {
		t.Fatalf("KeyProbeAt = %v, want now + 3m (KeyProbeMax)", got)
	}
	clock.add(3 * time.Minute)
	status.Store(0)
	acquires, _, _ := lim.snapshot()
	if err := call(); err != nil {
		t.Fatalf("the accepted probe: %v", err)
	}
	if after, _, _ := lim.snapshot(); len(after) != len(acquires) {
		t.Error("the probe went through the limiter")
	}
	if rejected, _, _ := c.KeyRejected(); rejected || accepted.Load() != 1 {
		t.Fatalf("after an accepted probe: rejected=%v OnKeyAccepted=%d", rejected, accepted.Load())
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}
	if after, _, _ := lim.snapshot(); len(after) != len(acquires)+1 {
		t.Error("calls after the probe do not go through the limiter")
	}
	c.RejectKey(403)
	c.AcceptKey()
	if rejected, _, _ := c.KeyRejected(); rejected || accepted.Load() != 1 {
		t.Fatalf("AcceptKey: rejected=%v OnKeyAccepted=%d, want false and still 1", rejected, accepted.Load())
	}
}
