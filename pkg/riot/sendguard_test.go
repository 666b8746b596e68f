package riot

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
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
// deadline) closes its connection with a reset, not a normal close, so
// the kernel drops what it still had to send instead of retransmitting it
// to Riot after a partition heals (see NewTransport). That holds on
// NewTransport and on a caller's transport that dials TLS itself
// (DialTLSContext), which the Client guards too. The server reads the
// request, never answers, and then reads the TCP connection to its end:
// ECONNRESET, not EOF (under TLS, after the client's close_notify).
func TestGivenUpRequestIsReset(t *testing.T) {
	cert := httptest.NewTLSServer(http.NotFoundHandler()) // for its certificate and a client trusting it
	t.Cleanup(cert.Close)
	for name, tc := range map[string]struct {
		wrap   func(net.Conn) net.Conn
		scheme string
		client func() *http.Client
	}{
		"NewTransport": {func(c net.Conn) net.Conn { return c }, "http",
			func() *http.Client { return &http.Client{Transport: NewTransport(0)} }},
		"DialTLSContext": {func(c net.Conn) net.Conn { return tls.Server(c, cert.TLS) }, "https",
			func() *http.Client {
				d := &tls.Dialer{Config: cert.Client().Transport.(*http.Transport).TLSClientConfig}
				return sendingClient(&http.Client{Transport: &http.Transport{DialTLSContext: d.DialContext}})
			}},
	} {
		t.Run(name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			after := make(chan error, 1)
			go func() {
				raw, err := ln.Accept()
				if err != nil {
					after <- err
					return
				}
				defer raw.Close()
				if _, err := tc.wrap(raw).Read(make([]byte, 4096)); err != nil { // the request; no answer
					after <- err
					return
				}
				raw.SetReadDeadline(time.Now().Add(5 * time.Second))
				_, err = io.Copy(io.Discard, raw)
				after <- err
			}()
			ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
			defer cancel()
			ctx = withPermit(ctx, &countingPermit{})
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, tc.scheme+"://"+ln.Addr().String()+"/lol/match/v5/matches/NA1_1", nil)
			if resp, err := tc.client().Do(req); err == nil {
				resp.Body.Close()
				t.Fatal("a server that never answers answered")
			}
			if err := <-after; !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("after the client gave up, the server's read returned %v; want a connection reset", err)
			}
		})
	}
}

// countingPermit counts Send and records Done's status.
type countingPermit struct {
	sends atomic.Int32
	done  atomic.Int32 // status + 1 once Done ran
}

func (p *countingPermit) Send() bool                     { p.sends.Add(1); return true }
func (p *countingPermit) Written()                       {}
func (p *countingPermit) Done(status int, _ http.Header) { p.done.Store(int32(status) + 1) }
func (p *countingPermit) Cancel()                        {}

// TestTransportReplayNeedsANewGrant: net/http retries an idempotent
// request on a new connection when a reused connection fails after the
// request was written (here the server reads it, then resets the
// connection), and Riot may have counted the first copy. The send guard
// refuses that replay: one request on the wire per grant; the caller
// sees a transport error and asks the limiter again.
func TestTransportReplayNeedsANewGrant(t *testing.T) {
	var hits atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for conn := 0; ; conn++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn, first bool) {
				defer c.Close()
				r := bufio.NewReader(c)
				for n := 0; ; n++ {
					req, err := http.ReadRequest(r)
					if err != nil {
						return
					}
					hits.Add(1)
					if first && n == 1 { // the second request on the first connection
						c.(*net.TCPConn).SetLinger(0)
						return
					}
					_ = req
					c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]"))
				}
			}(c, conn == 0)
		}
	}()
	hc := &http.Client{Transport: sendGuard{next: NewTransport(0)}}
	get := func(p Permit) error {
		req, _ := http.NewRequestWithContext(withPermit(t.Context(), p), http.MethodGet, "http://"+ln.Addr().String()+"/x", nil)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	p1, p2 := &countingPermit{}, &countingPermit{}
	if err := get(p1); err != nil {
		t.Fatal(err)
	}
	err = get(p2)
	if got := hits.Load(); got != 2 {
		t.Fatalf("the server read %d requests for 2 grants (err %v): the transport replayed a written request on the same grant", got, err)
	}
	if err == nil {
		t.Fatal("a request whose connection was reset after the write succeeded without a replay")
	}
}

// orderLimiter grants permits that record the order of their calls.
type orderLimiter struct {
	mu      sync.Mutex
	permits []*orderPermit
}

type orderPermit struct {
	l      *orderLimiter
	events []string // mu
}

func (l *orderLimiter) Acquire(context.Context, Call) (Permit, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := &orderPermit{l: l}
	l.permits = append(l.permits, p)
	return p, nil
}

func (p *orderPermit) record(e string) {
	p.l.mu.Lock()
	p.events = append(p.events, e)
	p.l.mu.Unlock()
}

func (p *orderPermit) Send() bool            { p.record("Send"); return true }
func (p *orderPermit) Written()              { p.record("Written") }
func (p *orderPermit) Done(int, http.Header) { p.record("Done") }
func (p *orderPermit) Cancel()               { p.record("Cancel") }

// TestWrittenAfterSend: every transport reports a request written
// (Permit.Written) once, after its grant passed Send, so the limiter
// measures the time from the check to the wire. net/http's WroteRequest
// comes while the request is still in the connection's buffer, before a
// guarded connection's Write (where Send runs): there the report comes
// from the Write, once the socket took it (the answer, and Done, may
// overtake it).
func TestWrittenAfterSend(t *testing.T) {
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("[]")) }))
	t.Cleanup(plain.Close)
	secure := httptest.NewTLSServer(plain.Config.Handler)
	t.Cleanup(secure.Close)
	d := &tls.Dialer{Config: secure.Client().Transport.(*http.Transport).TLSClientConfig}
	for name, tc := range map[string]struct {
		url string
		hc  *http.Client
	}{
		"default":        {plain.URL, nil},
		"transport":      {plain.URL, &http.Client{Transport: &http.Transport{}}},
		"other":          {plain.URL, &http.Client{Transport: roundTripperFunc(http.DefaultTransport.RoundTrip)}},
		"DialTLSContext": {secure.URL, &http.Client{Transport: &http.Transport{DialTLSContext: d.DialContext}}},
	} {
		t.Run(name, func(t *testing.T) {
			lim := &orderLimiter{}
			c, err := New(Config{APIKey: "RGAPI-x", BaseURL: tc.url + "/{route}", Limiter: lim, HTTPClient: tc.hc})
			if err != nil {
				t.Fatal(err)
			}
			for range 2 { // a new connection, then the same one again
				if _, err := c.MatchIDsByPUUID(t.Context(), "americas", "p", MatchIDsQuery{}); err != nil {
					t.Fatal(err)
				}
			}
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				lim.mu.Lock() // the last report may come after the answer
				n := len(lim.permits[1].events)
				lim.mu.Unlock()
				if n >= 3 {
					break
				}
			}
			lim.mu.Lock()
			defer lim.mu.Unlock()
			for i, p := range lim.permits {
				got := strings.Join(p.events, " ")
				if got != "Send Written Done" && got != "Send Done Written" {
					t.Errorf("request %d: permit calls %q, want Send, then Written and Done once each", i+1, got)
				}
			}
		})
	}
}
