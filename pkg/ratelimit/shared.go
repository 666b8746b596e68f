package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/tick"
)

// SharedOptions configures a Shared limiter.
type SharedOptions struct {
	Options
	// Bucket is the JetStream KV bucket holding the state (default
	// "ratelimit"). It must exist: it is declared, with its TTL, in
	// streams/streams.json and created by `riftflow streams apply`.
	Bucket string
	// KeyID identifies the API key in KV keys: a hash of the key (for
	// example the first 16 hex digits of its SHA-256), never the key.
	// Required; letters, digits, '-', '_' and '=' only.
	KeyID string
	// MaxLease is the most tokens one lease takes from a window at once
	// (default 20). Leases are sized by local demand and shrink to 1 as the
	// window's remaining budget runs short: min(demand, MaxLease,
	// max(1, remaining/LeaseDivisor)).
	MaxLease int
	// LeaseDivisor bounds a lease to this fraction of the window's
	// remaining budget (default 8).
	LeaseDivisor int
	// StoreRetry is how long a budget waits after a failed KV operation
	// before trying the store again (default 500 ms). Meanwhile only
	// tokens already leased are granted: the limiter fails closed.
	StoreRetry time.Duration
	// ProbeTTL is how long one process may probe a budget whose limits no
	// process has learned yet before another may take over (default 15 s;
	// keep it above RIOT_HTTP_TIMEOUT_MS). The others wait for its limits.
	ProbeTTL time.Duration
	// KVTimeout bounds each KV operation (default 2 s).
	KVTimeout time.Duration
	// ClockSync is how often the offset of the NATS server's clock from
	// Options.Now is measured (default 2 s): window starts and pause ends
	// are on the server's clock, so host clock skew cannot move them.
	// Negative: never; the injected clock is used as is (tests that step
	// a manual clock).
	ClockSync time.Duration
	// ProcID names this process in KV (default: host name and a random
	// suffix); StatsEvery is how often it writes its counters there
	// (default 5 s), under <KeyID>.proc.<ProcID>, for `riftflow status`
	// (see ReadState). Negative StatsEvery disables it.
	ProcID     string
	StatsEvery time.Duration
	// OnKeyCleared, if set, is called (from the KV watcher's goroutine)
	// when another process or an operator clears the key's rejection
	// (ClearKeyRejection, `riftflow clear-key-rejection`) while this one
	// had it: the Riot client's own flag is cleared with it
	// (riot.Client.AcceptKey).
	OnKeyCleared func()
}

// Shared is a riot.Limiter whose budgets are shared, through a JetStream KV
// bucket, by every process using the same API key (KeyID). Processes lease
// small batches of each window's budget with compare-and-set; 429 pauses,
// learned limits and a rejected key are written to KV and watched by all.
type Shared struct {
	e         *engine
	st        *kvStore
	cancel    context.CancelFunc
	done      chan struct{}
	statsDone chan struct{}
	clockDone chan struct{}
}

type kvStore struct {
	e  *engine
	kv jetstream.KeyValue
	o  SharedOptions
	// offset is the NATS server's clock minus Options.Now, in ns
	// (syncClock); samples are the latest measurements.
	offset  atomic.Int64
	offErr  atomic.Int64 // the offset's error bound: half the chosen sample's round trip, ns
	samples []clockSample
	// afterProbeRead, when set (tests only), runs in startProbe between the
	// KV read and applying its result, to order a concurrent release there.
	afterProbeRead func()
}

var keyIDRe = regexp.MustCompile(`^[-_=a-zA-Z0-9]+$`)

