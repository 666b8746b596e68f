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
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/riftflow/riftflow/pkg/config"
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

var keyIDRe = regexp.MustCompile(`^[-_=a-zA-Z0-9]+$`)

// NewShared binds to the KV bucket (declared in streams/) and starts
// watching pauses, limits and the rejected-key flag. ctx bounds the setup
// only; call Close to stop the watcher.
func NewShared(ctx context.Context, js jetstream.JetStream, o SharedOptions) (*Shared, error) {
	if !keyIDRe.MatchString(o.KeyID) {
		return nil, errors.New("ratelimit: SharedOptions.KeyID must be a non-empty hash ([-_=a-zA-Z0-9]+), never the API key")
	}
	// ClockSync and StatsEvery are not in Fill's defaults: a negative one
	// is kept (off).
	config.Fill(&o, SharedOptions{Bucket: "ratelimit", MaxLease: 20, LeaseDivisor: 8, StoreRetry: 500 * time.Millisecond,
		KVTimeout: 2 * time.Second, ProbeTTL: 15 * time.Second})
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

// Close returns the tokens this process holds unsent to the key's KV
// windows (settled, so no other process counts them as in flight), stops
// the KV watcher and writes this process's counters a last time. Permits
// already granted stay valid.
func (s *Shared) Close() {
	s.st.release()
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
