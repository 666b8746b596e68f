package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
)

// DefaultAddr is the ops server address when HTTP_ADDR is unset.
const DefaultAddr = ":8080"

// checkTimeout bounds one /readyz evaluation, so a hung dependency makes the
// probe fail rather than hang until the kubelet gives up.
const checkTimeout = 5 * time.Second

// Addr returns the ops server address: HTTP_ADDR, or [DefaultAddr].
func Addr() string {
	if a := os.Getenv("HTTP_ADDR"); a != "" {
		return a
	}
	return DefaultAddr
}

// CheckFunc reports whether a dependency is usable; a non-nil error makes
// /readyz fail. It must honour ctx.
type CheckFunc func(ctx context.Context) error

// Ops is the operational HTTP server of a service:
//
//   - GET /healthz: 200 while the process serves HTTP (liveness).
//   - GET /readyz: runs every check added with [Ops.AddCheck]; 503 with the
//     failing check names when any fails, 200 otherwise (readiness).
//   - GET /metrics: the Prometheus text exposition of the registry.
//   - /debug/pprof/: Go's profiles (net/http/pprof), only when the
//     environment has DEBUG_PPROF=true (off by default: a CPU profile costs
//     CPU and the endpoint is not authenticated).
//
// Further handlers, such as the HTTP API under /v1/, can be mounted with
// [Ops.Handle]. Its methods are safe for concurrent use.
type Ops struct {
	mux    *http.ServeMux
	mu     sync.RWMutex
	checks map[string]CheckFunc
}

// NewOps returns an Ops serving metrics from g (usually
// [Telemetry.Registry]). A nil g serves prometheus.DefaultGatherer.
func NewOps(g prometheus.Gatherer) *Ops {
	if g == nil {
		g = prometheus.DefaultGatherer
	}
	o := &Ops{mux: http.NewServeMux(), checks: map[string]CheckFunc{}}
	o.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	o.mux.HandleFunc("GET /readyz", o.readyz)
	o.mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	if os.Getenv("DEBUG_PPROF") == "true" {
		o.mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		o.mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		o.mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return o
}

// AddCheck registers a readiness check under name, replacing any check
// already registered under that name.
func (o *Ops) AddCheck(name string, check CheckFunc) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.checks[name] = check
}

// Handle mounts h on pattern (http.ServeMux syntax, e.g. "POST /v1/sync").
// It panics if pattern conflicts with one already registered, as
// http.ServeMux does. The handler is instrumented with otelhttp: a server
// span named after the pattern (low cardinality: "GET /v1/accounts/{puuid}",
// never the PUUID itself), the caller's W3C trace context continued, and
// the http.server.request.duration histogram (seconds). /healthz, /readyz
// and /metrics are not traced.
func (o *Ops) Handle(pattern string, h http.Handler) {
	o.mux.Handle(pattern, otelhttp.NewHandler(h, pattern,
		otelhttp.WithSpanNameFormatter(func(string, *http.Request) string { return pattern })))
}

// Handler returns the handler serving every mounted route.
func (o *Ops) Handler() http.Handler { return o.mux }

// ReadyStatus is the JSON body of /readyz.
type ReadyStatus struct {
	// Status is "ok" or "unavailable".
	Status string `json:"status"`
	// Failing lists the names of failing checks, sorted.
	Failing []string `json:"failing,omitempty"`
	// Errors maps each failing check to its error text.
	Errors map[string]string `json:"errors,omitempty"`
}

func (o *Ops) readyz(w http.ResponseWriter, r *http.Request) {
	o.mu.RLock()
	checks := make(map[string]CheckFunc, len(o.checks))
	for n, c := range o.checks {
		checks[n] = c
	}
	o.mu.RUnlock()

	ctx, cancel := context.WithTimeout(r.Context(), checkTimeout)
	defer cancel()
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs = map[string]string{}
	)
	for name, check := range checks {
		wg.Go(func() {
			if err := check(ctx); err != nil {
				mu.Lock()
				errs[name] = MaskSecrets(err.Error())
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	st := ReadyStatus{Status: "ok"}
	code := http.StatusOK
	if len(errs) > 0 {
		code = http.StatusServiceUnavailable
		st.Status = "unavailable"
		st.Errors = errs
		for n := range errs {
			st.Failing = append(st.Failing, n)
		}
		sort.Strings(st.Failing)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(st)
}

// Serve listens on addr ("" means [Addr]) and serves [Ops.Handler] until
// ctx is done, then shuts the server down gracefully. It returns nil after
// a shutdown caused by ctx.
func (o *Ops) Serve(ctx context.Context, addr string) error {
	if addr == "" {
		addr = Addr()
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("ops: listen %s: %w", addr, err)
	}
	return o.ServeListener(ctx, ln)
}

// ServeListener is [Ops.Serve] on an existing listener, which it closes.
func (o *Ops) ServeListener(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           o.mux,
		ReadHeaderTimeout: 5 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	return ServeUntil(ctx, srv, ln)
}

// ServeUntil serves srv on ln (which it closes) until ctx is done, then
// shuts srv down gracefully (5 s for requests in flight). It returns nil
// after a shutdown caused by ctx.
func ServeUntil(ctx context.Context, srv *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("ops: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	if err != nil {
		return fmt.Errorf("ops: shutdown: %w", err)
	}
	return nil
}
