package sim

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// RateLimits configures the limits the sim enforces, in Riot's header
// format: comma-separated "limit:windowSeconds" pairs, e.g. "20:1,100:120".
//
// Semantics (https://developer.riotgames.com/docs/portal#web-apis_rate-limiting): the application limit applies per routing
// value (every call on "americas" counts against the americas app bucket;
// "na1" is a separate bucket); the method limit applies per (routing value,
// method ID). Windows are fixed and start at the first request in the
// bucket; a window resets when its length has elapsed since it started.
//
// Every request that reaches the rate limiter counts, including the ones
// answered 429 — Riot's edge counts every call it receives, so a client that
// keeps hammering after a 429 sees counts above the limit in the -Count
// headers (and in Stats.Buckets[].MaxCount). Requests refused earlier (401,
// 403 bad key or blacklisted, unsupported path) are not counted.
type RateLimits struct {
	// App is the application limit of every route. Default DefaultAppLimit.
	App string `json:"app,omitempty"`
	// AppByRoute overrides App for a routing value ("americas", "na1").
	AppByRoute map[string]string `json:"appByRoute,omitempty"`
	// Method gives method limits by method ID (MethodMatch, ...); missing
	// methods use DefaultMethodLimits. A key "route/methodID" overrides the
	// limit of one route only.
	Method map[string]string `json:"method,omitempty"`
	// Disabled turns rate limiting (and its headers) off.
	Disabled bool `json:"disabled,omitempty"`
}

// DefaultAppLimit is the development-key application limit: 20 per second
// and 100 per 2 minutes, per routing value (https://developer.riotgames.com/docs/portal).
const DefaultAppLimit = "20:1,100:120"

// DefaultMethodLimits are method limits of the order Riot reports (Riot does
// not publish a table; match-v5 getMatch was observed at 2000:10).
var DefaultMethodLimits = map[string]string{
	MethodAccountByRiotID: "1000:60",
	MethodAccountByPUUID:  "1000:60",
	MethodActiveRegion:    "1000:60",
	MethodMatchIDs:        "2000:10",
	MethodMatch:           "2000:10",
	MethodTimeline:        "2000:10",
	MethodLeagueByPUUID:   "20000:10",
	MethodSummonerByPUUID: "1600:60",
}

// ParseLimits parses a Riot rate-limit header value "20:1,100:120" into
// (limit, window seconds) pairs.
func ParseLimits(spec string) ([][2]int, error) {
	var out [][2]int
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		a, b, ok := strings.Cut(part, ":")
		n, err1 := strconv.Atoi(a)
		w, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || n <= 0 || w <= 0 {
			return nil, fmt.Errorf("sim: bad rate limit %q in %q (want limit:seconds)", part, spec)
		}
		out = append(out, [2]int{n, w})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("sim: empty rate limit %q", spec)
	}
	return out, nil
}

type window struct {
	limit, secs int
	start       time.Time
	count       int
	max         int       // highest count reached in any window instance
	filled      time.Time // when count reached limit in this instance
	last        time.Time // the instance's latest request
	history     []WindowInstance
}

// maxWindowHistory bounds the instances kept per window (oldest dropped).
const maxWindowHistory = 4096

// WindowInstance is one ended instance of a fixed rate-limit window, as the
// sim counted it: Start is the instance's first request, Count every request
// counted in it (429'd ones included), Filled when Count reached the limit
// (zero if it never did) and Last its latest request. An instance ends when
// the first request after Start + window length opens the next one, so
// consecutive instances show the idle gap between windows.
type WindowInstance struct {
	Start  time.Time `json:"start"`
	Filled time.Time `json:"filled,omitzero"`
	Last   time.Time `json:"last"`
	Count  int       `json:"count"`
}

type bucket struct {
	route, method string // method "" = application bucket
	windows       []*window
}

type limiter struct {
	cfg     RateLimits
	scale   float64
	buckets map[string]*bucket // route + "|" + method
	specs   map[string][][2]int
}

func newLimiter(cfg RateLimits, scale float64) (*limiter, error) {
	if cfg.App == "" {
		cfg.App = DefaultAppLimit
	}
	l := &limiter{cfg: cfg, scale: scale, buckets: map[string]*bucket{}, specs: map[string][][2]int{}}
	all := []string{cfg.App}
	for _, v := range cfg.AppByRoute {
		all = append(all, v)
	}
	for _, v := range cfg.Method {
		all = append(all, v)
	}
	for _, v := range DefaultMethodLimits {
		all = append(all, v)
	}
	for _, spec := range all {
		p, err := ParseLimits(spec)
		if err != nil {
			return nil, err
		}
		l.specs[spec] = p
	}
	return l, nil
}

func (l *limiter) spec(route, method string) string {
	if method == "" {
		if v, ok := l.cfg.AppByRoute[route]; ok {
			return v
		}
		return l.cfg.App
	}
	if v, ok := l.cfg.Method[route+"/"+method]; ok {
		return v
	}
	if v, ok := l.cfg.Method[method]; ok {
		return v
	}
	return DefaultMethodLimits[method]
}

