package ratelimit

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/tick"
)

// rttStat smooths the round trips (grant to answer) of one route's calls
// as TCP does (RFC 6298): srtt += (r−srtt)/8, rttvar += (|srtt−r|−rttvar)/4.
type rttStat struct {
	srtt, rttvar time.Duration
	n            int
}

func (s *rttStat) add(r time.Duration) {
	r = max(r, 0)
	if s.n == 0 {
		s.srtt, s.rttvar = r, r/2
	} else {
		d := s.srtt - r
		if d < 0 {
			d = -d
		}
		s.rttvar += (d - s.rttvar) / 4
		s.srtt += (r - s.srtt) / 8
	}
	s.n++
}

// lagSpan is the period of sendLag's sliding maximum.
const lagSpan = 30 * time.Second

// sendLag is the longest time from Permit.Send to the request written
// (Permit.Written) seen in the current and the previous lagSpan.
type sendLag struct {
	cur, prev time.Duration
	since     time.Time
}

func (l *sendLag) roll(now time.Time) {
	switch d := now.Sub(l.since); {
	case d >= 2*lagSpan:
		l.cur, l.prev, l.since = 0, 0, now
	case d >= lagSpan:
		l.cur, l.prev, l.since = 0, l.cur, l.since.Add(lagSpan)
	}
}

func (l *sendLag) add(d time.Duration, now time.Time) {
	l.roll(now)
	l.cur = max(l.cur, d)
}

func (l *sendLag) max(now time.Time) time.Duration {
	l.roll(now)
	return max(l.cur, l.prev)
}

// allowance is the time before the end of w that a grant's send deadline
// keeps clear (Options.SendAllowance): the larger of the configured floor
// and the longest measured send lag, at most a quarter of the window.
// Callers hold mu.
func (e *engine) allowance(w *window, now time.Time) time.Duration {
	return min(max(e.o.SendAllowance, e.lag.max(now)), w.length/maxMarginDiv)
}

// closes is when w stops granting: start + length − allowance. A grant's
// send deadline is the earliest closes of the windows it was counted in.
// Callers hold mu.
func (e *engine) closes(w *window, now time.Time) time.Time {
	return w.start.Add(w.length - e.allowance(w, now))
}

// minMargin is the resolution of window starts in KV (Unix ms).
const minMargin = time.Millisecond

// margin is srtt + 4·rttvar (above nearly every round trip seen), or
// initial before any answer was timed.
func (s *rttStat) margin(initial time.Duration) time.Duration {
	if s.n == 0 {
		return initial
	}
	return max(s.srtt+4*s.rttvar, minMargin)
}

// now is the limiter's time: Options.Now, plus (Shared) the offset of the
// NATS server's clock from it, so every process judges windows and pauses
// on one clock (kvStore.syncClock).
func (e *engine) now() time.Time { return e.o.Now().Add(e.offset()) }

// offset is the store's clock minus Options.Now (0 for Local).
func (e *engine) offset() time.Duration {
	off, _ := e.st.clock()
	return off
}

// margin is the time added to the end of b's window w before it rolls:
// the route's measured margin, or the larger one stored with the KV window
// by the processes that leased from it (Shared), never more than a quarter
// of the window's length; plus (Shared) the error bound of this process's
// server-clock offset. Callers hold mu.
func (e *engine) margin(b *bucket, w *window) time.Duration {
	m := min(max(b.rtt.margin(e.o.InitialMargin), w.kv.margin), w.length/maxMarginDiv)
	// Shared: this process's estimate of the server clock may be off by up
	// to half a KV round trip.
	_, offErr := e.st.clock()
	return m + offErr
}

// end is when b's window w rolls: start + length + margin, or earlier if a
// count-1 reply proved that Riot's window ends sooner (w.riotEnd, plus the
// error bound of this process's clock offset). Callers hold mu.
func (e *engine) end(b *bucket, w *window) time.Time {
	start := w.start
	if w.lateStart.After(start) {
		start = w.lateStart // a late first send moved Riot's possible start (permit.Send)
	}
	end := start.Add(w.length + e.margin(b, w))
	if !w.riotEnd.IsZero() {
		_, offErr := e.st.clock()
		if c := w.riotEnd.Add(offErr); c.Before(end) {
			end = c
		}
	}
	return end
}

