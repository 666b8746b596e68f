package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/riot"
)

// FuzzAPIRequest covers every API request body and path parameter:
//
//   - through the whole router and the auth middleware with any method,
//     path, body and Authorization header: no panic, and without a live
//     token every /v1 route answers 401 (or 404/405 from the router)
//     before any handler runs;
//   - POST /v1/sync's body (decodeSync) and POST
//     /v1/accounts/{puuid}/link's path parameter and body (decodeLink):
//     errors or a request that re-validates, whose PUUID and platform are
//     safe as NATS subject tokens;
//   - the admin bodies: POST /v1/admin/retry (RetryRequest.validate, as
//     RetryMatches runs it) and PUT /v1/admin/pause (decodePause): errors,
//     or a request within its limits;
//   - the {puuid} and {request_id} path parameters (validID, every route
//     that takes one: accounts, sync events, players, admin accounts) and
//     {match_id} (riot.ParseMatchID, the read API): an accepted id holds no
//     subject or path metacharacter; the read API's cursor query parameter
//     (DecodeCursor) errors or decodes.
//
// TestFuzzCoversEveryRoute keeps this list in step with routeTable.
func FuzzAPIRequest(f *testing.F) {
	for _, s := range [][4]string{
		{"POST", "/v1/sync", `{"riot_id":"Hide on bush#KR1","platform":"kr"}`, ""},
		{"POST", "/v1/accounts/p-1/link", `{"platform":"na1","riot_id":"a#b"}`, "Bearer rft_0123456789abcdef_" + strings.Repeat("A", 43)},
		{"GET", "/v1/sync/http-1/events", "", "Bearer x"},
		{"GET", "/v1/accounts/a.b>/", "", "bearer "},
		{"POST", "/v1/accounts/%2e%2e/login", "null", "Basic Zm9vOmJhcg=="},
		{"GET", "/v1/jobs?limit=-1&type=\x00", "", ""},
		{"POST", "/v1/sync", `{"puuid":"x","platform":"na1","trigger":"recovery"}`, ""},
		{"POST", "/v1/admin/retry", `{"match_ids":["NA1_1"],"dead":true,"limit":100}`, ""},
		{"PUT", "/v1/admin/pause", `{"paused":true,"reason":"maintenance","by":"ops"}`, ""},
		{"GET", "/v1/admin/pause", "", "Bearer rft_x"},
		{"DELETE", "/v1/admin/accounts/p-1", "", ""},
		{"GET", "/v1/players/p-1/matches?limit=5&cursor=MTIzfE5BMV8x", "", ""},
		{"GET", "/v1/matches/NA1_5027407435/timeline", "", ""},
		{"GET", "/openapi.json", "", ""},
	} {
		f.Add(s[0], s[1], []byte(s[2]), s[3])
	}
	// No Store, no NATS: a handler reached without a live token would
	// panic on the nil infrastructure, so a pass also proves none was.
	api := New(nil, nil)
	h := api.Handler()
	f.Fuzz(func(t *testing.T, method, path string, body []byte, auth string) {
		if req, err := http.NewRequest(method, "http://riftflow.test"+path, bytes.NewReader(body)); err == nil {
			req.Header.Set("Authorization", auth)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			switch rec.Code {
			case http.StatusUnauthorized, http.StatusServiceUnavailable, http.StatusNotFound, http.StatusMethodNotAllowed,
				http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusPermanentRedirect, http.StatusBadRequest:
			default:
				t.Fatalf("%s %q without a live token: %d", method, path, rec.Code)
			}
		}

		if req, err := decodeSync(body); err == nil {
			if err := req.Normalize(); err != nil {
				t.Fatalf("accepted sync body fails re-validation: %v", err)
			}
			if req.Trigger == "recovery" {
				t.Fatal("a client claimed the recovery trigger")
			}
			subjectSafe(t, "puuid", req.PUUID)
			subjectSafe(t, "platform", req.Platform)
		} else if !errors.Is(err, bus.ErrBadRequest) {
			t.Fatalf("decodeSync error does not wrap ErrBadRequest: %v", err)
		}

		for _, param := range []string{path, string(body)} {
			req, acct, err := decodeLink(param, bytes.NewReader(body))
			if err != nil {
				continue
			}
			if req.PUUID != param || acct.PUUID != param || req.Mode != bus.ModeFull || acct.Platform != req.Platform {
				t.Fatalf("link %q: request %+v, account %+v", param, req, acct)
			}
			subjectSafe(t, "puuid", req.PUUID)
			subjectSafe(t, "platform", req.Platform)
		}
		var retry RetryRequest
		if err := json.Unmarshal(body, &retry); err == nil && retry.Validate() == nil {
			n := 0
			for _, set := range []bool{len(retry.MatchIDs) > 0, retry.PUUID != "", retry.All} {
				if set {
					n++
				}
			}
			if n > 1 || n == 0 && !retry.Dead || retry.Limit < 1 || retry.Limit > 10000 || len(retry.MatchIDs) > 1000 {
				t.Fatalf("retry body %q accepted as %+v", body, retry)
			}
			for _, id := range retry.MatchIDs {
				if _, _, err := riot.ParseMatchID(id); err != nil {
					t.Fatalf("retry body %q: match ID %q accepted: %v", body, id, err)
				}
				subjectSafe(t, "match id", id)
			}
		}
		if req, err := http.NewRequest(http.MethodPut, "http://riftflow.test/v1/admin/pause", bytes.NewReader(body)); err == nil {
			if st, err := decodePause(req); err == nil && (len(st.Reason) > 200 || len(st.By) > bus.MaxFreeTextLength) {
				t.Fatalf("pause body %q accepted as %+v", body, st)
			}
		}
		if _, _, err := riot.ParseMatchID(path); err == nil {
			subjectSafe(t, "match id", path)
			if strings.ContainsAny(path, "/%?#") {
				t.Fatalf("match id %q accepted", path)
			}
		}
		DecodeCursor(path)
		for _, max := range []int{bus.MaxPUUIDLen, bus.MaxRequestIDLen} {
			if validID(path, max) {
				subjectSafe(t, "path id", path)
				if strings.ContainsAny(path, "/%?#") || len(path) > max {
					t.Fatalf("validID accepted %q", path)
				}
			}
		}
	})
}

