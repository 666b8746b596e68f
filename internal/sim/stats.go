package sim

import (
	"maps"
	"sort"
	"strconv"
)

// Stats are counters since New or the last ResetStats.
type Stats struct {
	// Requests counts API answers by route ("americas", "na1"), method ID
	// and HTTP status (as a string, "200"). Requests that matched no
	// endpoint are under route "" and method "".
	Requests map[string]map[string]map[string]int64 `json:"requests"`
	// Total is the number of API requests (admin calls excluded).
	Total int64 `json:"total"`
	// RateLimited counts 429s by X-Rate-Limit-Type: "application",
	// "method", "server", and "service" for the typeless ones.
	RateLimited map[string]int64 `json:"rateLimited"`
	// Violations counts application and method 429s (what blacklisting counts).
	Violations int64 `json:"violations"`
	// BlacklistEvents counts blacklistings; Blacklisted is the current state.
	BlacklistEvents int64 `json:"blacklistEvents"`
	Blacklisted     bool  `json:"blacklisted"`
	// Buckets reports every rate-limit window used, with the highest count
	// seen in a window, sorted by route, method, window.
	Buckets []BucketStat `json:"buckets"`
	// BytesServed is the number of response body bytes written (after gzip).
	BytesServed int64 `json:"bytesServed"`
	// Faults counts injected faults by kind ("500", "service429", "slow",
	// "poison", ...).
	Faults map[string]int64 `json:"faults"`
	// MatchCalls counts getMatch answers (any status, rate-limit 429s
	// included) per match ID: Riot calls per match.
	MatchCalls map[string]int64 `json:"matchCalls,omitempty"`
	// PerMatch counts, per match ID, the getMatch and getTimeline requests
	// that reached the simulator and how many of them failed: answered
	// with any status but 200, a truncated 200, or given up by the client
	// before its answer was sent (a timeout: on a delayed (Slow) answer, or
	// on one that came late for any other reason, as on a loaded host).
	PerMatch map[string]MatchCallCount `json:"perMatch,omitempty"`
}

// MatchCallCount is one match's entry in Stats.PerMatch.
type MatchCallCount struct {
	Match          int64 `json:"match"`
	MatchFailed    int64 `json:"matchFailed"`
	Timeline       int64 `json:"timeline"`
	TimelineFailed int64 `json:"timelineFailed"`
}

// notePerMatch counts one request of method for match id in PerMatch.
// Caller holds the sim's lock.
func (st *statsState) notePerMatch(method, id string, failed bool) {
	if id == "" || (method != MethodMatch && method != MethodTimeline) {
		return
	}
	c := st.PerMatch[id]
	f := int64(0)
	if failed {
		f = 1
	}
	if method == MethodMatch {
		c.Match, c.MatchFailed = c.Match+1, c.MatchFailed+f
	} else {
		c.Timeline, c.TimelineFailed = c.Timeline+1, c.TimelineFailed+f
	}
	st.PerMatch[id] = c
}

// Count returns Requests[route][method][status].
func (st Stats) Count(route, method string, status int) int64 {
	return st.Requests[route][method][strconv.Itoa(status)]
}

// MethodCount returns the number of answers of method on any route with status.
func (st Stats) MethodCount(method string, status int) int64 {
	var n int64
	for _, ms := range st.Requests {
		n += ms[method][strconv.Itoa(status)]
	}
	return n
}

type statsState struct{ Stats }

func (st *statsState) reset() {
	st.Stats = Stats{Requests: map[string]map[string]map[string]int64{}, RateLimited: map[string]int64{}, Faults: map[string]int64{},
		MatchCalls: map[string]int64{}, PerMatch: map[string]MatchCallCount{}}
}

func (st *statsState) record(route, method string, status int, bytes int64) {
	m := st.Requests[route]
	if m == nil {
		m = map[string]map[string]int64{}
		st.Requests[route] = m
	}
	c := m[method]
	if c == nil {
		c = map[string]int64{}
		m[method] = c
	}
	c[strconv.Itoa(status)]++
	st.Total++
	st.BytesServed += bytes
}

// Stats returns a copy of the counters.
func (s *Sim) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.stats.Stats
	out.Requests = map[string]map[string]map[string]int64{}
	for r, ms := range s.stats.Requests {
		out.Requests[r] = map[string]map[string]int64{}
		for m, c := range ms {
			out.Requests[r][m] = maps.Clone(c)
		}
	}
	out.RateLimited = maps.Clone(s.stats.RateLimited)
	out.Faults = maps.Clone(s.stats.Faults)
	out.MatchCalls = maps.Clone(s.stats.MatchCalls)
	out.PerMatch = maps.Clone(s.stats.PerMatch)
	out.Blacklisted = s.blacklisted(s.now())
	out.Buckets = s.limits.stats()
	sort.Slice(out.Buckets, func(i, j int) bool {
		a, b := out.Buckets[i], out.Buckets[j]
		if a.Route != b.Route {
			return a.Route < b.Route
		}
		if a.Method != b.Method {
			return a.Method < b.Method
		}
		return a.WindowSeconds < b.WindowSeconds
	})
	return out
}

// ResetStats zeroes the counters, including the per-window maximums (which
// restart from the current window's count). Rate-limit windows and the
// blacklist state are not reset.
func (s *Sim) ResetStats() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.reset()
	s.limits.resetMax()
}

// WindowHistory returns the ended instances (up to the last 4,096) of the
// rate-limit window of secs seconds on route, for method ("" = the
// application limit), oldest first. Benchmarks use it to measure how much of
// a limit a client used, window by window, gaps between windows included.
func (s *Sim) WindowHistory(route, method string, secs int) []WindowInstance {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limits.history(route, method, secs)
}
