package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/pkg/control"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/synclock"
	"github.com/riftflow/riftflow/services/riftflow/api/apitest"
	"github.com/riftflow/riftflow/streams"
)

// problemCase is one request that must fail: route is the routeTable
// pattern it exercises ("" for a path no route takes).
type problemCase struct {
	route        string
	method, path string
	body         string
	want         int
}

// TestEveryErrorIsProblemJSON walks every route's error paths (no or a bad
// token, too weak a scope, bad input, unknown ids, a body over the limit,
// a sync conflict, too many event streams, the pause switch, the database
// down, unknown paths and methods) and checks that each answer is RFC 9457
// application/problem+json with the right shape (type about:blank, title
// the status text, status the code, a detail, instance the path), and that
// openapi.json documents that status as a problem for that route. Every
// route of the table must have an error case beyond authentication.
func TestEveryErrorIsProblemJSON(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	api := newAPI(e)
	admin, _ := newToken(t, e, "admin", ScopeAdmin)
	reader, _ := newToken(t, e, "reader", ScopeRead)
	srv := httptest.NewServer(api.Handler())
	defer srv.Close()

	// An account that is syncing: its lock is held by another request.
	p := struct{ PUUID string }{"problem-test-syncing-puuid"}
	locks, err := e.Process.Lock(ctx, streams.BucketSyncLocks)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := synclock.Claim(ctx, locks, p.PUUID, "holder-1", time.Minute, time.Now()); err != nil {
		t.Fatal(err)
	}
	unknown := strings.Repeat("u", 78)
	big := `{"puuid":"` + strings.Repeat("x", 20<<10) + `"}`
	cases := []problemCase{
		{"POST /v1/sync", "POST", "/v1/sync", `{`, 400},
		{"POST /v1/sync", "POST", "/v1/sync", `{"puuid":"x","platform":"na1","bogus":1}`, 400},
		{"POST /v1/sync", "POST", "/v1/sync", big, 413},
		{"POST /v1/sync", "POST", "/v1/sync", fmt.Sprintf(`{"puuid":%q,"platform":"na1"}`, p.PUUID), 409},
		{"GET /v1/accounts/{puuid}", "GET", "/v1/accounts/" + unknown, "", 404},
		{"GET /v1/accounts/{puuid}", "GET", "/v1/accounts/not%20an%20id", "", 404},
		{"POST /v1/accounts/{puuid}/link", "POST", "/v1/accounts/" + unknown + "/link", `{"platform":"nowhere"}`, 400},
		{"POST /v1/accounts/{puuid}/link", "POST", "/v1/accounts/" + unknown + "/link", big, 413},
		{"POST /v1/accounts/{puuid}/link", "POST", "/v1/accounts/" + p.PUUID + "/link", `{"platform":"na1"}`, 409},
		{"POST /v1/accounts/{puuid}/unlink", "POST", "/v1/accounts/" + unknown + "/unlink", "", 404},
		{"POST /v1/accounts/{puuid}/login", "POST", "/v1/accounts/" + unknown + "/login", "", 404},
		{"GET /v1/sync/{request_id}/events", "GET", "/v1/sync/no%20such/events", "", 404},
		{"GET /v1/sync/{request_id}/events", "GET", "/v1/sync/never-submitted/events", "", 404},
		{"POST /v1/admin/retry", "POST", "/v1/admin/retry", `{}`, 400},
		{"POST /v1/admin/retry", "POST", "/v1/admin/retry", `{"bogus":true}`, 400},
		{"PUT /v1/admin/pause", "PUT", "/v1/admin/pause", `{"paused":"yes"}`, 400},
		{"PUT /v1/admin/pause", "PUT", "/v1/admin/pause", `{"paused":true,"reason":"` + strings.Repeat("r", 300) + `"}`, 400},
		{"DELETE /v1/admin/accounts/{puuid}", "DELETE", "/v1/admin/accounts/" + unknown, "", 404},
		{"GET /v1/players/{puuid}", "GET", "/v1/players/" + unknown, "", 404},
		{"GET /v1/players/{puuid}/matches", "GET", "/v1/players/" + p.PUUID + "/matches?limit=0", "", 400},
		{"GET /v1/players/{puuid}/matches", "GET", "/v1/players/" + p.PUUID + "/matches?cursor=%21%21", "", 400},
		{"GET /v1/matches/{match_id}", "GET", "/v1/matches/NA1_1", "", 404},
		{"GET /v1/matches/{match_id}/timeline", "GET", "/v1/matches/NA1_1/timeline", "", 404},
		{"", "GET", "/v1/no-such-route", "", 404},
		{"", "DELETE", "/v1/sync", "", 405},
	}
	// fill makes a route's pattern a path.
	fill := strings.NewReplacer("{puuid}", p.PUUID, "{match_id}", "NA1_1", "{request_id}", "r1")
	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.route] = true
		checkProblem(t, srv.URL, admin, c)
	}
	// Authentication and scope, on every route.
	for _, rt := range api.routeTable() {
		method, path, _ := strings.Cut(rt.pattern, " ")
		path = fill.Replace(path)
		checkProblem(t, srv.URL, "", problemCase{rt.pattern, method, path, "", 401})
		checkProblem(t, srv.URL, "rft_not-a-token", problemCase{rt.pattern, method, path, "", 401})
		if rt.scope != ScopeRead {
			checkProblem(t, srv.URL, reader, problemCase{rt.pattern, method, path, "", 403})
			covered[rt.pattern] = true
		}
	}

	// Too many event streams: 429.
	capped := newAPI(e)
	capped.Limits.SSETotal = 0
	srvCapped := httptest.NewServer(capped.Handler())
	defer srvCapped.Close()
	checkProblem(t, srvCapped.URL, admin, problemCase{"GET /v1/sync/{request_id}/events", "GET", "/v1/sync/r1/events", "", 429})

	// The database down: 503 from every route but the pause switch; the
	// tokens are checked against the live store, so the guard answers.
	down, err := store.Open(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	down.Close()
	apiDown := New(e.Process, down)
	apiDown.tokens = NewTokens(e.Store)
	srvDown := httptest.NewServer(apiDown.Handler())
	defer srvDown.Close()
	for _, rt := range api.routeTable() {
		if strings.HasSuffix(rt.pattern, "/v1/admin/pause") {
			continue
		}
		method, path, _ := strings.Cut(rt.pattern, " ")
		path = fill.Replace(path)
		checkProblem(t, srvDown.URL, admin, problemCase{rt.pattern, method, path, "{}", 503})
		covered[rt.pattern] = true
	}

	// Paused: 503 from every route that changes something.
	ctl, err := e.Process.KV(ctx, streams.BucketControl)
	if err != nil {
		t.Fatal(err)
	}
	if err := control.Set(ctx, ctl, control.State{Paused: true, Reason: "problem test"}); err != nil {
		t.Fatal(err)
	}
	e.Wait("the API to see the pause", func() bool { return e.Process.Pause.Paused() })
	for _, rt := range api.routeTable() {
		method, path, _ := strings.Cut(rt.pattern, " ")
		if method == "GET" || strings.HasSuffix(rt.pattern, "/v1/admin/pause") {
			continue
		}
		path = fill.Replace(path)
		checkProblem(t, srv.URL, admin, problemCase{rt.pattern, method, path, "{}", 503})
	}
	if err := control.Set(ctx, ctl, control.State{Paused: false}); err != nil {
		t.Fatal(err)
	}

	for _, rt := range api.routeTable() {
		if !covered[rt.pattern] {
			t.Errorf("route %s has no error case beyond authentication", rt.pattern)
		}
	}
}

