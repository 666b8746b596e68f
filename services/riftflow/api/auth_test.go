package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/synclock"
	"github.com/riftflow/riftflow/services/riftflow/api/apitest"
	"github.com/riftflow/riftflow/streams"
)

// S1: every route needs a token with its scope; tokens are stored as
// hashes and can be revoked; unknown ids are 404; event streams are capped.
func TestAPIAuthentication(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	ts := NewTokens(e.Store)
	read, _ := newToken(t, e, "reader", ScopeRead)
	syncTok, syncRow := newToken(t, e, "syncer", ScopeSync)
	if !regexp.MustCompile(`^rft_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$`).MatchString(read) {
		t.Fatalf("token %q is not rft_<16 hex>_<256 bits base64url>", read)
	}
	// Only the SHA-256 is stored.
	var stored string
	if err := e.DB.QueryRow(ctx, `SELECT string_agg(t::text, '|') FROM api_tokens t`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stored, read[21:]) || strings.Contains(stored, syncTok[21:]) {
		t.Fatalf("a token's secret is stored in api_tokens: %s", stored)
	}

	api := newAPI(e)
	api.Limits.SSEPerToken, api.Limits.SSETotal = 1, 2
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()

	// 401: no token, another scheme, a malformed, unknown or tampered token.
	for name, tok := range map[string]string{"no token": "", "malformed": "hunter2",
		"unknown":  "rft_0123456789abcdef_" + strings.Repeat("A", 43),
		"tampered": read[:len(read)-1] + map[bool]string{true: "B", false: "A"}[strings.HasSuffix(read, "A")]} {
		c := apitest.Call(t, http.MethodGet, srv.URL+"/v1/jobs", tok, "")
		c.Problem(t, "GET /v1/jobs with "+name, http.StatusUnauthorized)
		if !strings.HasPrefix(c.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: WWW-Authenticate %q", name, c.Header.Get("WWW-Authenticate"))
		}
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/jobs", nil)
	req.Header.Set("Authorization", "Basic "+read)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("Basic scheme: %v %v, want 401", resp.StatusCode, err)
	}
	// Every route is behind authorize, with the scope the doc gives.
	body := `{"riot_id":"Nobody#NOPE","platform":"na1"}`
	for _, r := range []struct {
		method, path, body string
		need               Scope
	}{
		{"POST", "/v1/sync", body, ScopeSync}, {"GET", "/v1/accounts/p1", "", ScopeRead},
		{"POST", "/v1/accounts/p1/link", `{"platform":"na1"}`, ScopeSync}, {"POST", "/v1/accounts/p1/unlink", "", ScopeSync},
		{"POST", "/v1/accounts/p1/login", "", ScopeSync}, {"GET", "/v1/sync/x/events", "", ScopeRead}, {"GET", "/v1/jobs", "", ScopeRead},
	} {
		apitest.Call(t, r.method, srv.URL+r.path, "", r.body).Problem(t, r.method+" "+r.path+" without a token", http.StatusUnauthorized)
		if r.need == ScopeSync {
			c := apitest.Call(t, r.method, srv.URL+r.path, read, r.body)
			c.Problem(t, r.method+" "+r.path+" with a read token", http.StatusForbidden)
			if !strings.Contains(c.Header.Get("WWW-Authenticate"), `error="insufficient_scope"`) {
				t.Errorf("403 WWW-Authenticate %q", c.Header.Get("WWW-Authenticate"))
			}
		}
	}
	// The right scope passes; sync includes read.
	if c := apitest.Call(t, http.MethodGet, srv.URL+"/v1/jobs", read, ""); c.Code != http.StatusOK {
		t.Errorf("GET /v1/jobs with read: %d %s", c.Code, c.Body)
	}
	if c := apitest.Call(t, http.MethodGet, srv.URL+"/v1/jobs", syncTok, ""); c.Code != http.StatusOK {
		t.Errorf("GET /v1/jobs with sync: %d %s", c.Code, c.Body)
	}
	// 404 for unknown ids, also on the event stream (no hang: call's
	// client gives up after 15 s).
	if c := apitest.Call(t, http.MethodGet, srv.URL+"/v1/accounts/nobody", read, ""); c.Code != http.StatusNotFound {
		t.Errorf("GET unknown account: %d", c.Code)
	}
	apitest.Call(t, http.MethodGet, srv.URL+"/v1/sync/never-submitted/events", read, "").Problem(t, "SSE for an unknown id", http.StatusNotFound)
	apitest.Call(t, http.MethodGet, srv.URL+"/v1/sync/"+strings.Repeat("x", 200)+"/events", read, "").Problem(t, "SSE for an invalid id", http.StatusNotFound)
	// 413 for a body over API_MAX_BODY_BYTES.
	big := `{"platform":"na1","riot_id":"` + strings.Repeat("a", int(api.Limits.MaxBody)) + `"}`
	apitest.Call(t, http.MethodPost, srv.URL+"/v1/accounts/p1/link", syncTok, big).Problem(t, "an oversized body", http.StatusRequestEntityTooLarge)

	// The SSE cap: the services do not run, so a submitted request's
	// stream stays open. One per token, two in all.
	c := apitest.Call(t, http.MethodPost, srv.URL+"/v1/sync", syncTok, `{"request_id":"held","riot_id":"Nobody#NOPE","platform":"na1"}`)
	if c.Code != http.StatusAccepted {
		t.Fatalf("POST /v1/sync: %d %s", c.Code, c.Body)
	}
	var held struct {
		Events string `json:"events"` // the request ID is scoped to the token (TestRequestIDScopedToToken)
	}
	if err := json.Unmarshal(c.Body, &held); err != nil || held.Events == "" {
		t.Fatalf("POST /v1/sync: %s", c.Body)
	}
	open := func(token string) (*http.Response, context.CancelFunc) {
		ctx, cancel := context.WithCancel(t.Context())
		return apitest.Send(t, ctx, http.MethodGet, srv.URL+held.Events, token, nil), cancel
	}
	first, stop1 := open(read)
	defer stop1()
	if first.StatusCode != http.StatusOK || first.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("first stream: %d %q", first.StatusCode, first.Header.Get("Content-Type"))
	}
	second, stop2 := open(read)
	defer stop2()
	if second.StatusCode != http.StatusTooManyRequests || second.Header.Get("Retry-After") == "" {
		t.Errorf("second stream of one token: %d, Retry-After %q; want 429 with Retry-After", second.StatusCode, second.Header.Get("Retry-After"))
	}
	other, stop3 := open(syncTok)
	defer stop3()
	if other.StatusCode != http.StatusOK {
		t.Errorf("another token's stream: %d, want 200", other.StatusCode)
	}
	admin, _, _ := ts.Create(ctx, "third", []Scope{ScopeAdmin})
	third, stop4 := open(admin)
	defer stop4()
	if third.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a stream over the total cap: %d, want 429", third.StatusCode)
	}
	// Closing a stream frees its slot.
	stop1()
	first.Body.Close()
	e.Wait("the freed slot", func() bool {
		r, stop := open(read)
		defer stop()
		defer r.Body.Close()
		return r.StatusCode == http.StatusOK
	})

	// Revocation takes effect at the next request.
	if err := ts.Revoke(ctx, syncRow.ID); err != nil {
		t.Fatal(err)
	}
	apitest.Call(t, http.MethodGet, srv.URL+"/v1/jobs", syncTok, "").Problem(t, "a revoked token", http.StatusUnauthorized)
	if err := ts.Revoke(ctx, syncRow.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("revoking twice: %v, want ErrNotFound", err)
	}
}