// NewShared binds to the KV bucket (declared in streams/) and starts
// watching pauses, limits and the rejected-key flag. ctx bounds the setup
// only; call Close to stop the watcher.
func NewShared(ctx context.Context, js jetstream.JetStream, o SharedOptions) (*Shared, error) {
	if !keyIDRe.MatchString(o.KeyID) {
		return nil, errors.New("ratelimit: SharedOptions.KeyID must be a non-empty hash ([-_=a-zA-Z0-9]+), never the API key")
	}
	if o.Bucket == "" {
		o.Bucket = "ratelimit"
	}
	if o.MaxLease <= 0 {
		o.MaxLease = 20
	}
	if o.LeaseDivisor <= 0 {
		o.LeaseDivisor = 8
	}
	if o.StoreRetry <= 0 {
		o.StoreRetry = 500 * time.Millisecond
	}
	if o.KVTimeout <= 0 {
		o.KVTimeout = 2 * time.Second
	}
	if o.ProbeTTL <= 0 {
		o.ProbeTTL = 15 * time.Second
	}
	if o.ClockSync == 0 {
		o.ClockSync = 2 * time.Second
	}
	if o.StatsEvery == 0 {
		o.StatsEvery = 5 * time.Second
	}
	if o.ProcID == "" {
		host, _ := os.Hostname()
		o.ProcID = host + "-" + nuid.Next()[16:]
	}
	o.ProcID = kvToken(strings.ReplaceAll(o.ProcID, ".", "_"))
	kv, err := js.KeyValue(ctx, o.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("ratelimit: KV bucket %s not found: it is declared in streams/streams.json with its TTL; run `riftflow streams apply`: %w", o.Bucket, err)
	}
	if err != nil {
		return nil, fmt.Errorf("ratelimit: kv bucket %s: %w", o.Bucket, err)
	}
	e := newEngine(o.Options)
	st := &kvStore{e: e, kv: kv, o: o}
	e.st = st
	p := o.KeyID + "."
	wctx, cancel := context.WithCancel(context.Background())
	w, err := kv.WatchFiltered(wctx, []string{p + "*.pause.>", p + "*.limits.>", p + "*.probe.>", p + "*.align.>", p + "rejected"})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("ratelimit: watch %s: %w", o.Bucket, err)
	}
	if o.ClockSync > 0 {
		if err := st.syncClock(ctx); err != nil {
			cancel()
			return nil, fmt.Errorf("ratelimit: server clock: %w", err)
		}
	}
	s := &Shared{e: e, st: st, cancel: cancel, done: make(chan struct{}), statsDone: make(chan struct{}), clockDone: make(chan struct{})}
	go s.watch(w)
	go s.writeStats(wctx)
	go s.syncClock(wctx)
	return s, nil
}

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

// procVal is one process's record in KV.
type procVal struct {
	At       int64       `json:"at"` // Unix ms of the write
	Rejected int         `json:"rejected,omitempty"`
	Calls    []CallStats `json:"calls"`
}

func (s *Shared) putStats() {
	s.e.mu.Lock()
	rej := s.e.rejected
	s.e.mu.Unlock()
	v, _ := json.Marshal(procVal{At: s.e.now().UnixMilli(), Rejected: rej, Calls: s.e.met.counters()})
	ctx, cancel := s.st.ctx()
	defer cancel()
	if _, err := s.st.kv.Put(ctx, s.st.o.KeyID+".proc."+s.st.o.ProcID, v); err != nil {
		s.e.o.Logger.Debug("ratelimit: write process stats", "err", err)
	}
}

func (s *Shared) writeStats(ctx context.Context) {
	defer close(s.statsDone)
	if s.st.o.StatsEvery < 0 {
		return
	}
	tick.Every(ctx, s.st.o.StatsEvery, s.putStats)
	s.putStats() // the last counters, when ctx ends
}

// Counters returns this process's request counters (granted, 429s by
// type, refusals, time waited) per route and method.
func (s *Shared) Counters() []CallStats { return s.e.met.counters() }

// Acquire implements riot.Limiter.
func (s *Shared) Acquire(ctx context.Context, c riot.Call) (riot.Permit, error) {
	return s.e.acquire(ctx, c)
}

// Snapshot returns the state of every budget as this process sees it
// (window counts are the key's global counts as last read from KV).
func (s *Shared) Snapshot() []BucketState { return s.e.snapshot() }

// Close stops the KV watcher and writes this process's counters a last
// time. Permits already granted stay valid.
func (s *Shared) Close() {
	s.cancel()
	<-s.done
	<-s.statsDone
	<-s.clockDone
}

// RejectKey records that Riot rejected the key (401 or 403) here and in KV,
// so that every replica's Acquire fails with riot.KindKeyRejected.
func (s *Shared) RejectKey(status int) error {
	s.e.mu.Lock()
	first := s.e.rejectKey(status)
	s.e.mu.Unlock()
	if first {
		s.e.met.keyRejected(status, "local")
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.st.o.KVTimeout)
	defer cancel()
	_, err := s.st.kv.Put(ctx, s.st.o.KeyID+".rejected", []byte(strconv.Itoa(status)))
	if err == nil {
		go s.putStats()
	}
	return err
}

// ClearKeyRejection clears the key's rejection here and in KV (a probe
// found the key accepted again): every replica's watcher clears its own.
// Errors: the KV delete failed (this process is cleared anyway).
func (s *Shared) ClearKeyRejection() error {
	s.e.mu.Lock()
	s.e.acceptKey()
	s.e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.st.o.KVTimeout)
	defer cancel()
	return ClearRejection(ctx, s.st.kv, s.st.o.KeyID)
}

