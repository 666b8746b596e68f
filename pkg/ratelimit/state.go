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
	sr := &stateReader{now: now, states: map[string]*KeyState{}, budgets: map[string]*BudgetState{}}
	for key := range lister.Keys() {
		ent, err := kv.Get(ctx, key)
		if err != nil {
			continue // deleted or expired meanwhile
		}
		sr.add(key, ent)
	}
	return sr.result(), nil
}

// stateReader gathers the KeyStates of ReadState from KV entries.
type stateReader struct {
	now     time.Time
	states  map[string]*KeyState    // by key ID
	budgets map[string]*BudgetState // by key ID|route|method
}

func (sr *stateReader) key(kid string) *KeyState {
	s := sr.states[kid]
	if s == nil {
		s = &KeyState{KeyID: kid}
		sr.states[kid] = s
	}
	return s
}

func (sr *stateReader) budget(kid, route, method string) *BudgetState {
	k := kid + "|" + route + "|" + method
	b := sr.budgets[k]
	if b == nil {
		b = &BudgetState{Route: route, Method: method}
		sr.budgets[k] = b
		sr.key(kid)
	}
	return b
}

// add applies the entry ent at key: <kid>.rejected, <kid>.proc.<id>, or a
// budget's entry (addBudget). Other keys are skipped.
func (sr *stateReader) add(key string, ent jetstream.KeyValueEntry) {
	v := ent.Value()
	kid, rest, ok := strings.Cut(key, ".")
	if !ok {
		return
	}
	if rest == "rejected" {
		sr.key(kid).Rejected, _ = strconv.Atoi(string(v))
		sr.key(kid).RejectedAt = ent.Created()
		return
	}
	if id, ok := strings.CutPrefix(rest, "proc."); ok {
		var pv procVal
		if json.Unmarshal(v, &pv) == nil {
			s := sr.key(kid)
			s.Processes = append(s.Processes, ProcessState{ID: id, At: time.UnixMilli(pv.At), Rejected: pv.Rejected, Calls: pv.Calls})
		}
		return
	}
	sr.addBudget(kid, rest, v)
}

// addBudget applies v, the value of <kid>.<rest>, where rest is
// <route>.<kind>.app[.<sec>] or <route>.<kind>.m.<method>[.<sec>] and kind
// is limits, pause or win. Other kinds (the probe lock, held only at cold
// start) are skipped.
func (sr *stateReader) addBudget(kid, rest string, v []byte) {
	parts := strings.SplitN(rest, ".", 3)
	if len(parts) != 3 {
		return
	}
	route, kind, tail := parts[0], parts[1], parts[2]
	if kind != "limits" && kind != "pause" && kind != "win" {
		return
	}
	var sec int
	if kind == "win" {
		i := strings.LastIndexByte(tail, '.')
		if i < 0 {
			return
		}
		sec, _ = strconv.Atoi(tail[i+1:])
		tail = tail[:i]
	}
	method := "app"
	if m, ok := strings.CutPrefix(tail, "m."); ok {
		method = m
	} else if tail != "app" {
		return
	}
	b := sr.budget(kid, route, method)
	switch kind {
	case "limits":
		b.Limits = string(v)
	case "pause":
		var pv pauseVal
		if json.Unmarshal(v, &pv) == nil && sr.now.Before(time.UnixMilli(pv.Until)) {
			b.PausedUntil, b.PauseType = time.UnixMilli(pv.Until), pv.Type
		}
	case "win":
		var wv winVal
		if json.Unmarshal(v, &wv) != nil {
			return
		}
		length := time.Duration(sec) * time.Second
		ws := WindowState{Limit: wv.Limit, Length: length}
		if end := time.UnixMilli(wv.Start).Add(length); wv.Start != 0 && sr.now.Before(end) {
			ws.Count, ws.ResetsAt = wv.Granted, end
		}
		b.Windows = append(b.Windows, ws)
	}
}

// result is the gathered states, sorted: keys by ID; budgets by route,
// the app budget first, then by method; windows by length; processes
// newest first.
func (sr *stateReader) result() []KeyState {
	for k, b := range sr.budgets {
		kid := k[:strings.IndexByte(k, '|')]
		sort.Slice(b.Windows, func(i, j int) bool { return b.Windows[i].Length < b.Windows[j].Length })
		sr.key(kid).Budgets = append(sr.key(kid).Budgets, *b)
	}
	out := make([]KeyState, 0, len(sr.states))
	for _, s := range sr.states {
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
	return out
}