// checkProblem sends c (with token, if any) and checks the answer is the
// problem+json c wants, documented for c's route in openapi.json.
func checkProblem(t *testing.T, base, token string, c problemCase) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	resp := apitest.Send(t, ctx, c.method, base+c.path, token, strings.NewReader(c.body))
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	what := fmt.Sprintf("%s %s (token %t)", c.method, c.path, token != "")
	if resp.StatusCode != c.want {
		t.Errorf("%s: %d %s, want %d", what, resp.StatusCode, body, c.want)
		return
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("%s: %d with Content-Type %q, want application/problem+json", what, c.want, ct)
	}
	var p Problem
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Errorf("%s: body %s is not a problem: %v", what, body, err)
		return
	}
	u, err := url.Parse(base + c.path)
	if err != nil {
		t.Fatal(err)
	}
	wantPath := strings.SplitN(u.Path, "?", 2)[0]
	if p.Type != "about:blank" || p.Title != http.StatusText(c.want) || p.Status != c.want || p.Detail == "" || p.Instance != wantPath {
		t.Errorf("%s: problem %+v: want type about:blank, title %q, status %d, a detail, instance %q", what, p, http.StatusText(c.want), c.want, wantPath)
	}
	if c.want == http.StatusMethodNotAllowed && resp.Header.Get("Allow") == "" {
		t.Errorf("%s: 405 without Allow", what)
	}
	if c.route != "" && !documentedProblem(t, c.route, c.want) {
		t.Errorf("%s: openapi.json does not document %d (problem+json) for %s", what, c.want, c.route)
	}
}

// documentedProblem reports whether openapi.json lists status for the
// route pattern ("METHOD /path") as an application/problem+json response.
func documentedProblem(t *testing.T, pattern string, status int) bool {
	t.Helper()
	var doc struct {
		Paths      map[string]map[string]struct{ Responses map[string]json.RawMessage } `json:"paths"`
		Components struct {
			Responses map[string]struct {
				Content map[string]json.RawMessage `json:"content"`
			} `json:"responses"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		t.Fatal(err)
	}
	method, path, _ := strings.Cut(pattern, " ")
	raw, ok := doc.Paths[path][strings.ToLower(method)].Responses[fmt.Sprint(status)]
	if !ok {
		return false
	}
	var r struct {
		Ref     string                     `json:"$ref"`
		Content map[string]json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return false
	}
	if name, ok := strings.CutPrefix(r.Ref, "#/components/responses/"); ok {
		r.Content = doc.Components.Responses[name].Content
	}
	_, ok = r.Content["application/problem+json"]
	return ok
}