// ClearRejection deletes the shared rejection of the key keyID from the
// rate-limit bucket kv, so that every process using the key sends calls
// again (each Shared limiter's watcher clears its flag and calls
// SharedOptions.OnKeyCleared). If the key is still refused, two 401/403
// answers from key endpoints reject it again. Deleting a key that is not
// rejected is no error.
func ClearRejection(ctx context.Context, kv jetstream.KeyValue, keyID string) error {
	if err := kv.Delete(ctx, keyID+".rejected"); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("ratelimit: clear the rejection of key %s: %w", keyID, err)
	}
	return nil
}

// KeyRejected reports whether any replica rejected the key, and the status.
func (s *Shared) KeyRejected() (bool, int) {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	return s.e.rejected != 0, s.e.rejected
}

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

var badKeyChars = regexp.MustCompile(`[^-_=.a-zA-Z0-9]`)

// kvToken makes a route or method ID safe inside a KV key.
func kvToken(s string) string {
	s = badKeyChars.ReplaceAllString(s, "_")
	for strings.Contains(s, "..") {
		s = strings.ReplaceAll(s, "..", "._")
	}
	s = strings.Trim(s, ".")
	if s == "" {
		return "_"
	}
	return s
}

func (st *kvStore) base(b *bucket, kind string) string {
	k := st.o.KeyID + "." + kvToken(b.route) + "." + kind + "."
	if b.method == "" {
		return k + "app"
	}
	return k + "m." + kvToken(b.method)
}

type winVal struct {
	Start   int64 `json:"s"` // window start, Unix ms
	Limit   int   `json:"l"`
	Granted int   `json:"g"` // tokens handed out (leased) in this window by all processes
	// Margin is the largest measured margin (ms) of the processes that
	// leased from the window; every process judges the window's end as
	// start + length + max(its own margin, Margin).
	Margin int64 `json:"m,omitempty"`
	// End (Unix ms, 0 if unknown) is the latest end of Riot's window that
	// a count-1 reply proved (engine.alignToRiot), plus the error bound of
	// the writer's clock offset: the window may roll then, if that is
	// earlier than start + length + margin.
	End int64 `json:"e,omitempty"`
	// Ep is the window's epoch: its Start when it was created. A count-1
	// reply that moves or rolls it (alignKV) keeps Ep: the window's count
	// still holds tokens leased under the earlier start.
	Ep int64 `json:"ep,omitempty"`
	// Done lists tokens of this window (counted in Granted) that are
	// settled: their requests were answered, or the tokens were dropped
	// unsent, at or before T. A roll (alignKV) keeps in the new window
	// every token not settled before the request that began Riot's window
	// was granted: only those can be in Riot's window.
	Done []settleVal `json:"d,omitempty"`
}

// settleVal is a batch of N settled tokens, all settled by T (Unix ms on
// the server clock, rounded up, plus the writer's clock error bound).
type settleVal struct {
	T int64 `json:"t"`
	N int   `json:"n"`
}

// maxDone bounds winVal.Done: beyond it the two oldest batches merge into
// one with the later time (later is safe: it settles fewer at a roll).
const maxDone = 16

func (v winVal) epoch() int64 {
	if v.Ep != 0 {
		return v.Ep
	}
	return v.Start
}

// addSettled counts n of this process's tokens in w (epoch w.epoch) as
// settled at now and starts writing them to KV. Callers hold mu.
func (st *kvStore) addSettled(b *bucket, w *window, n int, now time.Time) {
	if n <= 0 || w.epoch == 0 {
		return
	}
	_, offErr := st.clock()
	t := now.Add(offErr + time.Millisecond - 1).UnixMilli()
	w.pend.N += n
	w.pend.T = max(w.pend.T, t)
	if !b.settling {
		b.settling = true
		go st.settle(b)
	}
}

// settleBatch is how long settle waits to gather answers into one write
// per window: a settlement written late only makes a roll in that time
// keep a token it could have freed.
const settleBatch = 5 * time.Millisecond

// settle writes b's pending settlements (window.pend) to their KV windows
// until none is left; b.settling is set. A write that fails, or finds the
// KV window in another epoch, drops them: an unsettled token only makes a
// later roll keep more (the safe side), and a new epoch starts from zero.
func (st *kvStore) settle(b *bucket) {
	type job struct {
		key string
		ep  int64
		s   settleVal
	}
	for {
		time.Sleep(settleBatch) // gather the answers of one burst into one write
		st.e.mu.Lock()
		var jobs []job
		for _, w := range b.windows {
			if w.pend.N > 0 {
				jobs = append(jobs, job{st.base(b, "win") + "." + strconv.FormatInt(int64(w.length/time.Second), 10), w.epoch, w.pend})
				w.pend = settleVal{}
			}
		}
		if len(jobs) == 0 {
			b.settling = false
			st.e.mu.Unlock()
			return
		}
		st.e.mu.Unlock()
		for _, j := range jobs {
			st.settleOne(j.key, j.ep, j.s)
		}
	}
}