// The API's server logs requests without the Authorization header or the
// token, and has every timeout set.
func TestAPIServerLogsNoSecrets(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	token := "rft_0123456789abcdef_" + strings.Repeat("Z", 43)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeProblemAt(w, r, http.StatusForbidden, "no") })
	srv := NewServer(context.Background(), h, log, DefaultTimeouts)
	if srv.ReadHeaderTimeout == 0 || srv.ReadTimeout == 0 || srv.WriteTimeout == 0 || srv.IdleTimeout == 0 || srv.MaxHeaderBytes == 0 {
		t.Fatalf("API server without a timeout or header limit: %+v", srv)
	}
	base := apitest.ServeLoopback(t, srv)
	apitest.Call(t, http.MethodGet, base+"/v1/jobs?puuid=abc", token, "")
	if !strings.Contains(logs.String(), "path=/v1/jobs") || !strings.Contains(logs.String(), "status=403") {
		t.Fatalf("request not logged: %s", logs.String())
	}
	for _, s := range []string{token, "Bearer", "Authorization", "puuid=abc"} {
		if strings.Contains(logs.String(), s) {
			t.Errorf("request log holds %q: %s", s, logs.String())
		}
	}
}

// The API listens on loopback unless --expose.
func TestAPIAddr(t *testing.T) {
	for _, c := range []struct {
		flag, env string
		expose    bool
		want      string
	}{
		{"", "", false, "127.0.0.1:8080"},
		{"", "127.0.0.1:9000", false, "127.0.0.1:9000"},
		{"[::1]:9000", ":8080", false, "[::1]:9000"},
		{"localhost:0", "", false, "localhost:0"},
		{"", ":8080", false, ""},
		{"0.0.0.0:8080", "", false, ""},
		{"192.168.1.5:8080", "", false, ""},
		{"", ":8080", true, ":8080"},
		{"nonsense", "", true, ""},
	} {
		got, err := Addr(c.flag, c.env, c.expose)
		if got != c.want || (err == nil) != (c.want != "") {
			t.Errorf("Addr(%q, %q, %v) = %q, %v; want %q", c.flag, c.env, c.expose, got, err, c.want)
		}
	}
}

