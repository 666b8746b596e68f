package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// KeyState is the shared rate-limit state of one API key as stored in the
// KV bucket, for `riftflow status` in a process that holds no limiter.
type KeyState struct {
	KeyID string
	// Rejected is the HTTP status (401/403) that rejected the key, 0 if none.
	Rejected int
	// RejectedAt is when it was rejected (the KV entry's time on the NATS
	// server's clock); zero if it is not.
	RejectedAt time.Time
	// Budgets are the app and method budgets seen in KV, sorted by route
	// then method ("app" first).
	Budgets []BudgetState
	// Processes are the per-process counters written by every Shared
	// limiter of the key (SharedOptions.StatsEvery), newest first.
	Processes []ProcessState
}

// BudgetState is one budget (route app budget, or one method's) in KV.
type BudgetState struct {
	Route, Method string // Method "app" for the application budget
	// Limits are the learned limits, "500:10,30000:600" ("" if not learned).
	Limits string
	// Windows are the current windows; Count is the tokens granted in the
	// running window by every process (0 and a zero ResetsAt when none runs).
	Windows     []WindowState
	PausedUntil time.Time // zero unless a 429 pause is running
	PauseType   string
}

// Used is Count/Limit of the fullest running window.
func (b BudgetState) Used() float64 {
	return BucketState{Windows: b.Windows}.Used()
}

// ProcessState is one process's counters.
type ProcessState struct {
	ID       string
	At       time.Time // when it last wrote them
	Rejected int
	Calls    []CallStats
}

// Totals sums the counters of every process per (route, method).
func (k KeyState) Totals() []CallStats {
	m := map[[2]string]*CallStats{}
	var keys [][2]string
	for _, p := range k.Processes {
		for _, c := range p.Calls {
			key := [2]string{c.Route, c.Method}
			t := m[key]
			if t == nil {
				t = &CallStats{Route: c.Route, Method: c.Method}
				m[key] = t
				keys = append(keys, key)
			}
			t.Granted += c.Granted
			t.Refused += c.Refused
			t.WaitSeconds += c.WaitSeconds
			t.Pauses += c.Pauses
			t.PausedSeconds += c.PausedSeconds
			for typ, n := range c.TooMany {
				if t.TooMany == nil {
					t.TooMany = map[string]int64{}
				}
				t.TooMany[typ] += n
			}
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	out := make([]CallStats, 0, len(keys))
	for _, k := range keys {
		out = append(out, *m[k])
	}
	return out
}

// ReadState reads every key's state from the rate-limit KV bucket (keyID
// "" for all keys found, else that key only). now judges which windows and
// pauses are still running: pass the NATS server's time (ServerNow), the
// clock the limiters stamp them with; margin is not applied (a window is shown as
// running until start + length). Route and method names are as stored
// (characters outside [-_=.a-zA-Z0-9] replaced by '_').
func ReadState(ctx context.Context, kv jetstream.KeyValue, keyID string, now time.Time) ([]KeyState, error) {
	filter := ">"
	if keyID != "" {
		filter = keyID + ".>"
	}
	lister, err := kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, err
	}
	states := map[string]*KeyState{}
	budgets := map[string]*BudgetState{}
	ks := func(kid string) *KeyState {
		s := states[kid]
		if s == nil {
			s = &KeyState{KeyID: kid}
			states[kid] = s
		}
		return s
	}
	budget := func(kid, route, method string) *BudgetState {
		k := kid + "|" + route + "|" + method
		b := budgets[k]
		if b == nil {
			b = &BudgetState{Route: route, Method: method}
			budgets[k] = b
			ks(kid)
		}
		return b
	}
	for key := range lister.Keys() {
		ent, err := kv.Get(ctx, key)
		if err != nil {
			continue // deleted or expired meanwhile
		}
		v := ent.Value()
		kid, rest, ok := strings.Cut(key, ".")
		if !ok {
			continue
		}
		if rest == "rejected" {
			ks(kid).Rejected, _ = strconv.Atoi(string(v))
			ks(kid).RejectedAt = ent.Created()
			continue
		}
		if id, ok := strings.CutPrefix(rest, "proc."); ok {
			var pv procVal
			if json.Unmarshal(v, &pv) == nil {
				s := ks(kid)
				s.Processes = append(s.Processes, ProcessState{ID: id, At: time.UnixMilli(pv.At), Rejected: pv.Rejected, Calls: pv.Calls})
			}
			continue
		}
		// <route>.<kind>.app[.<sec>] | <route>.<kind>.m.<method>[.<sec>]
		parts := strings.SplitN(rest, ".", 3)
		if len(parts) != 3 {
			continue
		}
		route, kind, tail := parts[0], parts[1], parts[2]
		if kind != "limits" && kind != "pause" && kind != "win" {
			continue // e.g. the probe lock, held only at cold start
		}
		var sec int
		if kind == "win" {
			i := strings.LastIndexByte(tail, '.')
			if i < 0 {
				continue
			}
			sec, _ = strconv.Atoi(tail[i+1:])
			tail = tail[:i]
		}
		method := "app"
		if m, ok := strings.CutPrefix(tail, "m."); ok {
			method = m
		} else if tail != "app" {
			continue
		}
		b := budget(kid, route, method)
		switch kind {
		case "limits":
			b.Limits = string(v)
		case "pause":
			var pv pauseVal
			if json.Unmarshal(v, &pv) == nil && now.Before(time.UnixMilli(pv.Until)) {
				b.PausedUntil, b.PauseType = time.UnixMilli(pv.Until), pv.Type
			}
		case "win":
			var wv winVal
			if json.Unmarshal(v, &wv) != nil {
				continue
			}
			length := time.Duration(sec) * time.Second
			ws := WindowState{Limit: wv.Limit, Length: length}
			if end := time.UnixMilli(wv.Start).Add(length); wv.Start != 0 && now.Before(end) {
				ws.Count, ws.ResetsAt = wv.Granted, end
			}
			b.Windows = append(b.Windows, ws)
		}
	}
	for k, b := range budgets {
		kid := k[:strings.IndexByte(k, '|')]
		sort.Slice(b.Windows, func(i, j int) bool { return b.Windows[i].Length < b.Windows[j].Length })
		ks(kid).Budgets = append(ks(kid).Budgets, *b)
	}
	out := make([]KeyState, 0, len(states))
	for _, s := range states {
		sort.Slice(s.Budgets, func(i, j int) bool {
			a, b := s.Budgets[i], s.Budgets[j]
			if a.Route != b.Route {
				return a.Route < b.Route
			}
			if (a.Method == "app") != (b.Method == "app") {
				return a.Method == "app"
			}
			return a.Method < b.Method
		})
		sort.Slice(s.Processes, func(i, j int) bool { return s.Processes[i].At.After(s.Processes[j].At) })
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].KeyID < out[j].KeyID })
	return out, nil
}