func (l *limiter) bucket(route, method string) *bucket {
	k := route + "|" + method
	b := l.buckets[k]
	if b == nil {
		b = &bucket{route: route, method: method}
		for _, p := range l.specs[l.spec(route, method)] {
			b.windows = append(b.windows, &window{limit: p[0], secs: p[1]})
		}
		l.buckets[k] = b
	}
	return b
}

func (l *limiter) windowLen(w *window) time.Duration {
	return time.Duration(float64(w.secs) * l.scale * float64(time.Second))
}

// hit counts one request in b at now and returns the longest wait until an
// exceeded window resets (0 when within limits).
func (l *limiter) hit(b *bucket, now time.Time) (exceeded bool, wait time.Duration) {
	for _, w := range b.windows {
		d := l.windowLen(w)
		if w.start.IsZero() || !now.Before(w.start.Add(d)) {
			if !w.start.IsZero() {
				if len(w.history) == maxWindowHistory {
					w.history = append(w.history[:0], w.history[1:]...)
				}
				w.history = append(w.history, WindowInstance{Start: w.start, Filled: w.filled, Last: w.last, Count: w.count})
			}
			w.start, w.count, w.filled = now, 0, time.Time{}
		}
		w.count++
		w.last = now
		if w.count == w.limit {
			w.filled = now
		}
		if w.count > w.max {
			w.max = w.count
		}
		if w.count > w.limit {
			exceeded = true
			if r := w.start.Add(d).Sub(now); r > wait {
				wait = r
			}
		}
	}
	return exceeded, wait
}

func (b *bucket) headers(reverse bool) (limits, counts string) {
	var ls, cs []string
	for _, w := range b.windows {
		ls = append(ls, fmt.Sprintf("%d:%d", w.limit, w.secs))
		cs = append(cs, fmt.Sprintf("%d:%d", w.count, w.secs))
	}
	if reverse {
		for i, j := 0, len(ls)-1; i < j; i, j = i+1, j-1 {
			ls[i], ls[j] = ls[j], ls[i]
			cs[i], cs[j] = cs[j], cs[i]
		}
	}
	return strings.Join(ls, ","), strings.Join(cs, ",")
}

// rlResult is the outcome of one request through the limiter.
type rlResult struct {
	appLimit, appCount, methodLimit, methodCount string
	limitType                                    string // "application", "method" or ""
	retryAfter                                   int    // nominal seconds, rounded up, ≥1
}

// take counts a request of method on route. Caller holds s.mu.
func (l *limiter) take(route, method string, now time.Time, reverse bool) rlResult {
	app, meth := l.bucket(route, ""), l.bucket(route, method)
	appEx, appWait := l.hit(app, now)
	methEx, methWait := l.hit(meth, now)
	var r rlResult
	r.appLimit, r.appCount = app.headers(reverse)
	r.methodLimit, r.methodCount = meth.headers(reverse)
	var wait time.Duration
	switch {
	case appEx:
		r.limitType, wait = "application", appWait
		if methEx && methWait > wait {
			wait = methWait
		}
	case methEx:
		r.limitType, wait = "method", methWait
	}
	if r.limitType != "" {
		secs := wait.Seconds() / l.scale
		r.retryAfter = int(math.Ceil(secs - 1e-9))
		if r.retryAfter < 1 {
			r.retryAfter = 1
		}
	}
	return r
}

// BucketStat reports one rate-limit window of one bucket.
type BucketStat struct {
	Route         string `json:"route"`
	Method        string `json:"method,omitempty"` // "" for the application bucket
	Limit         int    `json:"limit"`
	WindowSeconds int    `json:"windowSeconds"`
	// MaxCount is the highest number of requests counted in any single
	// instance of this window (429'd requests included). A client that
	// never exceeded the limit has MaxCount ≤ Limit.
	MaxCount int `json:"maxCount"`
}

func (l *limiter) stats() []BucketStat {
	var out []BucketStat
	for _, b := range l.buckets {
		for _, w := range b.windows {
			out = append(out, BucketStat{Route: b.route, Method: b.method, Limit: w.limit, WindowSeconds: w.secs, MaxCount: w.max})
		}
	}
	return out
}

// history returns the ended instances of route's window of secs seconds
// (method "" = the application bucket), oldest first.
func (l *limiter) history(route, method string, secs int) []WindowInstance {
	b := l.buckets[route+"|"+method]
	if b == nil {
		return nil
	}
	for _, w := range b.windows {
		if w.secs == secs {
			return append([]WindowInstance(nil), w.history...)
		}
	}
	return nil
}

func (l *limiter) resetMax() {
	for _, b := range l.buckets {
		for _, w := range b.windows {
			w.max = w.count
		}
	}
}