// An event stream outlives the server's read and write timeouts: it
// extends its write deadline at each write (without that, this test fails
// after a few keepalives) and clears its read deadline (defence only: with
// Go 1.26 a passed read deadline did not end the stream here either).
func TestSSEOutlivesServerTimeouts(t *testing.T) {
	e := newEnv(t)
	api := newAPI(e)
	api.Limits.Keepalive = 100 * time.Millisecond
	token, _ := newToken(t, e, "sse", ScopeSync)
	base := apitest.ServeLoopback(t, NewServer(context.Background(), api.Handler(), slog.New(slog.DiscardHandler),
		ServerTimeouts{ReadHeader: time.Second, Read: 300 * time.Millisecond, Write: 400 * time.Millisecond, Idle: time.Second}))
	c := apitest.Call(t, http.MethodPost, base+"/v1/sync", token, `{"request_id":"long","riot_id":"Nobody#NOPE","platform":"na1"}`)
	if c.Code != http.StatusAccepted {
		t.Fatalf("POST /v1/sync: %d %s", c.Code, c.Body)
	}
	var accepted struct {
		RequestID string `json:"request_id"` // "long", scoped to the token
	}
	if err := json.Unmarshal(c.Body, &accepted); err != nil || accepted.RequestID == "" {
		t.Fatalf("POST /v1/sync answered %s: %v", c.Body, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	resp := apitest.Send(t, ctx, http.MethodGet, base+"/v1/sync/"+accepted.RequestID+"/events", token, nil)
	defer resp.Body.Close()
	// Ten times the read timeout, counted in keepalives received, not in
	// wall time: the stream must still deliver the 30th.
	sc := bufio.NewScanner(resp.Body)
	keepalives := 0
	for keepalives < 30 && sc.Scan() {
		if sc.Text() == ": keepalive" {
			keepalives++
		}
	}
	if keepalives < 30 {
		t.Fatalf("the stream ended after %d keepalives (%v): the server's timeouts cut it", keepalives, sc.Err())
	}
}

// Issue 27 finding 10: a client's request_id is scoped to its token. A
// sync token that names the request holding an account (the 409's
// request_id) gets its own request ID, so it is refused like anyone else
// instead of joining that sync; two tokens choosing the same key get
// different requests; the same token and key get the same request again.
func TestRequestIDScopedToToken(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	a, _ := newToken(t, e, "a", ScopeSync)
	b, _ := newToken(t, e, "b", ScopeSync)
	srv := httptest.NewServer(newAPI(e).Handler())
	defer srv.Close()
	const puuid = "scoped-request-puuid"
	post := func(tok, key string) apitest.Response {
		return apitest.Call(t, http.MethodPost, srv.URL+"/v1/sync", tok,
			`{"puuid":"`+puuid+`","platform":"na1","request_id":"`+key+`"}`)
	}
	idOf := func(c apitest.Response) string {
		t.Helper()
		var v struct {
			RequestID string `json:"request_id"`
		}
		if err := json.Unmarshal(c.Body, &v); err != nil || v.RequestID == "" {
			t.Fatalf("%d %s: no request_id", c.Code, c.Body)
		}
		return v.RequestID
	}
	ca := post(a, "mine")
	if ca.Code != http.StatusAccepted {
		t.Fatalf("a's sync: %d %s", ca.Code, ca.Body)
	}
	held := idOf(ca)
	if again := post(a, "mine"); again.Code != http.StatusAccepted || idOf(again) != held {
		t.Errorf("the same token and key: %d %s, want 202 with %s", again.Code, again.Body, held)
	}
	// The lister took the account's lock for a's request.
	locks, err := e.Process.Lock(ctx, streams.BucketSyncLocks)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := synclock.Claim(ctx, locks, puuid, held, time.Minute, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"mine", held} {
		c := post(b, key)
		if c.Code != http.StatusConflict {
			t.Errorf("b with request_id %q: %d %s, want 409 (a's request holds the account)", key, c.Code, c.Body)
		}
	}
}
