package riot

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"
)

// ErrGrantExpired is wrapped by the transport error of a request that was
// not sent because its rate-limit grant's send deadline had passed when it
// was about to be written (Permit.Send returned false). The Client never
// returns it: it acquires a new permit and sends the request on that one.
var ErrGrantExpired = errors.New("riot: rate-limit grant expired before the request was sent")

// ErrReplayRefused is wrapped by the transport error of a request that
// net/http was about to send a second time on its one grant: it had
// written the request on a reused connection, the connection failed
// before the answer, and the transport, the request being idempotent,
// retried it on another. Riot may have counted the first copy, so the
// copy is not sent: the request fails as a transport error after a write
// (its permit stays in flight, ratelimit's unanswered request), and the
// caller's retry takes a new grant.
var ErrReplayRefused = errors.New("riot: net/http's replay of a request already written refused (one request per rate-limit grant)")

type permitKey struct{}

// withPermit carries p to the transport (sendGuard) in the request's ctx.
func withPermit(ctx context.Context, p Permit) context.Context {
	return context.WithValue(ctx, permitKey{}, p)
}

// NewTransport returns the HTTP/1.1 transport a Client uses by default:
// http.DefaultTransport's settings with maxIdlePerHost idle connections
// per host (0: 64), whose connections check the request's grant
// (Permit.Send) in their first Write of each request, the last moment
// before its bytes reach the socket. Wrap it (metrics, logging) rather
// than replacing it. HTTP/2 is off: a multiplexed connection cannot tell
// whose bytes it writes.
//
// Its connections close with a reset (SO_LINGER 0), so the kernel drops
// what it still holds to send. A request given up on (a timeout: the
// transport closes its connection) therefore cannot reach Riot minutes
// later, when a partition heals, as the retransmission of a normal close
// would let it: it reaches Riot before the give-up or never, which is the
// window the rate limiter keeps an unanswered request counted for
// (ratelimit.Options.UnansweredTTL, at least the client's Timeout).
func NewTransport(maxIdlePerHost int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if maxIdlePerHost <= 0 {
		maxIdlePerHost = 64
	}
	t.MaxIdleConnsPerHost = maxIdlePerHost
	t.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return guarded(t)
}

// guarded is a clone of t whose connections are guardConns that close
// with a reset (NewTransport), HTTP/1.1 only. The Client puts every
// *http.Transport it is given through it, so the grant check runs in the
// connection's Write on any of them, a connection of t's own
// DialTLSContext included (its TLS state is then not in resp.TLS:
// net/http reads it only from a *tls.Conn).
func guarded(t *http.Transport) *http.Transport {
	t = t.Clone()
	t.ForceAttemptHTTP2 = false
	t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	dial := t.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	t.DialContext = guardDial(dial)
	if t.DialTLSContext != nil {
		t.DialTLSContext = guardDial(t.DialTLSContext)
	}
	return t
}

// guardDial is dial whose connections are guardConns closing with a
// reset (SO_LINGER 0 on the TCP connection, under TLS too).
func guardDial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		raw := c
		if tc, ok := c.(*tls.Conn); ok {
			raw = tc.NetConn()
		}
		if tc, ok := raw.(*net.TCPConn); ok {
			if err := tc.SetLinger(0); err != nil {
				c.Close()
				return nil, err
			}
		}
		return &guardConn{Conn: c}, nil
	}
}

// guardConn is a connection of NewTransport: the request about to be
// written on it (armed by sendGuard when the transport hands it the
// connection) is checked in the first Write.
type guardConn struct {
	net.Conn
	armed atomic.Pointer[sendOnce]
}

// Write checks the armed request's grant before its first bytes go, and
// reports them written (Permit.Written) once the socket took them:
// net/http's WroteRequest comes before that, when the request is still in
// the connection's buffer.
func (c *guardConn) Write(b []byte) (int, error) {
	s := c.armed.Swap(nil)
	if s != nil && !s.send() {
		return 0, ErrGrantExpired
	}
	n, err := c.Conn.Write(b)
	if s != nil && err == nil {
		s.written()
	}
	return n, err
}

