package api

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// streamGate counts open SSE streams per token and in total.
type streamGate struct {
	mu       sync.Mutex
	total    int
	perToken map[string]int
}

// acquire takes a slot for token, or reports false when token already
// holds perToken streams or total are open. release gives it back.
func (g *streamGate) acquire(token string, perToken, total int) (release func(), ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.total >= total || g.perToken[token] >= perToken {
		return nil, false
	}
	g.total++
	g.perToken[token]++
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.total--
			if g.perToken[token]--; g.perToken[token] <= 0 {
				delete(g.perToken, token)
			}
		})
	}, true
}

// recentIDs remembers up to max ids for ttl (request ids this API
// submitted, so an event stream opened before the lister records the job
// is not a 404).
type recentIDs struct {
	mu  sync.Mutex
	max int
	ttl time.Duration
	at  map[string]time.Time
}

func newRecentIDs(max int, ttl time.Duration) *recentIDs {
	return &recentIDs{max: max, ttl: ttl, at: map[string]time.Time{}}
}

func (r *recentIDs) add(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if len(r.at) >= r.max {
		for k, t := range r.at {
			if now.Sub(t) > r.ttl || len(r.at) >= r.max {
				delete(r.at, k)
			}
		}
	}
	r.at[id] = now
}

func (r *recentIDs) has(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.at[id]
	return ok && time.Since(t) <= r.ttl
}

// ServerTimeouts are the API server's connection timeouts.
type ServerTimeouts struct {
	ReadHeader, Read, Write, Idle time.Duration
}

// DefaultTimeouts are `riftflow up`'s. Event streams clear their read deadline
// and extend their write deadline at every write (syncEvents), so Read and
// Write only bound ordinary requests.
var DefaultTimeouts = ServerTimeouts{ReadHeader: 5 * time.Second, Read: 15 * time.Second, Write: 30 * time.Second, Idle: 60 * time.Second}

const apiMaxHeaderBytes = 32 << 10

// NewServer is the http.Server for h with timeouts t, the request log
// and a header limit; its requests' contexts end when ctx does.
func NewServer(ctx context.Context, h http.Handler, log *slog.Logger, t ServerTimeouts) *http.Server {
	return &http.Server{
		Handler:           logRequests(h, log),
		ReadHeaderTimeout: t.ReadHeader,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
		MaxHeaderBytes:    apiMaxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// statusRecorder keeps the status code of a response; Unwrap lets
// http.ResponseController reach the connection (Flush, write deadlines).
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// logRequests logs every request at debug (4xx/5xx at info): method, path
// (no query: it may hold ids a client considers private), status,
// duration and the remote address. Headers, the query and bodies are never
// logged, so neither the Authorization header nor a token can reach a log
// line.
func logRequests(h http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		start := time.Now()
		h.ServeHTTP(rec, r)
		level := slog.LevelDebug
		if rec.code >= 400 {
			level = slog.LevelInfo
		}
		remote := r.RemoteAddr
		if ap, err := netip.ParseAddrPort(remote); err == nil {
			remote = ap.Addr().String()
		}
		log.Log(r.Context(), level, "http request", "method", r.Method, "path", r.URL.Path, "status", rec.code,
			"duration", time.Since(start).Round(time.Microsecond), "remote", remote)
	})
}

// isLoopback reports whether addr ("host:port") listens on loopback only:
// 127.0.0.0/8, ::1 or "localhost". ":8080" and "0.0.0.0:8080" listen on
// every interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// DefaultAddr is where `riftflow up` serves the API without
// --http-addr or HTTP_ADDR: loopback only.
const DefaultAddr = "127.0.0.1:8080"

// Addr is the API's listen address: flag, else env (HTTP_ADDR), else
// DefaultAddr. An address beyond loopback (":8080", "0.0.0.0:8080", a
// LAN address) is an error unless expose is set.
func Addr(flagAddr, envAddr string, expose bool) (string, error) {
	addr := flagAddr
	if addr == "" {
		addr = envAddr
	}
	if addr == "" {
		addr = DefaultAddr
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", fmt.Errorf("invalid API address %q: %w", addr, err)
	}
	if !isLoopback(addr) && !expose {
		return "", fmt.Errorf("the API address %s listens beyond loopback: pass --expose to serve it on other interfaces "+
			"(it is authenticated but not encrypted; see docs/security.md), or use 127.0.0.1", addr)
	}
	return addr, nil
}