// subjectSafe fails when s could change the meaning of a NATS subject it
// is put into (a token separator, a wildcard, whitespace).
func subjectSafe(t *testing.T, what, s string) {
	t.Helper()
	if strings.ContainsAny(s, ".*> \t\r\n\x00") {
		t.Fatalf("%s %q is not a safe subject token", what, s)
	}
}

// TestFuzzCoversEveryRoute: every route of routeTable has a seed in
// FuzzAPIRequest's corpus (so the router and auth part reaches it) and
// every path parameter it takes is one the target checks; a new route or
// parameter fails here until the fuzz target covers it.
func TestFuzzCoversEveryRoute(t *testing.T) {
	src, err := os.ReadFile("api_fuzz_test.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := map[string]bool{"{puuid}": true, "{request_id}": true, "{match_id}": true}
	for _, rt := range New(nil, nil).routeTable() {
		method, pattern, _ := strings.Cut(rt.pattern, " ")
		prefix, _, _ := strings.Cut(pattern, "{")
		if !bytes.Contains(src, []byte(fmt.Sprintf(`{%q, "%s`, method, prefix))) {
			t.Errorf("route %s has no seed in FuzzAPIRequest", rt.pattern)
		}
		for _, part := range strings.Split(pattern, "/") {
			if strings.HasPrefix(part, "{") && !checked[part] {
				t.Errorf("route %s: path parameter %s is not checked by FuzzAPIRequest", rt.pattern, part)
			}
		}
	}
}
