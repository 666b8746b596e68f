package ratelimit

import (
	"context"
	"maps"
	"sort"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/riftflow/riftflow/pkg/riot"
)

// metrics are recorded through the OTel global meter "riftflow/ratelimit"
// (Prometheus names on /metrics: dots become underscores, counters get
// _total, the histogram _seconds):
//
//	riftflow.ratelimit.granted       counter   {route, method, priority}
//	riftflow.ratelimit.429           counter   {route, method, type}  type: application|method|service|server|none|other
//	riftflow.ratelimit.refused       counter   {route, method}        Acquire returned KindRateLimited
//	riftflow.ratelimit.expired       counter   {route, method}        a grant past its send deadline, returned unsent (Permit.Send)
//	riftflow.ratelimit.wait          histogram seconds {route, priority}
//	riftflow.ratelimit.budget_used   gauge     count/limit of the tightest window {route, method} (method "app" for the app budget)
//	riftflow.ratelimit.key_rejected  counter   {status, source}       the key was rejected (401/403); source "local" (this process saw it) or "shared" (another replica did)
//
// The same counts are kept in memory per (route, method) for Counters and
// for the per-process record Shared writes to KV (riftflow status).
type metrics struct {
	cGranted, tooMany, refused, rejected, cExpired metric.Int64Counter
	wait                                           metric.Float64Histogram

	mu    sync.Mutex
	calls map[[2]string]*CallStats
}

// CallStats are one process's counters for one route and method (Method
// "app" holds application-scope pauses).
type CallStats struct {
	Route  string `json:"route"`
	Method string `json:"method"`
	// Granted counts permits handed out (requests sent or about to be).
	Granted int64 `json:"granted"`
	// TooMany counts 429 answers by X-Rate-Limit-Type (application,
	// method, service, server, none, other).
	TooMany map[string]int64 `json:"429,omitempty"`
	// Refused counts Acquire calls that returned KindRateLimited (the wait
	// would pass the deadline): the caller rescheduled.
	Refused int64 `json:"refused,omitempty"`
	// Expired counts grants returned unsent because the request reached
	// the transport after the grant's send deadline (and was acquired
	// again).
	Expired int64 `json:"expired,omitempty"`
	// WaitSeconds is the total time granted calls spent queued in Acquire.
	WaitSeconds float64 `json:"waitS,omitempty"`
	// Pauses counts 429 pauses started here and PausedSeconds their total
	// length.
	Pauses        int64   `json:"pauses,omitempty"`
	PausedSeconds float64 `json:"pausedS,omitempty"`
}

func newMetrics(e *engine) *metrics {
	m := otel.Meter("riftflow/ratelimit")
	x := metrics{calls: map[[2]string]*CallStats{}}
	x.cGranted, _ = m.Int64Counter("riftflow.ratelimit.granted", metric.WithDescription("Requests granted by the Riot rate limiter"))
	x.tooMany, _ = m.Int64Counter("riftflow.ratelimit.429", metric.WithDescription("429 answers from Riot by X-Rate-Limit-Type"))
	x.refused, _ = m.Int64Counter("riftflow.ratelimit.refused", metric.WithDescription("Acquire calls refused because the wait would pass the deadline or MaxWait"))
	x.rejected, _ = m.Int64Counter("riftflow.ratelimit.key_rejected", metric.WithDescription("Riot API key rejections (401/403): every call with the key stops"))
	x.cExpired, _ = m.Int64Counter("riftflow.ratelimit.expired", metric.WithDescription("Grants returned unsent: the request reached the transport after the grant's send deadline"))
	x.wait, _ = m.Float64Histogram("riftflow.ratelimit.wait", metric.WithUnit("s"), metric.WithDescription("Time spent waiting in Acquire"))
	g, err := m.Float64ObservableGauge("riftflow.ratelimit.budget_used", metric.WithDescription("count/limit of the tightest window of each budget"))
	if err == nil {
		_, _ = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
			for _, s := range e.snapshot() {
				o.ObserveFloat64(g, s.Used(), metric.WithAttributes(attribute.String("route", s.Route), attribute.String("method", s.Method)))
			}
			return nil
		}, g)
	}
	return &x
}

func prio(c riot.Call) string {
	if c.Background {
		return "background"
	}
	return "interactive"
}

// call returns the counters of (route, method); callers hold m.mu.
func (m *metrics) call(route, method string) *CallStats {
	k := [2]string{route, method}
	s := m.calls[k]
	if s == nil {
		s = &CallStats{Route: route, Method: method}
		m.calls[k] = s
	}
	return s
}

func (m *metrics) granted(c riot.Call) {
	m.cGranted.Add(context.Background(), 1, metric.WithAttributes(attribute.String("route", c.Route), attribute.String("method", c.Method), attribute.String("priority", prio(c))))
	m.mu.Lock()
	m.call(c.Route, c.Method).Granted++
	m.mu.Unlock()
}

func (m *metrics) waited(c riot.Call, d time.Duration) {
	m.wait.Record(context.Background(), d.Seconds(), metric.WithAttributes(attribute.String("route", c.Route), attribute.String("priority", prio(c))))
	m.mu.Lock()
	m.call(c.Route, c.Method).WaitSeconds += d.Seconds()
	m.mu.Unlock()
}

func (m *metrics) rateLimited(c riot.Call, _ string) {
	m.refused.Add(context.Background(), 1, metric.WithAttributes(attribute.String("route", c.Route), attribute.String("method", c.Method)))
	m.mu.Lock()
	m.call(c.Route, c.Method).Refused++
	m.mu.Unlock()
}

// expired counts a grant returned unsent because its send deadline had
// passed when the request reached the transport (permit.Send).
func (m *metrics) expired(c riot.Call) {
	m.cExpired.Add(context.Background(), 1, metric.WithAttributes(attribute.String("route", c.Route), attribute.String("method", c.Method)))
	m.mu.Lock()
	m.call(c.Route, c.Method).Expired++
	m.mu.Unlock()
}

func (m *metrics) limited429(c riot.Call, typ string) {
	switch typ {
	case "application", "method", "service", "server":
	case "":
		typ = "none"
	default:
		typ = "other"
	}
	m.tooMany.Add(context.Background(), 1, metric.WithAttributes(attribute.String("route", c.Route), attribute.String("method", c.Method), attribute.String("type", typ)))
	m.mu.Lock()
	s := m.call(c.Route, c.Method)
	if s.TooMany == nil {
		s.TooMany = map[string]int64{}
	}
	s.TooMany[typ]++
	m.mu.Unlock()
}

func (m *metrics) paused(route, bucket, _ string, d time.Duration) {
	m.mu.Lock()
	s := m.call(route, bucket)
	s.Pauses++
	s.PausedSeconds += d.Seconds()
	m.mu.Unlock()
}

func (m *metrics) keyRejected(status int, source string) {
	m.rejected.Add(context.Background(), 1, metric.WithAttributes(attribute.String("status", strconv.Itoa(status)), attribute.String("source", source)))
}

// counters returns a copy of the per-(route, method) counters, sorted.
func (m *metrics) counters() []CallStats {
	m.mu.Lock()
	out := make([]CallStats, 0, len(m.calls))
	for _, s := range m.calls {
		c := *s
		c.TooMany = maps.Clone(s.TooMany)
		out = append(out, c)
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Route != out[j].Route {
			return out[i].Route < out[j].Route
		}
		return out[i].Method < out[j].Method
	})
	return out
}