// guardOf is c's guardConn, also under TLS; nil if it has none.
func guardOf(c net.Conn) *guardConn {
	if t, ok := c.(*tls.Conn); ok {
		c = t.NetConn()
	}
	g, _ := c.(*guardConn)
	return g
}

// sendOnce calls Permit.Send once for one request; an expired grant
// cancels the request's context, so the transport does not retry it on
// another connection.
type sendOnce struct {
	p       Permit
	cancel  context.CancelFunc
	once    sync.Once
	ok      bool
	expired atomic.Bool
	// checked is set once send ran (after ok); wroteOnce reports the
	// write (Permit.Written) at most once, after a send that passed.
	checked   atomic.Bool
	wroteOnce sync.Once
	// wrote is set once the request was written on a connection;
	// replayed when the transport then took another connection for it.
	wrote, replayed atomic.Bool
}

// refused is armed on the connection net/http took to replay a written
// request (sendGuard): its first Write fails, nothing is sent.
var refused = func() *sendOnce {
	s := &sendOnce{cancel: func() {}}
	s.once.Do(func() {})
	return s
}()

func (s *sendOnce) send() bool {
	s.once.Do(func() {
		s.ok = s.p.Send()
		if !s.ok {
			s.expired.Store(true)
			s.cancel()
		}
		s.checked.Store(true) // after ok: a reader that sees checked sees ok
	})
	return s.ok
}

// written reports the request written (Permit.Written), once, if its
// grant passed send.
func (s *sendOnce) written() {
	if s.ok {
		s.wroteOnce.Do(s.p.Written)
	}
}

// sendGuard is the outermost http.RoundTripper of a Client: it makes sure
// the request's grant (Permit.Send) is checked immediately before the
// request is written, and refuses to send on an expired grant. On a
// NewTransport connection the check runs in the connection's first Write
// of the request; on any other transport, when the connection is handed
// over (httptrace GotConn), or before the transport is called if it never
// is. It reports the write (Permit.Written) so the limiter can measure
// how long a checked request takes to reach the wire.
type sendGuard struct{ next http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (g sendGuard) RoundTrip(r *http.Request) (*http.Response, error) {
	next := g.next
	if next == nil {
		next = http.DefaultTransport
	}
	p, _ := r.Context().Value(permitKey{}).(Permit)
	if p == nil {
		return next.RoundTrip(r)
	}
	ctx, cancel := context.WithCancel(r.Context())
	s := &sendOnce{p: p, cancel: cancel}
	trace := &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			if s.wrote.Load() {
				// A replay of the request already written (ErrReplayRefused).
				s.replayed.Store(true)
				if gc := guardOf(info.Conn); gc != nil {
					gc.armed.Store(refused)
				}
				cancel()
				return
			}
			if gc := guardOf(info.Conn); gc != nil {
				gc.armed.Store(s)
				return
			}
			s.send()
		},
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				s.wrote.Store(true)
			}
			if s.checked.Load() {
				// Checked at GotConn or before the transport; on a
				// guardConn the check and the report come in its Write.
				s.written()
			}
		},
	}
	if _, ok := next.(*http.Transport); !ok && !wrapsGuarded(next) {
		// A transport that may not report GotConn: check now.
		if !s.send() {
			cancel()
			return nil, ErrGrantExpired
		}
	}
	resp, err := next.RoundTrip(r.WithContext(httptrace.WithClientTrace(ctx, trace)))
	if s.replayed.Load() {
		if resp != nil {
			resp.Body.Close()
		}
		cancel()
		return nil, ErrReplayRefused
	}
	if s.expired.Load() {
		if resp != nil {
			resp.Body.Close()
		}
		cancel()
		return nil, ErrGrantExpired
	}
	if resp == nil {
		cancel()
		return resp, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, err
}

// wrapsGuarded reports whether rt declares that it passes requests to an
// *http.Transport (which reports GotConn), as a metrics wrapper does.
func wrapsGuarded(rt http.RoundTripper) bool {
	w, ok := rt.(interface{ Unwrap() http.RoundTripper })
	if !ok {
		return false
	}
	switch n := w.Unwrap().(type) {
	case *http.Transport:
		return true
	default:
		return wrapsGuarded(n)
	}
}

// cancelOnClose releases the request's context when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