func (st *kvStore) settleOne(key string, ep int64, sv settleVal) {
	ctx, cancel := st.ctx()
	defer cancel()
	_, err := st.casWin(ctx, key, func(cur *winVal) bool {
		if cur.epoch() != ep {
			return false
		}
		cur.Ep = ep
		cur.Done = append(cur.Done, sv)
		if len(cur.Done) > maxDone {
			a, b := cur.Done[0], cur.Done[1]
			cur.Done = append([]settleVal{{T: max(a.T, b.T), N: a.N + b.N}}, cur.Done[2:]...)
		}
		return true
	})
	if err != nil {
		st.e.o.Logger.Debug("ratelimit: settle tokens", "key", key, "err", err)
	}
}

// unsettled splits v.Done at t (Unix ms): it returns how many tokens were
// settled at or before t and the batches settled later.
func (v winVal) unsettled(t int64) (int, []settleVal) {
	n := 0
	var later []settleVal
	for _, d := range v.Done {
		if d.T <= t {
			n += d.N
		} else {
			later = append(later, d)
		}
	}
	return n, later
}

// end is when the window may roll for a process whose margin is margin
// and whose clock offset's error bound is offErr.
func (v winVal) end(length, margin, offErr time.Duration) time.Time {
	end := time.UnixMilli(v.Start).Add(length + max(margin, time.Duration(v.Margin)*time.Millisecond))
	if v.End > 0 {
		if c := time.UnixMilli(v.End).Add(offErr); c.Before(end) {
			end = c
		}
	}
	return end
}

type pauseVal struct {
	Until int64  `json:"u"` // Unix ms
	Type  string `json:"t"`
}

func (st *kvStore) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), st.o.KVTimeout)
}

// releaseProbe deletes b's probe lock in KV (asynchronously); the other
// processes see the delete in their watch and may probe at once.
func (st *kvStore) releaseProbe(b *bucket) {
	go func() {
		ctx, cancel := st.ctx()
		defer cancel()
		st.deleteProbe(ctx, b)
	}()
}

// deleteProbe deletes b's probe lock in KV.
func (st *kvStore) deleteProbe(ctx context.Context, b *bucket) {
	key := st.base(b, "probe")
	if err := st.kv.Delete(ctx, key); err != nil {
		st.e.o.Logger.Debug("ratelimit: release probe lock", "key", key, "err", err)
	}
}

// shareLimits writes learned limits for the other processes (after pause,
// if any: a 429 that taught them) and, if this process held the probe
// lock, releases it. Called without e.mu.
func (st *kvStore) shareLimits(b *bucket, canon string, probed bool, pause *pauseVal) {
	key := st.base(b, "limits")
	ctx, cancel := st.ctx()
	defer cancel()
	if pause != nil {
		st.writePause(ctx, b, *pause)
	}
	if _, err := st.kv.Put(ctx, key, []byte(canon)); err != nil {
		st.e.o.Logger.Warn("ratelimit: share limits", "key", key, "err", err)
	}
	if probed {
		st.deleteProbe(ctx, b)
	}
}

func (st *kvStore) putPause(b *bucket, until time.Time, typ string) {
	pv := pauseVal{Until: until.UnixMilli(), Type: typ}
	go func() {
		ctx, cancel := st.ctx()
		defer cancel()
		st.writePause(ctx, b, pv)
	}()
}

// writePause writes b's pause to KV; failures are logged (the pause still
// applies locally).
func (st *kvStore) writePause(ctx context.Context, b *bucket, pv pauseVal) {
	key := st.base(b, "pause")
	v, _ := json.Marshal(pv)
	if _, err := st.kv.Put(ctx, key, v); err != nil {
		st.e.o.Logger.Warn("ratelimit: share pause", "key", key, "err", err)
	}
}

