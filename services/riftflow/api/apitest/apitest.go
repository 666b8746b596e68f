// Package apitest is the client side of the HTTP API in tests: tokens,
// calls and their answers, Server-Sent Events, and servers on loopback
// ports. Only _test.go files import it (it imports package testing); it
// does not import package api, so the API's own tests use it too.
package apitest

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/stagetest"
)

// TokenMaker issues API tokens (api.Tokens).
type TokenMaker[S ~string, T any] interface {
	Create(ctx context.Context, name string, scopes []S) (string, T, error)
}

// NewToken creates a token named name with scopes through m and returns
// its secret and its row, or fails the test.
func NewToken[S ~string, T any](t testing.TB, m TokenMaker[S, T], name string, scopes ...S) (string, T) {
	t.Helper()
	token, row, err := m.Create(context.Background(), name, scopes)
	if err != nil {
		t.Fatal(err)
	}
	return token, row
}

// WithToken serves h with an Authorization header carrying token, for
// tests about something other than authentication (the token still goes
// through the API's middleware).
func WithToken(h http.Handler, token string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+token)
		h.ServeHTTP(w, r)
	})
}

// Send sends method url with body (nil for none) within ctx, with token
// unless ""; a request that gets no answer fails the test.
func Send(t *testing.T, ctx context.Context, method, url, token string, body io.Reader) *http.Response {
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

// Response is a whole answer of Call.
type Response struct {
	Code   int
	Header http.Header
	Body   []byte
}

// Call sends method url with body and token (each unless "") and reads
// the whole answer, within 15 s.
func Call(t *testing.T, method, url, token, body string) Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	resp := Send(t, ctx, method, url, token, strings.NewReader(body))
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return Response{resp.StatusCode, resp.Header, b}
}

// Problem checks an RFC 9457 answer with code: application/problem+json
// whose status is code and whose title is its status text.
func (c Response) Problem(t *testing.T, what string, code int) {
	t.Helper()
	var p struct {
		Status int    `json:"status"`
		Title  string `json:"title"`
	}
	if c.Code != code || c.Header.Get("Content-Type") != "application/problem+json" ||
		json.Unmarshal(c.Body, &p) != nil || p.Status != code || p.Title != http.StatusText(code) {
		t.Errorf("%s: %d %q %s, want %d application/problem+json", what, c.Code, c.Header.Get("Content-Type"), c.Body, code)
	}
}

// JSONCall sends body (JSON) to base+path and decodes the answer into
// out; it returns the status code and the Content-Type.
func JSONCall(t *testing.T, base, method, path, body string, out any) (int, string) {
	t.Helper()
	c := Call(t, method, base+path, "", body)
	json.Unmarshal(c.Body, out)
	return c.Code, c.Header.Get("Content-Type")
}

// Get GETs url (with extra header pairs) and returns the answer and its
// body; a request without an answer fails the test.
func Get(t *testing.T, url string, hdr ...string) (*http.Response, []byte) {
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

// SSEEvents reads GET url (with token, unless "") as Server-Sent Events
// until the server ends the stream or timeout passes, and returns the
// (event, data) pairs.
func SSEEvents(t *testing.T, url, token string, timeout time.Duration) [][2]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	resp := Send(t, ctx, http.MethodGet, url, token, nil)
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

// FreeAddr is a free port on 127.0.0.1, as host:port.
func FreeAddr(t testing.TB) string { return "127.0.0.1:" + strconv.Itoa(stagetest.FreePort(t)) }

// ServeLoopback serves srv on a free loopback port until the test ends,
// and returns its base URL.
func ServeLoopback(t testing.TB, srv *http.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}
