package riftflow

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

	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/synclock"
	"github.com/riftflow/riftflow/streams"
)

// S1: every route needs a token with its scope; tokens are stored as
// hashes and can be revoked; unknown ids are 404; event streams are capped.
func TestAPIAuthentication(t *testing.T) {
	h := startHarness(t, harnessOptions{noRun: true})
	ctx := h.ctx
	ts := NewTokens(h.st.Infra.Store)
	read, _ := newToken(t, h.st.Infra, "reader", ScopeRead)
	syncTok, syncRow := newToken(t, h.st.Infra, "syncer", ScopeSync)
	if !regexp.MustCompile(`^rft_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$`).MatchString(read) {
		t.Fatalf("token %q is not rft_<16 hex>_<256 bits base64url>", read)
	}
	// Only the SHA-256 is stored.
	var stored string
	if err := h.db.QueryRow(ctx, `SELECT string_agg(t::text, '|') FROM api_tokens t`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stored, read[21:]) || strings.Contains(stored, syncTok[21:]) {
		t.Fatalf("a token's secret is stored in api_tokens: %s", stored)
	}

	api := NewAPI(h.st.Infra)
	api.Limits.SSEPerToken, api.Limits.SSETotal = 1, 2
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()

	// 401: no token, another scheme, a malformed, unknown or tampered token.
	for name, tok := range map[string]string{"no token": "", "malformed": "hunter2",
		"unknown":  "rft_0123456789abcdef_" + strings.Repeat("A", 43),
		"tampered": read[:len(read)-1] + map[bool]string{true: "B", false: "A"}[strings.HasSuffix(read, "A")]} {
		c := call(t, http.MethodGet, srv.URL+"/v1/jobs", tok, "")
		c.problem(t, "GET /v1/jobs with "+name, http.StatusUnauthorized)
		if !strings.HasPrefix(c.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: WWW-Authenticate %q", name, c.header.Get("WWW-Authenticate"))
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
		call(t, r.method, srv.URL+r.path, "", r.body).problem(t, r.method+" "+r.path+" without a token", http.StatusUnauthorized)
		if r.need == ScopeSync {
			c := call(t, r.method, srv.URL+r.path, read, r.body)
			c.problem(t, r.method+" "+r.path+" with a read token", http.StatusForbidden)
			if !strings.Contains(c.header.Get("WWW-Authenticate"), `error="insufficient_scope"`) {
				t.Errorf("403 WWW-Authenticate %q", c.header.Get("WWW-Authenticate"))
			}
		}
	}
	// The right scope passes; sync includes read.
	if c := call(t, http.MethodGet, srv.URL+"/v1/jobs", read, ""); c.code != http.StatusOK {
		t.Errorf("GET /v1/jobs with read: %d %s", c.code, c.body)
	}
	if c := call(t, http.MethodGet, srv.URL+"/v1/jobs", syncTok, ""); c.code != http.StatusOK {
		t.Errorf("GET /v1/jobs with sync: %d %s", c.code, c.body)
	}
	// 404 for unknown ids, also on the event stream (no hang: call's
	// client gives up after 15 s).
	if c := call(t, http.MethodGet, srv.URL+"/v1/accounts/nobody", read, ""); c.code != http.StatusNotFound {
		t.Errorf("GET unknown account: %d", c.code)
	}
	call(t, http.MethodGet, srv.URL+"/v1/sync/never-submitted/events", read, "").problem(t, "SSE for an unknown id", http.StatusNotFound)
	call(t, http.MethodGet, srv.URL+"/v1/sync/"+strings.Repeat("x", 200)+"/events", read, "").problem(t, "SSE for an invalid id", http.StatusNotFound)
	// 413 for a body over API_MAX_BODY_BYTES.
	big := `{"platform":"na1","riot_id":"` + strings.Repeat("a", int(api.Limits.MaxBody)) + `"}`
	call(t, http.MethodPost, srv.URL+"/v1/accounts/p1/link", syncTok, big).problem(t, "an oversized body", http.StatusRequestEntityTooLarge)

	// The SSE cap: the services do not run, so a submitted request's
	// stream stays open. One per token, two in all.
	c := call(t, http.MethodPost, srv.URL+"/v1/sync", syncTok, `{"request_id":"held","riot_id":"Nobody#NOPE","platform":"na1"}`)
	if c.code != http.StatusAccepted {
		t.Fatalf("POST /v1/sync: %d %s", c.code, c.body)
	}
	var held struct {
		Events string `json:"events"` // the request ID is scoped to the token (TestRequestIDScopedToToken)
	}
	if err := json.Unmarshal(c.body, &held); err != nil || held.Events == "" {
		t.Fatalf("POST /v1/sync: %s", c.body)
	}
	open := func(token string) (*http.Response, context.CancelFunc) {
		ctx, cancel := context.WithCancel(t.Context())
		return send(t, ctx, http.MethodGet, srv.URL+held.Events, token, nil), cancel
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
	waitFor(t, "the freed slot", 10*time.Second, func() bool {
		r, stop := open(read)
		defer stop()
		defer r.Body.Close()
		return r.StatusCode == http.StatusOK
	})

	// Revocation takes effect at the next request.
	if err := ts.Revoke(ctx, syncRow.ID); err != nil {
		t.Fatal(err)
	}
	call(t, http.MethodGet, srv.URL+"/v1/jobs", syncTok, "").problem(t, "a revoked token", http.StatusUnauthorized)
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
	srv := newAPIServer(context.Background(), h, log, apiTimeouts)
	if srv.ReadHeaderTimeout == 0 || srv.ReadTimeout == 0 || srv.WriteTimeout == 0 || srv.IdleTimeout == 0 || srv.MaxHeaderBytes == 0 {
		t.Fatalf("API server without a timeout or header limit: %+v", srv)
	}
	base := serveLoopback(t, srv)
	call(t, http.MethodGet, base+"/v1/jobs?puuid=abc", token, "")
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
		got, err := apiAddr(c.flag, c.env, c.expose)
		if got != c.want || (err == nil) != (c.want != "") {
			t.Errorf("apiAddr(%q, %q, %v) = %q, %v; want %q", c.flag, c.env, c.expose, got, err, c.want)
		}
	}
}

// `riftflow token create|list|revoke` end to end on a migrated database.
func TestTokenCommands(t *testing.T) {
	url := pgtest.NewDatabase(t)
	if err := store.Migrate(t.Context(), url, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", url)
	t.Setenv("RIFTFLOW_DATA_DIR", t.TempDir())
	run := func(args ...string) (string, int) {
		var out, errOut bytes.Buffer
		code := Main(args, &out, &errOut)
		return out.String() + errOut.String(), code
	}
	out, code := run("token", "create", "--name", "dashboard", "--scopes", "read,sync")
	token := regexp.MustCompile(`rft_[0-9a-f]{16}_[A-Za-z0-9_-]{43}`).FindString(out)
	if code != 0 || token == "" {
		t.Fatalf("token create: %d %s", code, out)
	}
	st, err := store.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, err := NewTokens(st).Verify(t.Context(), token)
	if err != nil || got.Name != "dashboard" || !got.Allows(ScopeSync) || got.Allows(ScopeAdmin) {
		t.Fatalf("Verify(created token) = %+v, %v", got, err)
	}
	if out, code := run("token", "create", "--name", "x", "--scopes", "root"); code == 0 || !strings.Contains(out, "unknown scope") {
		t.Errorf("unknown scope: %d %s", code, out)
	}
	out, code = run("token", "list")
	if code != 0 || !strings.Contains(out, got.ID) || !strings.Contains(out, "read,sync") || strings.Contains(out, token[21:]) {
		t.Errorf("token list: %d %s", code, out)
	}
	if out, code := run("token", "revoke", got.ID); code != 0 {
		t.Fatalf("token revoke: %d %s", code, out)
	}
	if _, err := NewTokens(st).Verify(t.Context(), token); err != errBadToken {
		t.Errorf("Verify(revoked) = %v, want errBadToken", err)
	}
	if out, code := run("token", "revoke", got.ID); code == 0 {
		t.Errorf("revoking twice succeeded: %s", out)
	}

}

// An event stream outlives the server's read and write timeouts: it
// extends its write deadline at each write (without that, this test fails
// after a few keepalives) and clears its read deadline (defence only: with
// Go 1.26 a passed read deadline did not end the stream here either).
func TestSSEOutlivesServerTimeouts(t *testing.T) {
	h := startHarness(t, harnessOptions{noRun: true})
	api := NewAPI(h.st.Infra)
	api.Limits.Keepalive = 100 * time.Millisecond
	token, _ := newToken(t, h.st.Infra, "sse", ScopeSync)
	base := serveLoopback(t, newAPIServer(context.Background(), api.Handler(), slog.New(slog.DiscardHandler),
		serverTimeouts{ReadHeader: time.Second, Read: 300 * time.Millisecond, Write: 400 * time.Millisecond, Idle: time.Second}))
	c := call(t, http.MethodPost, base+"/v1/sync", token, `{"request_id":"long","riot_id":"Nobody#NOPE","platform":"na1"}`)
	if c.code != http.StatusAccepted {
		t.Fatalf("POST /v1/sync: %d %s", c.code, c.body)
	}
	var accepted struct {
		RequestID string `json:"request_id"` // "long", scoped to the token
	}
	if err := json.Unmarshal(c.body, &accepted); err != nil || accepted.RequestID == "" {
		t.Fatalf("POST /v1/sync answered %s: %v", c.body, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	resp := send(t, ctx, http.MethodGet, base+"/v1/sync/"+accepted.RequestID+"/events", token, nil)
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
	h := startHarness(t, harnessOptions{noRun: true})
	ctx := h.ctx
	a, _ := newToken(t, h.st.Infra, "a", ScopeSync)
	b, _ := newToken(t, h.st.Infra, "b", ScopeSync)
	srv := httptest.NewServer(NewAPI(h.st.Infra).Handler())
	defer srv.Close()
	const puuid = "scoped-request-puuid"
	post := func(tok, key string) apiCall {
		return call(t, http.MethodPost, srv.URL+"/v1/sync", tok,
			`{"puuid":"`+puuid+`","platform":"na1","request_id":"`+key+`"}`)
	}
	idOf := func(c apiCall) string {
		t.Helper()
		var v struct {
			RequestID string `json:"request_id"`
		}
		if err := json.Unmarshal(c.body, &v); err != nil || v.RequestID == "" {
			t.Fatalf("%d %s: no request_id", c.code, c.body)
		}
		return v.RequestID
	}
	ca := post(a, "mine")
	if ca.code != http.StatusAccepted {
		t.Fatalf("a's sync: %d %s", ca.code, ca.body)
	}
	held := idOf(ca)
	if again := post(a, "mine"); again.code != http.StatusAccepted || idOf(again) != held {
		t.Errorf("the same token and key: %d %s, want 202 with %s", again.code, again.body, held)
	}
	// The lister took the account's lock for a's request.
	locks, err := h.st.Infra.Lock(ctx, streams.BucketSyncLocks)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := synclock.Claim(ctx, locks, puuid, held, time.Minute, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"mine", held} {
		c := post(b, key)
		if c.code != http.StatusConflict {
			t.Errorf("b with request_id %q: %d %s, want 409 (a's request holds the account)", key, c.code, c.body)
		}
	}
}