// reconcile raises a window's global count in KV to c, a -Count header
// above what KV knows (another user of the key, drift, or requests sent
// before the limits were known). counted is the window start the request
// was counted in (zero if none: then the current window is raised, or a
// new one started at at, the request's grant time).
func (st *kvStore) reconcile(b *bucket, w *window, counted, at time.Time, c int) {
	key := st.base(b, "win") + "." + strconv.FormatInt(int64(w.length/time.Second), 10)
	length, limit, margin := w.length, w.limit, st.e.margin(b, w)
	_, offErr := st.clock()
	go func() {
		ctx, cancel := st.ctx()
		defer cancel()
		for range 10 {
			now := st.e.now()
			ent, err := st.kv.Get(ctx, key)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				if !counted.IsZero() {
					return
				}
				v, _ := json.Marshal(winVal{Start: at.UnixMilli(), Limit: limit, Granted: c})
				if _, err := st.kv.Create(ctx, key, v); errors.Is(err, jetstream.ErrKeyExists) {
					continue
				}
				return
			}
			if err != nil {
				return
			}
			var cur winVal
			_ = json.Unmarshal(ent.Value(), &cur)
			next := cur
			switch {
			case cur.Start == 0 || !now.Before(cur.end(length, margin, offErr)):
				if !counted.IsZero() {
					return // that window is over
				}
				next = winVal{Start: at.UnixMilli(), Limit: limit, Granted: c}
			case !counted.IsZero() && cur.Start != counted.UnixMilli():
				return
			case cur.Granted >= c:
				return
			default:
				next.Granted = c
			}
			v, _ := json.Marshal(next)
			if _, err := st.kv.Update(ctx, key, v, ent.Revision()); !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
				return
			}
		}
	}()
}

// alignKV applies a count-1 reply for the request marked m to the KV window
// of w's length (see engine.alignToRiot): if KV still holds the window m's
// request was counted in and it started before floor, it is rolled to
// floor keeping every token not settled before m's grant (winVal.Done;
// moved keeping its count if its length has not passed); if it holds a later window started before floor, that window
// moves to floor with its count. Anything else (a window
// already starting at or after floor) is left alone.
func (st *kvStore) alignKV(b *bucket, w *window, m mark, floor, now time.Time) {
	roll := now.Sub(m.start) >= w.length // as engine.alignToRiot
	sec := strconv.FormatInt(int64(w.length/time.Second), 10)
	key := st.base(b, "win") + "." + sec
	counted, fl := m.start.UnixMilli(), floor.UnixMilli()
	// Riot's window began with m's request, by now: it ends by now +
	// length (plus this process's clock error), rounded up to the ms.
	_, offErr := st.clock()
	riotEnd := now.Add(w.length + offErr + time.Millisecond - 1).UnixMilli()
	granted := m.at.Add(-offErr).UnixMilli() // m's grant, at the earliest
	go func() {
		ctx, cancel := st.ctx()
		defer cancel()
		moved := true
		wrote, _ := st.casWin(ctx, key, func(cur *winVal) bool {
			cur.Ep = cur.epoch() // kept when the start moves
			moved = true
			switch {
			case cur.Start == counted && !roll && (cur.End < riotEnd || cur.Start < fl):
				// m's window, young: record Riot's end (engine.alignToRiot)
				// and move the start to floor if it is before.
				cur.End = max(cur.End, riotEnd)
				cur.Start, moved = max(cur.Start, fl), cur.Start < fl
			case cur.Start >= fl:
				return false
			case cur.Start == counted && roll:
				// Riot's window began when m's request arrived, after its
				// grant: a token settled before that grant (answered, or
				// dropped unsent) was not in it; every other token of the
				// window may be, whichever process leased it, and stays
				// counted, including those leased but not sent yet.
				settled, later := cur.unsettled(granted)
				cur.Start, cur.Granted, cur.End, cur.Done = fl, max(0, cur.Granted-settled), 0, later
			case cur.Start > counted:
				cur.Start, cur.End = fl, 0
			default:
				return false
			}
			return true
		})
		if wrote && moved {
			// Tell the others: a process whose view of the window is full
			// would otherwise wait for its own end of it. (Only an end
			// recorded: the others learn it on their next lease.)
			if _, err := st.kv.Put(ctx, st.base(b, "align")+"."+sec, []byte(strconv.FormatInt(fl, 10))); err != nil {
				st.e.o.Logger.Debug("ratelimit: announce realigned window", "key", key, "err", err)
			}
		}
	}()
}

// errMovedOn: the KV window a grant came from has been replaced.
var errMovedOn = errors.New("ratelimit: the KV window of the grant has moved on")

// opening moves the start of the KV window that m's request was counted
// in to at least start, synchronously (permit.Send): the request may open
// Riot's window as late as that, and no process may start the next
// window before this one's end counted from there. The window must still
// be m's (its epoch, not ended); otherwise, or when KV fails, the request
// is not sent.
func (st *kvStore) opening(b *bucket, w *window, m mark, start time.Time) error {
	st.e.mu.Lock()
	sec := strconv.FormatInt(int64(w.length/time.Second), 10)
	st.e.mu.Unlock()
	key := st.base(b, "win") + "." + sec
	ctx, cancel := st.ctx()
	defer cancel()
	ms := start.UnixMilli()
	ok := false
	_, err := st.casWin(ctx, key, func(cur *winVal) bool {
		ok = cur.epoch() == m.ep || cur.Start == m.start.UnixMilli()
		if !ok || cur.Start >= ms {
			return false
		}
		cur.Ep, cur.Start = cur.epoch(), ms
		return true
	})
	if err != nil {
		return err
	}
	if !ok {
		return errMovedOn
	}
	return nil
}

