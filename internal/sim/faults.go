package sim

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"
)

// Faults are injected on demand. Ratios are probabilities in [0, 1] drawn
// per request from a RNG seeded with Seed, so a sequential run is
// reproducible. Ratio faults apply after the rate limiter (the request is
// counted and carries the rate-limit headers) and before the data lookup;
// they are drawn in the order Slow, 5xx, Service429, Server429.
type Faults struct {
	// Seed of the RNG (0 → 1).
	Seed uint64 `json:"seed,omitempty"`
	// Methods limits ratio faults to these method IDs (empty = all).
	Methods []string `json:"methods,omitempty"`

	// Error5xx is the ratio of requests answered 500, 502, 503 or 504
	// (chosen uniformly), with a Riot-like JSON body.
	Error5xx float64 `json:"error5xx,omitempty"`
	// Service429 is the ratio of 429s from an "underlying service": no
	// X-Rate-Limit-Type and no Retry-After header (https://developer.riotgames.com/docs/portal#web-apis_rate-limiting).
	Service429 float64 `json:"service429,omitempty"`
	// Server429 is the ratio of 429s with the undocumented
	// X-Rate-Limit-Type: server and Retry-After: ServerRetryAfter.
	Server429 float64 `json:"server429,omitempty"`
	// ServerRetryAfter is the Retry-After of Server429 in seconds (default 5).
	ServerRetryAfter int `json:"serverRetryAfter,omitempty"`
	// Slow is the ratio of responses delayed by SlowDelay (then served
	// normally); pick a delay longer than the client's timeout. The delay
	// ends early when the client goes away.
	Slow float64 `json:"slow,omitempty"`
	// SlowDelay is the delay of Slow responses (default 30s). In JSON, nanoseconds.
	SlowDelay time.Duration `json:"slowDelay,omitempty"`
	// ReverseHeaders emits the rate-limit header pairs in reverse order
	// ("100:120,20:1"), as seen live; clients must match windows, not positions.
	ReverseHeaders bool `json:"reverseHeaders,omitempty"`

	// Match overrides getMatch and getTimeline answers per match ID.
	Match map[string]MatchFault `json:"match,omitempty"`
}

// MatchFault kinds.
const (
	FaultNotFound     = "404"       // always 404 (data not found)
	FaultNotFoundN    = "404-n"     // 404 for the first N calls, then the real answer
	FaultUnavailableN = "503-n"     // 503 for the first N calls, then the real answer
	FaultServer429N   = "429-n"     // 429 with X-Rate-Limit-Type: server and Retry-After: Faults.ServerRetryAfter (default 5) for the first N calls, then the real answer
	FaultPoison       = "poison"    // 200 with a body that is not valid JSON
	FaultTruncated    = "truncated" // 200 whose body stops halfway (Content-Length promises more; the client sees an unexpected EOF)
	FaultOversized    = "oversized" // 200 with a valid but huge body (payload + padding field of N bytes, default 16 MiB)
	FaultGzipBomb     = "gzip-bomb" // 200, Content-Encoding gzip, whatever the request accepts: a ~1 MB body that inflates to the payload + a padding field of N bytes (default 1 GiB)
	FaultDeepJSON     = "deep-json" // 200 with a valid body whose info has a field nested N arrays deep (default 100,000)
	FaultNUL          = "nul"       // 200 with a valid body carrying \u0000 (NUL) escapes: in the first participant's riotIdGameName and in an extra info field
)

// MatchFault is a per-match-ID override. N counts calls per (method, match
// ID) since the fault was set.
type MatchFault struct {
	Kind string `json:"kind"`
	N    int    `json:"n,omitempty"`
}

type faultState struct {
	rng   *rand.Rand
	calls map[string]int // method|matchID → calls under a counting fault
}

// SetFaults replaces the active faults and resets their RNG and counters.
func (s *Sim) SetFaults(f Faults) error {
	for id, mf := range f.Match {
		switch mf.Kind {
		case FaultNotFound, FaultNotFoundN, FaultUnavailableN, FaultServer429N, FaultPoison, FaultTruncated, FaultOversized,
			FaultGzipBomb, FaultDeepJSON, FaultNUL:
		default:
			return fmt.Errorf("sim: match fault %q: unknown kind %q", id, mf.Kind)
		}
	}
	for _, r := range []float64{f.Error5xx, f.Service429, f.Server429, f.Slow} {
		if r < 0 || r > 1 {
			return fmt.Errorf("sim: fault ratio %v outside [0, 1]", r)
		}
	}
	seed := f.Seed
	if seed == 0 {
		seed = 1
	}
	s.mu.Lock()
	s.faults = f
	s.fstate = &faultState{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), calls: map[string]int{}}
	s.mu.Unlock()
	if f.Error5xx+f.Service429+f.Server429+f.Slow > 0 || len(f.Match) > 0 || f.ReverseHeaders {
		b, _ := json.Marshal(f)
		s.log.Info("faults set", "faults", string(b))
	}
	return nil
}

