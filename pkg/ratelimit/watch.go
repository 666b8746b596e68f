package ratelimit

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// watch applies every update of the watched KV keys (NewShared) until the
// watcher stops.
func (s *Shared) watch(w jetstream.KeyWatcher) {
	defer close(s.done)
	defer func() { _ = w.Stop() }()
	for ent := range w.Updates() {
		if ent != nil {
			s.apply(ent)
		}
	}
}

// apply brings this process up to date with one KV entry under <KeyID>.:
//
//	rejected                      the key's rejection (deleted: cleared)
//	<route>.probe.<budget>        a probe lock (deleted: released)
//	<route>.pause.<budget>        a 429 pause (pauseVal)
//	<route>.limits.<budget>       learned limits
//	<route>.align.<budget>.<sec>  a realigned KV window (alignKV)
//
// where <budget> is app or m.<method>.
func (s *Shared) apply(ent jetstream.KeyValueEntry) {
	k := strings.TrimPrefix(ent.Key(), s.st.o.KeyID+".")
	parts := strings.SplitN(k, ".", 3)
	deleted := ent.Operation() != jetstream.KeyValuePut
	switch {
	case k == "rejected" && deleted:
		s.keyCleared()
	case deleted:
		if len(parts) == 3 && parts[1] == "probe" {
			s.probeReleased(parts[0], ent.Key())
		}
	case k == "rejected":
		s.keyRejectedElsewhere(string(ent.Value()))
	default:
		s.e.mu.Lock()
		defer s.e.mu.Unlock()
		// (a probe lock being taken needs nothing here)
		if len(parts) == 3 && parts[1] != "probe" {
			s.budgetEntry(parts[0], parts[1], parts[2], ent.Value(), s.e.now())
		}
	}
}

// keyCleared applies the deletion of the key's rejection.
func (s *Shared) keyCleared() {
	s.e.mu.Lock()
	cleared := s.e.acceptKey()
	s.e.mu.Unlock()
	if cleared {
		s.e.o.Logger.Warn("ratelimit: Riot API key rejection cleared; calls with it resume", "key_id", s.st.o.KeyID)
		if s.st.o.OnKeyCleared != nil {
			s.st.o.OnKeyCleared()
		}
	}
}

// keyRejectedElsewhere applies a rejection of the key (an HTTP status, v)
// written by any process.
func (s *Shared) keyRejectedElsewhere(v string) {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	if st, err := strconv.Atoi(v); err == nil && st != 0 {
		if s.e.rejectKey(st) {
			s.e.met.keyRejected(st, "shared")
			s.e.o.Logger.Error("ratelimit: Riot API key rejected by another replica; refusing every call with it", "status", st, "key_id", s.st.o.KeyID)
		}
	}
}

// probeReleased applies the release of the probe lock key on route: whoever
// waited for it may probe now.
func (s *Shared) probeReleased(route, key string) {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	r := s.e.route(route)
	for _, b := range append([]*bucket{r.app}, r.order...) {
		if s.st.base(b, "probe") == key {
			b.kv.probeWait = time.Time{}
			b.kv.probeFreed++
		}
	}
	s.e.dispatch(r, s.e.now())
}

// budgetEntry applies a pause, limits or align entry (kind) of budget on
// route; val is the entry's value. Callers hold mu.
func (s *Shared) budgetEntry(route, kind, budget string, val []byte, now time.Time) {
	r := s.e.route(route)
	var length time.Duration
	if kind == "align" { // <budget>.<sec>
		i := strings.LastIndexByte(budget, '.')
		if i < 0 {
			return
		}
		sec, _ := strconv.Atoi(budget[i+1:])
		length, budget = time.Duration(sec)*time.Second, budget[:i]
	}
	b := r.app
	if m, ok := strings.CutPrefix(budget, "m."); ok {
		b = nil
		for _, x := range r.order {
			if kvToken(x.method) == m {
				b = x
			}
		}
		if b == nil {
			b = r.method(m)
		}
	}
	switch kind {
	case "pause":
		var pv pauseVal
		if json.Unmarshal(val, &pv) == nil {
			s.e.pause(b, time.UnixMilli(pv.Until), pv.Type)
		}
	case "limits":
		if ls := ParseLimits(string(val)); len(ls) > 0 && FormatLimits(ls) != b.limits {
			s.e.setLimits(b, ls, now)
			s.e.dispatch(r, now)
		}
	case "align":
		s.st.realigned(b, length)
		s.e.dispatch(r, now)
	}
}

// realigned applies another process's notice that it realigned b's KV
// window of length length (alignKV): a full local view of it is dropped, so
// the next grant leases again and reads the window from KV. Callers hold mu.
func (st *kvStore) realigned(b *bucket, length time.Duration) {
	for _, w := range b.windows {
		if w.length == length && w.kv.leased <= 0 {
			w.count = 0
		}
	}
}
