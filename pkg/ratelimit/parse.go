package ratelimit

import (
	"sort"
	"strconv"
	"strings"
	"time"
)

// Limit is one "count:windowSeconds" pair of a Riot rate-limit header: N
// requests per Window. In a -Count header N is the number of requests
// already counted in that window.
type Limit struct {
	N      int
	Window time.Duration
}

// maxWindow bounds parsed windows (one day): anything longer is garbage.
const maxWindow = 24 * time.Hour

// ParseLimits parses a Riot rate-limit header value such as
// "500:10,30000:600" (X-App-Rate-Limit, X-Method-Rate-Limit) or "12:10,130:600"
// (their -Count headers). Pairs are returned sorted by window length,
// shortest first, one per window length (the smallest N wins if a length
// repeats); callers must match windows by length, never by position.
// Spaces are tolerated; malformed pairs, negative counts and windows that
// are zero or longer than a day are skipped. It never panics; an empty or
// wholly malformed value gives nil.
func ParseLimits(s string) []Limit {
	var out []Limit
	for _, part := range strings.Split(s, ",") {
		n, w, ok := strings.Cut(part, ":")
		if !ok {
			continue
		}
		cnt, err := strconv.Atoi(strings.TrimSpace(n))
		if err != nil || cnt < 0 {
			continue
		}
		sec, err := strconv.Atoi(strings.TrimSpace(w))
		// Compare in seconds: time.Duration(sec)*time.Second overflows for
		// sec > ~9.2e9 and would wrap negative.
		if err != nil || sec <= 0 || int64(sec) > int64(maxWindow/time.Second) {
			continue
		}
		l := Limit{N: cnt, Window: time.Duration(sec) * time.Second}
		dup := false
		for i := range out {
			if out[i].Window == l.Window {
				dup = true
				out[i].N = min(out[i].N, l.N)
			}
		}
		if !dup {
			out = append(out, l)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Window < out[j].Window })
	return out
}

// FormatLimits is the inverse of ParseLimits for whole-second windows:
// "500:10,30000:600", shortest window first.
func FormatLimits(ls []Limit) string {
	var b strings.Builder
	for i, l := range ls {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(l.N))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(int64(l.Window/time.Second), 10))
	}
	return b.String()
}

// countFor returns N of the pair in cs whose window equals w.
func countFor(cs []Limit, w time.Duration) (int, bool) {
	for _, c := range cs {
		if c.Window == w {
			return c.N, true
		}
	}
	return 0, false
}

// parseRetryAfter reads Retry-After as delay seconds (Riot's form). ok is
// false when the header is missing or not a non-negative integer: a missing
// Retry-After never means "retry now".
func parseRetryAfter(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	sec, err := strconv.Atoi(v)
	if err != nil || sec < 0 || sec > 86400 {
		return 0, false
	}
	return time.Duration(sec) * time.Second, true
}
