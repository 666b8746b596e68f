package ratelimit

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func (s *Shared) watch(w jetstream.KeyWatcher) {
	defer close(s.done)
	defer func() { _ = w.Stop() }()
	p := s.st.o.KeyID + "."
	for ent := range w.Updates() {
		if ent == nil {
			continue
		}
		k := strings.TrimPrefix(ent.Key(), p)
		// <route>.pause.app | <route>.pause.m.<method> | <route>.limits... | <route>.probe...
		parts := strings.SplitN(k, ".", 3)
		if ent.Operation() != jetstream.KeyValuePut && k == "rejected" {
			s.e.mu.Lock()
			cleared := s.e.acceptKey()
			s.e.mu.Unlock()
			if cleared {
				s.e.o.Logger.Warn("ratelimit: Riot API key rejection cleared; calls with it resume", "key_id", s.st.o.KeyID)
				if s.st.o.OnKeyCleared != nil {
					s.st.o.OnKeyCleared()
				}
			}
			continue
		}
		if ent.Operation() != jetstream.KeyValuePut {
			// A released probe lock: whoever waited for it may probe now.
			if len(parts) == 3 && parts[1] == "probe" {
				s.e.mu.Lock()
				r := s.e.route(parts[0])
				for _, b := range append([]*bucket{r.app}, r.order...) {
					if s.st.base(b, "probe") == ent.Key() {
						b.probeWait = time.Time{}
						b.probeFreed++
					}
				}
				s.e.dispatch(r, s.e.now())
				s.e.mu.Unlock()
			}
			continue
		}
		v := string(ent.Value())
		s.e.mu.Lock()
		now := s.e.now()
		if k == "rejected" {
			if st, err := strconv.Atoi(v); err == nil && st != 0 {
				if s.e.rejectKey(st) {
					s.e.met.keyRejected(st, "shared")
					s.e.o.Logger.Error("ratelimit: Riot API key rejected by another replica; refusing every call with it", "status", st, "key_id", s.st.o.KeyID)
				}
			}
			s.e.mu.Unlock()
			continue
		}
		// (a probe lock being taken needs nothing here)
		if len(parts) == 3 && parts[1] != "probe" {
			r := s.e.route(parts[0])
			b := r.app
			var length time.Duration
			if parts[1] == "align" { // <route>.align.app.<sec> | <route>.align.m.<method>.<sec>
				i := strings.LastIndexByte(parts[2], '.')
				if i < 0 {
					s.e.mu.Unlock()
					continue
				}
				sec, _ := strconv.Atoi(parts[2][i+1:])
				length, parts[2] = time.Duration(sec)*time.Second, parts[2][:i]
			}
			if m, ok := strings.CutPrefix(parts[2], "m."); ok {
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
			switch parts[1] {
			case "pause":
				var pv pauseVal
				if json.Unmarshal(ent.Value(), &pv) == nil {
					s.e.pause(b, time.UnixMilli(pv.Until), pv.Type)
				}
			case "limits":
				if ls := ParseLimits(v); len(ls) > 0 && FormatLimits(ls) != b.limits {
					s.e.setLimits(b, ls, now)
					s.e.dispatch(r, now)
				}
			case "align":
				s.e.realigned(b, length)
				s.e.dispatch(r, now)
			}
		}
		s.e.mu.Unlock()
	}
}

// realigned applies another process's notice that it realigned b's KV
// window of length length (alignKV): a full local view of it is dropped, so
// the next grant leases again and reads the window from KV. Callers hold mu.
func (e *engine) realigned(b *bucket, length time.Duration) {
	for _, w := range b.windows {
		if w.length == length && w.leased <= 0 {
			w.count = 0
		}
	}
}