// Faults returns the active faults.
func (s *Sim) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// faultDraw is the ratio-fault decision for one request.
type faultDraw struct {
	slow      time.Duration
	status    int    // 5xx or 429, 0 = none
	limitType string // for 429: "" (service) or "server"
	retry     int
}

// draw decides ratio faults. Caller holds s.mu.
func (s *Sim) draw(method string) faultDraw {
	f, st := s.faults, s.fstate
	var d faultDraw
	if len(f.Methods) > 0 {
		ok := false
		for _, m := range f.Methods {
			ok = ok || m == method
		}
		if !ok {
			return d
		}
	}
	if f.Slow > 0 && st.rng.Float64() < f.Slow {
		d.slow = f.SlowDelay
		if d.slow <= 0 {
			d.slow = 30 * time.Second
		}
	}
	switch {
	case f.Error5xx > 0 && st.rng.Float64() < f.Error5xx:
		d.status = []int{500, 502, 503, 504}[st.rng.IntN(4)]
	case f.Service429 > 0 && st.rng.Float64() < f.Service429:
		d.status = 429
	case f.Server429 > 0 && st.rng.Float64() < f.Server429:
		d.status, d.limitType, d.retry = 429, "server", f.ServerRetryAfter
		if d.retry <= 0 {
			d.retry = 5
		}
	}
	return d
}

// matchFault returns the override for (method, id) and counts the call.
// Caller holds s.mu. ok is false when the real answer should be served.
func (s *Sim) matchFault(method, id string) (mf MatchFault, ok bool) {
	mf, ok = s.faults.Match[id]
	if !ok {
		return mf, false
	}
	switch mf.Kind {
	case FaultNotFoundN, FaultUnavailableN, FaultServer429N:
		k := method + "|" + id
		s.fstate.calls[k]++
		if s.fstate.calls[k] > mf.N {
			return mf, false
		}
	}
	return mf, true
}

// Blacklist configures blacklisting (https://developer.riotgames.com/docs/portal, "Rate limiting" and "Blacklisting"):
// more than Violations rate-limit violations (application or method 429s)
// within Period blacklist the key; while blacklisted every API call answers
// 403. The first blacklisting lasts Duration, each further one twice the
// previous; after Permanent blacklistings (0 = never) it is permanent.
// With NotFound > 0, more than NotFound 404 answers within Period also
// blacklist the key ("unknown resource calls"). All durations are scaled by
// Options.TimeScale. The zero value disables blacklisting.
type Blacklist struct {
	Violations int           `json:"violations,omitempty"`
	NotFound   int           `json:"notFound,omitempty"`
	Period     time.Duration `json:"period,omitempty"`   // default 1 min
	Duration   time.Duration `json:"duration,omitempty"` // default 1 min
	Permanent  int           `json:"permanent,omitempty"`
}

type blacklistState struct {
	violations []time.Time
	notFound   []time.Time
	until      time.Time
	permanent  bool
	times      int
}

func prune(ts []time.Time, now time.Time, period time.Duration) []time.Time {
	i := 0
	for i < len(ts) && now.Sub(ts[i]) >= period {
		i++
	}
	return ts[i:]
}

func (s *Sim) scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) * s.opts.TimeScale)
}

// blacklisted reports whether the key is blacklisted at now. Caller holds s.mu.
func (s *Sim) blacklisted(now time.Time) bool {
	return s.bl.permanent || now.Before(s.bl.until)
}

// noteViolation records a violation (rateLimit) or a 404 and blacklists when
// the configured threshold is passed. Caller holds s.mu.
func (s *Sim) noteViolation(now time.Time, rateLimit bool) {
	cfg := s.opts.Blacklist
	limit, list := cfg.Violations, &s.bl.violations
	if !rateLimit {
		limit, list = cfg.NotFound, &s.bl.notFound
	}
	if limit <= 0 || s.blacklisted(now) {
		return
	}
	period := cfg.Period
	if period <= 0 {
		period = time.Minute
	}
	*list = append(prune(*list, now, s.scaled(period)), now)
	if len(*list) <= limit {
		return
	}
	dur := cfg.Duration
	if dur <= 0 {
		dur = time.Minute
	}
	s.bl.times++
	dur <<= s.bl.times - 1
	s.bl.until = now.Add(s.scaled(dur))
	s.bl.permanent = cfg.Permanent > 0 && s.bl.times >= cfg.Permanent
	s.bl.violations, s.bl.notFound = nil, nil
	s.stats.BlacklistEvents++
	reason := "rate-limit violations"
	if !rateLimit {
		reason = "unknown-resource calls"
	}
	s.log.Warn("api key blacklisted", "reason", reason, "times", s.bl.times, "duration", dur, "permanent", s.bl.permanent)
}

// ClearBlacklist lifts a blacklisting (also a permanent one) and forgets
// recorded violations; the escalation count is kept.
func (s *Sim) ClearBlacklist() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bl.until, s.bl.permanent, s.bl.violations, s.bl.notFound = time.Time{}, false, nil, nil
}
