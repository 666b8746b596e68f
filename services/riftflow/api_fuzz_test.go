package riftflow

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/bus"
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
//   - the {puuid} and {request_id} path parameters (validID): an accepted
//     id holds no subject or path metacharacter.
func FuzzAPIRequest(f *testing.F) {
	for _, s := range [][4]string{
		{"POST", "/v1/sync", `{"riot_id":"Hide on bush#KR1","platform":"kr"}`, ""},
		{"POST", "/v1/accounts/p-1/link", `{"platform":"na1","riot_id":"a#b"}`, "Bearer rft_0123456789abcdef_" + strings.Repeat("A", 43)},
		{"GET", "/v1/sync/http-1/events", "", "Bearer x"},
		{"GET", "/v1/accounts/a.b>/", "", "bearer "},
		{"POST", "/v1/accounts/%2e%2e/login", "null", "Basic Zm9vOmJhcg=="},
		{"GET", "/v1/jobs?limit=-1&type=\x00", "", ""},
		{"POST", "/v1/sync", `{"puuid":"x","platform":"na1","trigger":"recovery"}`, ""},
	} {
		f.Add(s[0], s[1], []byte(s[2]), s[3])
	}
	// No Store, no NATS: a handler reached without a live token would
	// panic on the nil infrastructure, so a pass also proves none was.
	api := NewAPI(&app.Infra{})
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
