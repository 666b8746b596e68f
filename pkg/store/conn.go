package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/riftflow/riftflow/pkg/config"
)

// DefaultCallTimeout bounds how long a connection waits for Postgres to
// answer or to take bytes: past it the call fails (Transient, so the
// consumer's probe takes over) and the connection is dropped. It exceeds
// DefaultStatementTimeout, after which a live server answers with an error
// anyway, so it only ends waits on a dead or black-holed TCP path, which
// TCP itself would take about 15 minutes to notice. Open raises it to the
// URL's statement_timeout + 15 s when that is longer.
const DefaultCallTimeout = 45 * time.Second

// Option configures Open.
type Option func(*openOptions)

// openOptions are what the Options given to Open and Dial set.
type openOptions struct {
	callTimeout time.Duration
	maxConns    int32
}

// WithCallTimeout replaces the call timeout (DefaultCallTimeout, or the
// URL's statement_timeout + 15 s) with d; d <= 0 turns it off.
func WithCallTimeout(d time.Duration) Option {
	return func(o *openOptions) { o.callTimeout = d }
}

// callTimeout is DefaultCallTimeout, or statement_timeout + 15 s when the
// session's statement_timeout (Postgres syntax: "30s", "2min", "5000" ms)
// is longer; statement_timeout 0 (none) keeps the default.
func callTimeout(cc *pgconn.Config) time.Duration {
	st, ok := parsePGDuration(cc.RuntimeParams["statement_timeout"])
	if !ok || st+15*time.Second < DefaultCallTimeout {
		return DefaultCallTimeout
	}
	return st + 15*time.Second
}

// parsePGDuration reads a Postgres time setting: a number of milliseconds
// or a number with a unit (us, ms, s, min, h, d).
func parsePGDuration(v string) (time.Duration, bool) {
	var n float64
	var unit string
	if c, _ := fmt.Sscanf(v, "%g%s", &n, &unit); c == 0 {
		return 0, false
	}
	mult := map[string]time.Duration{"": time.Millisecond, "us": time.Microsecond, "ms": time.Millisecond,
		"s": time.Second, "min": time.Minute, "h": time.Hour, "d": 24 * time.Hour}[unit]
	if mult == 0 || n <= 0 {
		return 0, false
	}
	return time.Duration(n * float64(mult)), true
}

// withCallTimeout makes every connection of cc fail a read or write that
// waits longer than d.
func withCallTimeout(cc *pgconn.Config, d time.Duration) {
	if d <= 0 {
		return
	}
	dial := cc.DialFunc
	cc.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &deadlineConn{Conn: c, limit: d}, nil
	}
}

// ErrNoAnswer is wrapped by the error of a call that waited longer than
// the call timeout (DefaultCallTimeout) for Postgres.
var ErrNoAnswer = errors.New("store: no answer from Postgres within the call timeout")

// deadlineConn is a net.Conn whose every Read and Write waits at most
// limit, unless pgconn set an earlier deadline itself (its context
// cancellation does), which is kept.
type deadlineConn struct {
	net.Conn
	limit time.Duration

	mu          sync.Mutex
	read, write time.Time // deadlines set by the connection's user
}

func (c *deadlineConn) Read(b []byte) (int, error) {
	return c.within(&c.read, c.Conn.SetReadDeadline, c.Conn.Read, b)
}

func (c *deadlineConn) Write(b []byte) (int, error) {
	return c.within(&c.write, c.Conn.SetWriteDeadline, c.Conn.Write, b)
}

// within runs op (the Conn's Read or Write) on b under the earlier of the
// user's deadline (*user, c.read or c.write, read under c.mu) and limit
// from now, set by setDeadline; the timeout of its own deadline is a
// noAnswerError (timedOut).
func (c *deadlineConn) within(user *time.Time, setDeadline func(time.Time) error, op func([]byte) (int, error), b []byte) (int, error) {
	c.mu.Lock()
	own := time.Now().Add(c.limit)
	d := earliest(*user, own)
	c.mu.Unlock()
	if err := setDeadline(d); err != nil {
		return 0, err
	}
	n, err := op(b)
	return n, c.timedOut(err, d, own)
}

// timedOut wraps err with ErrNoAnswer when it is the timeout of our own
// deadline (d == own), keeping it a net.Error timeout.
func (c *deadlineConn) timedOut(err error, d, own time.Time) error {
	if err == nil || !d.Equal(own) || !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	return &noAnswerError{err: err, limit: c.limit}
}

func (c *deadlineConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.read, c.write = t, t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.read = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *deadlineConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.write = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

func earliest(set, own time.Time) time.Time {
	if !set.IsZero() && set.Before(own) {
		return set
	}
	return own
}

// noAnswerError is a call timeout: a net.Error timeout wrapping
// ErrNoAnswer and the socket's own error.
type noAnswerError struct {
	err   error
	limit time.Duration
}

func (e *noAnswerError) Error() string {
	return fmt.Sprintf("%v (%s): %v", ErrNoAnswer, e.limit, e.err)
}
func (e *noAnswerError) Unwrap() []error { return []error{ErrNoAnswer, e.err} }
func (e *noAnswerError) Timeout() bool   { return true }
func (e *noAnswerError) Temporary() bool { return true }

// Connect opens the pool of cfg (DATABASE_URL, at most
// DATABASE_POOL_MAX_CONNS connections; Open), failing when DATABASE_URL is
// not set.
func Connect(ctx context.Context, cfg config.Postgres) (*Store, error) {
	if cfg.URL == "" {
		return nil, errors.New("DATABASE_URL is not set")
	}
	return Open(ctx, cfg.URL.Reveal(), MaxConns(cfg.PoolMaxConns))
}

// Process is what ConnectFor registers a pool with (an app.Process): its
// closing when the process ends, its readiness check.
type Process interface {
	OnClose(func())
	AddCheck(name string, check func(context.Context) error)
}

// ConnectFor is Connect for process p: the pool is closed when p closes
// and its Ping is p's "postgres" readiness check.
func ConnectFor(ctx context.Context, cfg config.Postgres, p Process) (*Store, error) {
	st, err := Connect(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	p.OnClose(st.Close)
	p.AddCheck("postgres", st.Ping)
	return st, nil
}
