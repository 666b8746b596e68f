package riftflow

// The client side of the HTTP API in tests: tokens, calls and their
// answers, Server-Sent Events, and servers on loopback ports.

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/stagetest"
)

// withToken serves h with an Authorization header carrying a fresh token
// of scope, for tests about something other than authentication (the
// token still goes through authorize).
func withToken(t testing.TB, inf *Infra, h http.Handler, scope Scope) http.Handler {
	t.Helper()
	token, _ := newToken(t, inf, "test "+t.Name(), scope)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+token)
		h.ServeHTTP(w, r)
	})
}

// newToken creates an API token named name with scopes in inf's store
// (Tokens.Create) and returns its secret and its row, or fails the test.
func newToken(t testing.TB, inf *Infra, name string, scopes ...Scope) (string, APIToken) {
	t.Helper()
	token, row, err := NewTokens(inf.Store).Create(context.Background(), name, scopes)
	if err != nil {
		t.Fatal(err)
	}
	return token, row
}

// apiServer serves the HTTP API on inf until the test ends, every request
// with a token of scope (withToken).
func apiServer(t *testing.T, inf *Infra, scope Scope) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(withToken(t, inf, NewAPI(inf).Handler(), scope))
	t.Cleanup(srv.Close)
	return srv
}

// send sends method url with body (nil for none) within ctx, with token
// unless ""; a request that gets no answer fails the test.
func send(t *testing.T, ctx context.Context, method, url, token string, body io.Reader) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, method, url, body)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp
}

type apiCall struct {
	code   int
	header http.Header
	body   []byte
}

// call sends method url with body and token (each unless "") and reads the
// whole answer, within 15 s.
func call(t *testing.T, method, url, token, body string) apiCall {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	resp := send(t, ctx, method, url, token, strings.NewReader(body))
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return apiCall{resp.StatusCode, resp.Header, b}
}

// problem checks an RFC 9457 answer with code.
func (c apiCall) problem(t *testing.T, what string, code int) {
	t.Helper()
	var p Problem
	if c.code != code || c.header.Get("Content-Type") != "application/problem+json" ||
		json.Unmarshal(c.body, &p) != nil || p.Status != code || p.Title != http.StatusText(code) {
		t.Errorf("%s: %d %q %s, want %d application/problem+json", what, c.code, c.header.Get("Content-Type"), c.body, code)
	}
}

// jsonCall sends body (JSON) to base+path and decodes the answer into out;
// it returns the status code and the Content-Type.
func jsonCall(t *testing.T, base, method, path, body string, out any) (int, string) {
	t.Helper()
	c := call(t, method, base+path, "", body)
	json.Unmarshal(c.body, out)
	return c.code, c.header.Get("Content-Type")
}

// sseEvents reads GET url (with token, unless "") as Server-Sent Events
// until the server ends the stream or timeout passes, and returns the
// (event, data) pairs.
func sseEvents(t *testing.T, url, token string, timeout time.Duration) [][2]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	resp := send(t, ctx, http.MethodGet, url, token, nil)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET %s: %d %q", url, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var out [][2]string
	event := ""
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if e, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			event = e
		}
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, [2]string{event, d})
		}
	}
	if ctx.Err() != nil {
		t.Errorf("GET %s: the stream did not end within %v (events %v)", url, timeout, out)
	}
	return out
}

// freeAddr is a free port on 127.0.0.1, as host:port.
func freeAddr(t testing.TB) string { return "127.0.0.1:" + strconv.Itoa(stagetest.FreePort(t)) }

// serveLoopback serves srv on a free loopback port until the test ends,
// and returns its base URL.
func serveLoopback(t testing.TB, srv *http.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}