// maxMarginDiv caps the margin at a quarter of the window: one very slow
// answer must not idle a long window for long. A window opened later than
// that by Riot is still caught: the count-1 reply realigns ours
// (engine.alignToRiot).
const maxMarginDiv = 4

// clockSample is one measurement of the server clock's offset: a Put's
// server timestamp minus the middle of its round trip on our clock.
type clockSample struct {
	offset, rtt time.Duration
}

// maxClockSamples is how many recent samples syncClock keeps; the offset
// is the one measured with the shortest round trip (as NTP filters), whose
// error is at most half that round trip.
const maxClockSamples = 8

// syncClock measures the offset of the NATS server's clock from
// Options.Now once: it writes <KeyID>.clock.<ProcID> and reads back the
// entry's timestamp, which the server stamped when it stored the write.
func (st *kvStore) syncClock(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, st.o.KVTimeout)
	defer cancel()
	smp, ok, err := measureClock(ctx, st.kv, st.o.KeyID+".clock."+st.o.ProcID, st.e.o.Now)
	if err != nil || !ok {
		return err
	}
	st.e.mu.Lock()
	defer st.e.mu.Unlock()
	st.samples = append(st.samples, smp)
	if len(st.samples) > maxClockSamples {
		st.samples = st.samples[1:]
	}
	best := st.samples[0]
	for _, s := range st.samples[1:] {
		if s.rtt < best.rtt {
			best = s
		}
	}
	st.offset.Store(int64(best.offset))
	st.offErr.Store(int64(best.rtt / 2))
	return nil
}

// measureClock takes one sample of the offset of the NATS server's clock
// from now: it writes key and reads back the entry's timestamp, which the
// server stamped when it stored the write. ok is false when another writer
// got in between or the read-back does not see the write yet (no sample).
func measureClock(ctx context.Context, kv jetstream.KeyValue, key string, now func() time.Time) (smp clockSample, ok bool, err error) {
	t1 := now()
	rev, err := kv.Put(ctx, key, []byte("t"))
	t2 := now()
	if err != nil {
		return smp, false, err
	}
	ent, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		// A direct get served by a replica that has not applied the Put
		// yet (R3 buckets): no sample, as for another writer's revision.
		return smp, false, nil
	}
	if err != nil {
		return smp, false, err
	}
	if ent.Revision() != rev {
		return smp, false, nil
	}
	rtt := t2.Sub(t1)
	return clockSample{offset: ent.Created().Sub(t1.Add(rtt / 2)), rtt: rtt}, true, nil
}

// ServerNow returns the NATS server's current time as the limiter uses it
// (window starts and pause ends are on that clock), measured as Shared
// does: it writes <keyID>.clock.<procID> in kv (History 1, so one entry per
// procID), reads back the server's timestamp, and keeps the best of three
// samples (the shortest round trip). now is this host's clock (nil:
// time.Now); the result is now() moved by the measured offset, so a host
// clock that is off does not move it. err is bound to ctx; the key needs
// write access to the bucket. Its error bound is half the round trip.
func ServerNow(ctx context.Context, kv jetstream.KeyValue, keyID, procID string, now func() time.Time) (time.Time, error) {
	if now == nil {
		now = time.Now
	}
	key := kvToken(keyID) + ".clock." + kvToken(strings.ReplaceAll(procID, ".", "_"))
	var best clockSample
	found := false
	for range 3 {
		smp, ok, err := measureClock(ctx, kv, key, now)
		if err != nil {
			return time.Time{}, err
		}
		if ok && (!found || smp.rtt < best.rtt) {
			best, found = smp, true
		}
	}
	if !found {
		return time.Time{}, errors.New("ratelimit: server clock: concurrent writers on " + key)
	}
	return now().Add(best.offset), nil
}

func (s *Shared) syncClock(ctx context.Context) {
	defer close(s.clockDone)
	if s.st.o.ClockSync <= 0 {
		return
	}
	tick.Every(ctx, s.st.o.ClockSync, func() {
		if err := s.st.syncClock(ctx); err != nil && ctx.Err() == nil {
			s.e.o.Logger.Debug("ratelimit: measure server clock", "err", err)
		}
	})
}