// casWin reads the KV window at key, lets edit change it (false: leave it
// as it is) and writes it back with compare-and-set, again on a conflict,
// up to 10 times. It reports whether it wrote; err is a KV error or too
// much contention.
func (st *kvStore) casWin(ctx context.Context, key string, edit func(*winVal) bool) (bool, error) {
	for range 10 {
		ent, err := st.kv.Get(ctx, key)
		if err != nil {
			return false, err
		}
		var cur winVal
		if json.Unmarshal(ent.Value(), &cur) != nil || !edit(&cur) {
			return false, nil
		}
		v, _ := json.Marshal(cur)
		_, err = st.kv.Update(ctx, key, v, ent.Revision())
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return err == nil, err
		}
	}
	return false, errors.New("ratelimit: too much CAS contention on " + key)
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

type leaseJob struct {
	w      *window
	key    string
	length time.Duration
	limit  int
	want   int
	seedIn int
	// seedCount is a -Count seen before the limits were known: the window
	// is raised to at least this.
	seedCount int
	carry     int // requests in flight from the previous window, added once to the new one
	rolled    int // the window's rollCarry that carry took
	// localStart is the window start this process knew; inflight its
	// requests in flight. If KV holds a later start of another epoch that
	// is still running, another process's window replaced ours and does
	// not count them: they are added. (A window of the same epoch that a
	// count-1 reply realigned kept them, alignKV.)
	localStart time.Time
	inflight   int
	epoch      int64 // the epoch this process's tokens were leased from
	// margin judges the stored window's end; shareMargin (this process's
	// measured margin, 0 before any answer was timed) is stored with it.
	margin, shareMargin time.Duration
	offErr              time.Duration // the error bound of this process's clock offset
	// allow is this process's send allowance (engine.allowance): no token
	// is taken from a window within allow of its nominal end, where a
	// grant's send deadline would already have passed.
	allow time.Duration
	// results
	start    time.Time
	got, g   int
	kvMargin time.Duration
	riotEnd  time.Time // the window's End, zero if none
	ep       int64     // the window's epoch (winVal.Ep)
	err      error
}

type probeVal struct {
	Proc  string `json:"p"`
	Until int64  `json:"u"` // Unix ms
}

// probeResult is what kvStore.probe found: the limits another process
// shared, or the probe lock (held by us until until, or by another
// process until until), or a KV error.
type probeResult struct {
	limits []Limit
	held   bool
	until  time.Time
	err    error
}

// probe is the conservative start of a budget whose limits this process
// does not know. If another process shared them (<kid>.<route>.limits.*) it
// returns them; otherwise it takes the probe lock <kid>.<route>.probe.* for
// ProbeTTL, or reports who holds it until when. Without the lock, N
// processes starting together would each send a first request that no KV
// window counts (up to N−1 over the limit in the first window).
func (st *kvStore) probe(b *bucket) probeResult {
	ctx, cancel := st.ctx()
	defer cancel()
	ent, err := st.kv.Get(ctx, st.base(b, "limits"))
	if err == nil {
		if ls := ParseLimits(string(ent.Value())); len(ls) > 0 {
			return probeResult{limits: ls}
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return probeResult{err: err}
	}
	key := st.base(b, "probe")
	for range 10 {
		now := st.e.now()
		until := time.UnixMilli(now.Add(st.o.ProbeTTL).UnixMilli())
		v, _ := json.Marshal(probeVal{Proc: st.o.ProcID, Until: until.UnixMilli()})
		ent, err := st.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			_, err = st.kv.Create(ctx, key, v)
			if err == nil {
				return probeResult{held: true, until: until}
			}
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue
			}
			return probeResult{err: err}
		}
		if err != nil {
			return probeResult{err: err}
		}
		var cur probeVal
		if json.Unmarshal(ent.Value(), &cur) == nil && cur.Proc != st.o.ProcID && now.Before(time.UnixMilli(cur.Until)) {
			return probeResult{until: time.UnixMilli(cur.Until)}
		}
		// Ours, expired (its holder died or never got an answer) or garbage.
		_, err = st.kv.Update(ctx, key, v, ent.Revision())
		if err == nil {
			return probeResult{held: true, until: until}
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return probeResult{err: err}
		}
	}
	return probeResult{err: errors.New("ratelimit: probe lock: too much CAS contention")}
}

