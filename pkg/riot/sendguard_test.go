package riot

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// expiringLimiter grants permits whose Send reports false for the first
// `expire` of them (their deadline passed on the way to the wire).
type expiringLimiter struct {
	mu                            sync.Mutex
	expire                        int
	acquired, sends, dones, cancl int
}

type expiringPermit struct {
	l       *expiringLimiter
	expired bool
}

func (l *expiringLimiter) Acquire(context.Context, Call) (Permit, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acquired++
	return &expiringPermit{l: l, expired: l.acquired <= l.expire}, nil
}

func (p *expiringPermit) Send() bool {
	p.l.mu.Lock()
	defer p.l.mu.Unlock()
	p.l.sends++
	return !p.expired
}
func (p *expiringPermit) Written() {}
func (p *expiringPermit) Done(int, http.Header) {
	p.l.mu.Lock()
	p.l.dones++
	p.l.mu.Unlock()
}
func (p *expiringPermit) Cancel() {
	p.l.mu.Lock()
	p.l.cancl++
	p.l.mu.Unlock()
}

// TestExpiredGrantNeverSent: a grant whose Send reports false is never
// sent, on the default transport (checked in the connection's Write), on
// a plain http.Transport (checked when the connection is handed over)
// and on any other RoundTripper (checked before it): the client takes a
// new permit and sends the request once, on it; the expired permit is
// neither answered nor cancelled (Send returned it).
func TestExpiredGrantNeverSent(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte("[]"))
	}))
	t.Cleanup(srv.Close)
	for name, hc := range map[string]*http.Client{
		"default":   nil,
		"transport": {Transport: &http.Transport{}},
		"other":     {Transport: roundTripperFunc(http.DefaultTransport.RoundTrip)},
	} {
		t.Run(name, func(t *testing.T) {
			hits.Store(0)
			lim := &expiringLimiter{expire: 2}
			c, err := New(Config{APIKey: "RGAPI-x", BaseURL: srv.URL + "/{route}", Limiter: lim, HTTPClient: hc})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.MatchIDsByPUUID(t.Context(), "americas", "p", MatchIDsQuery{}); err != nil {
				t.Fatal(err)
			}
			if hits.Load() != 1 || lim.acquired != 3 || lim.sends != 3 || lim.dones != 1 || lim.cancl != 0 {
				t.Fatalf("server saw %d requests; acquired %d, Send %d, Done %d, Cancel %d; want 1, 3, 3, 1, 0",
					hits.Load(), lim.acquired, lim.sends, lim.dones, lim.cancl)
			}
		})
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestGivenUpRequestIsReset: a request given up on (its context's
// deadline) closes its NewTransport connection with a reset, not a normal
// close, so the kernel drops what it still had to send instead of
// retransmitting it to Riot after a partition heals (see NewTransport).
// The server reads the request, never answers, and then sees
// ECONNRESET, not EOF.
func TestGivenUpRequestIsReset(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	after := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			after <- err
			return
		}
		defer c.Close()
		buf := make([]byte, 4096)
		if _, err := c.Read(buf); err != nil { // the request; no answer
			after <- err
			return
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(buf)
		after <- err
	}()
	hc := &http.Client{Transport: NewTransport(0)}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ln.Addr().String()+"/lol/match/v5/matches/NA1_1", nil)
	if resp, err := hc.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("a server that never answers answered")
	}
	if err := <-after; !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("after the client gave up, the server's read returned %v; want a connection reset", err)
	}
}