// startProbe runs probe for b and applies its result. It runs in its own
// goroutine; b.fetching is set and e.mu is not held. freed is b.probeFreed
// before the probe read KV: if the watch has seen the lock released since,
// a "held by another" answer is stale, and b probes again at once instead
// of waiting out a lock that no longer exists.
func (st *kvStore) startProbe(r *route, b *bucket, freed uint64) {
	e := st.e
	res := st.probe(b)
	if st.afterProbeRead != nil {
		st.afterProbeRead()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	switch {
	case b.limits != "": // learned meanwhile (watch or own answer)
	case len(res.limits) > 0:
		e.setLimits(b, res.limits, now)
	case res.err != nil:
		// KV unreachable: fail closed (no probe), try again later.
		if !b.storeDown {
			e.o.Logger.Warn("ratelimit: kv unreachable; not probing unknown limits until it answers", "route", b.route, "bucket", b.name(), "err", res.err)
		}
	case res.held:
		b.probeUntil = res.until
	case b.probeFreed == freed:
		b.probeWait = res.until
	}
	st.storeResult(b, res.err != nil, now)
	b.fetching = false
	e.dispatch(r, now)
}

// storeResult records whether b's last KV operation failed: after a
// failure b waits StoreRetry before the next (engine.check blocks it
// meanwhile). Callers hold mu.
func (st *kvStore) storeResult(b *bucket, failed bool, now time.Time) {
	if failed {
		b.storeDown, b.storeRetry = true, now.Add(st.o.StoreRetry)
		return
	}
	if b.storeDown {
		st.e.o.Logger.Info("ratelimit: kv answers again", "route", b.route, "bucket", b.name())
	}
	b.storeDown, b.storeRetry = false, time.Time{}
}

// lease fetches tokens from KV for every window of b that needs them, then
// dispatches r. It runs in its own goroutine; b.fetching is set. While b's
// limits are unknown it takes the probe lock instead (startProbe). When b
// has limits to share, it writes them after the windows are seeded.
func (st *kvStore) lease(r *route, b *bucket) {
	e := st.e
	e.mu.Lock()
	if b.limits == "" {
		freed := b.probeFreed
		e.mu.Unlock()
		st.startProbe(r, b, freed)
		return
	}
	share, probed := b.share, !b.probeUntil.IsZero()
	b.share = ""
	var pause *pauseVal
	if share != "" {
		b.probeUntil, b.probeWait = time.Time{}, time.Time{}
		if now := e.now(); now.Before(b.pausedUntil) {
			// The answer that taught the limits may have been a 429: its
			// pause must be in KV before the limits wake the others.
			pause = &pauseVal{Until: b.pausedUntil.UnixMilli(), Type: b.pauseType}
		}
	}
	demand := b.hi.Len() + b.lo.Len()
	if b == r.app {
		demand = 0
		for _, m := range r.order {
			demand += m.hi.Len() + m.lo.Len()
		}
	}
	want := min(max(demand, 1), st.o.MaxLease)
	var jobs []*leaseJob
	for _, w := range b.windows {
		if !w.start.IsZero() && (w.leased > 0 || w.count >= w.limit) {
			continue
		}
		carry, rolled := 0, 0
		if w.start.IsZero() {
			// The window rolled: this process's requests in flight then
			// may land in Riot's next window, so they count in the new one
			// (kvStore.rolled), unless a whole window has passed since.
			// seedIn already holds the pre-limit ones.
			if e.now().Sub(w.rolledAt) < w.length {
				rolled = w.rollCarry
			}
			carry = max(0, max(rolled, b.inflight)-w.seedIn)
		}
		var shareMargin time.Duration
		if b.rtt.n > 0 {
			shareMargin = b.rtt.margin(0)
		}
		jobs = append(jobs, &leaseJob{w: w, key: st.base(b, "win") + "." + strconv.FormatInt(int64(w.length/time.Second), 10),
			length: w.length, limit: w.limit, want: want, seedIn: w.seedIn, seedCount: w.seedCount, carry: carry, rolled: rolled,
			margin: e.margin(b, w), shareMargin: shareMargin, offErr: time.Duration(st.offErr.Load()), localStart: w.start, inflight: b.inflight, epoch: w.epoch,
			allow: e.allowance(w, e.now())})
	}
	e.mu.Unlock()

	for _, j := range jobs {
		var v winVal
		v, j.got, j.err = st.leaseOne(j)
		j.start, j.g, j.kvMargin, j.riotEnd, j.ep = time.UnixMilli(v.Start), v.Granted, v.margin(), v.riotEnd(), v.Ep
	}
	if share != "" {
		st.shareLimits(b, share, probed, pause)
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	failed := false
	for _, j := range jobs {
		w := j.w
		if j.err != nil {
			failed = true
			if !b.storeDown {
				e.o.Logger.Warn("ratelimit: kv unreachable; granting only tokens already leased until it answers", "route", b.route, "bucket", b.name(), "err", j.err)
			}
			continue
		}
		if w.seedIn == j.seedIn {
			w.seedIn = 0
		}
		if w.seedCount == j.seedCount {
			w.seedCount = 0
		}
		if w.rollCarry == j.rolled {
			w.rollCarry = 0
		}
		if !w.start.Equal(j.start) {
			// Tokens held unsent under the old start are dropped; the
			// window's epoch, if it is the same, still counts them.
			if j.ep == w.epoch {
				st.addSettled(b, w, max(w.leased, 0), now)
			}
			w.start, w.leased, w.riotEnd = j.start, 0, time.Time{}
		}
		if j.ep != w.epoch {
			// A new epoch: the old one's settlements have nowhere to go.
			w.epoch, w.pend = j.ep, settleVal{}
		}
		if j.riotEnd.After(w.riotEnd) {
			// Riot's end as another process proved it; the stored value
			// holds the writer's clock error already (engine.end adds ours).
			w.riotEnd = j.riotEnd
		}
		w.leased += j.got
		w.count = max(w.count, j.g)
		w.kvMargin = j.kvMargin
	}
	st.storeResult(b, failed, now)
	b.fetching = false
	if b.share != "" {
		st.fetch(r, b) // learned while this lease ran
	}
	e.dispatch(r, now)
}

// leaseOne takes up to j.want tokens from one window in KV with CAS,
// starting a new window when the stored one has ended. It returns the
// window as stored (its Ep set) and the tokens taken.
func (st *kvStore) leaseOne(j *leaseJob) (winVal, int, error) {
	ctx, cancel := st.ctx()
	defer cancel()
	ms := j.shareMargin.Milliseconds()
	if j.shareMargin > 0 {
		ms = max(ms, 1)
	}
	for range 50 {
		now := st.e.now()
		size := func(rem int) int { return max(0, min(j.want, rem, max(1, rem/st.o.LeaseDivisor))) }
		ent, err := st.kv.Get(ctx, j.key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			g0 := max(j.seedIn+j.carry, j.seedCount)
			k := size(j.limit - g0)
			next := winVal{Start: now.UnixMilli(), Limit: j.limit, Granted: g0 + k, Margin: ms, Ep: now.UnixMilli()}
			v, _ := json.Marshal(next)
			_, err := st.kv.Create(ctx, j.key, v)
			if err == nil {
				return next, k, nil
			}
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue
			}
			return winVal{}, 0, err
		}
		if err != nil {
			return winVal{}, 0, err
		}
		var cur winVal
		if err := json.Unmarshal(ent.Value(), &cur); err != nil {
			cur = winVal{} // garbage: start a new window
		}
		var next winVal
		var k int
		if cur.Start == 0 || !now.Before(cur.end(j.length, j.margin, j.offErr)) {
			g0 := max(j.seedIn+j.carry, j.seedCount)
			k = size(j.limit - g0)
			next = winVal{Start: now.UnixMilli(), Limit: j.limit, Granted: g0 + k, Margin: ms, Ep: now.UnixMilli()}
		} else {
			add := j.seedIn
			// This process's requests in flight are counted in the window's
			// epoch they were leased from; a window of that epoch that a
			// count-1 reply rolled (alignKV) kept them, unless settled.
			if cur.epoch() != j.epoch {
				add += j.carry
				if !j.localStart.IsZero() && cur.Start > j.localStart.UnixMilli() {
					add += j.inflight
				}
			}
			raised := max(cur.Granted+add, j.seedCount)
			k = size(j.limit - raised)
			if !now.Before(time.UnixMilli(cur.Start).Add(j.length - j.allow)) {
				k = 0 // closed: a token taken now could not be sent (engine.closes)
			}
			if k == 0 && raised == cur.Granted {
				cur.Ep = cur.epoch()
				return cur, 0, nil // spent: nothing to write
			}
			// Written even with no token left: the seeds must reach KV.
			next = cur
			next.Ep, next.Limit, next.Granted, next.Margin = cur.epoch(), j.limit, raised+k, max(cur.Margin, ms)
		}
		v, _ := json.Marshal(next)
		_, err = st.kv.Update(ctx, j.key, v, ent.Revision())
		if err == nil {
			return next, k, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return winVal{}, 0, err
		}
	}
	return winVal{}, 0, errors.New("ratelimit: lease: too much CAS contention")
}

func (v winVal) margin() time.Duration { return time.Duration(v.Margin) * time.Millisecond }

// riotEnd is End as a time (zero if none).
func (v winVal) riotEnd() time.Time {
	if v.End == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v.End)
}
