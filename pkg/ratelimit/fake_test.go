package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/natstest"
	"github.com/riftflow/riftflow/internal/streamstest"
	"github.com/riftflow/riftflow/pkg/riot"
)

// fakeRiot is a Riot-like edge for tests: requests are GET /<route>/<method>;
// it enforces fixed windows (starting at the first request) per route (app)
// and per route+method, sends Riot's rate-limit headers and answers 429
// with X-Rate-Limit-Type and Retry-After when a limit is exceeded.
type fakeRiot struct {
	mu      sync.Mutex
	app     string            // X-App-Rate-Limit
	methods map[string]string // X-Method-Rate-Limit by method; "" key is the default
	buckets map[string]*fakeBucket
	forced  []forced
	ok      int
	tooMany map[string]int // 429s by type
	first   time.Time      // first accepted request
	last    time.Time      // last accepted request
	log     []string       // 429s, for failure messages
}

type forced struct {
	method, typ, retryAfter string
}

type fakeBucket struct {
	lims   []Limit
	starts []time.Time
	counts []int
}

func newFakeRiot(t testing.TB, app string, methods map[string]string) (*fakeRiot, *httptest.Server) {
	f := &fakeRiot{app: app, methods: methods, buckets: map[string]*fakeBucket{}, tooMany: map[string]int{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

// force makes the next request to method answer 429 with this type and
// Retry-After ("" omits the header).
func (f *fakeRiot) force(method, typ, retryAfter string) {
	f.mu.Lock()
	f.forced = append(f.forced, forced{method, typ, retryAfter})
	f.mu.Unlock()
}

func (f *fakeRiot) bucket(key, lims string) *fakeBucket {
	b := f.buckets[key]
	if b == nil {
		b = &fakeBucket{lims: ParseLimits(lims)}
		b.starts = make([]time.Time, len(b.lims))
		b.counts = make([]int, len(b.lims))
		f.buckets[key] = b
	}
	return b
}

// full returns the Retry-After seconds if b is exhausted at now.
func (b *fakeBucket) full(now time.Time) (int, bool) {
	for i, l := range b.lims {
		if !b.starts[i].IsZero() && !now.Before(b.starts[i].Add(l.Window)) {
			b.starts[i], b.counts[i] = time.Time{}, 0
		}
		if b.counts[i] >= l.N {
			return int(math.Ceil(b.starts[i].Add(l.Window).Sub(now).Seconds())), true
		}
	}
	return 0, false
}

func (b *fakeBucket) add(now time.Time) {
	for i := range b.lims {
		if b.starts[i].IsZero() {
			b.starts[i] = now
		}
		b.counts[i]++
	}
}

func (b *fakeBucket) header() (string, string) {
	var cs []Limit
	for i, l := range b.lims {
		cs = append(cs, Limit{N: b.counts[i], Window: l.Window})
	}
	return FormatLimits(b.lims), FormatLimits(cs)
}

func (f *fakeRiot) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	route, method, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	ml, ok := f.methods[method]
	if !ok {
		ml = f.methods[""]
	}
	ab := f.bucket(route, f.app)
	mb := f.bucket(route+"|"+method, ml)
	h := w.Header()
	for i, fc := range f.forced {
		if fc.method == method {
			f.forced = append(f.forced[:i], f.forced[i+1:]...)
			if fc.typ != "" {
				h.Set("X-Rate-Limit-Type", fc.typ)
			}
			if fc.retryAfter != "" {
				h.Set("Retry-After", fc.retryAfter)
			}
			f.tooMany["forced-"+fc.typ]++
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
	}
	typ, ra := "", 0
	if s, full := ab.full(now); full {
		typ, ra = "application", s
	} else if s, full := mb.full(now); full {
		typ, ra = "method", s
	}
	if typ == "" {
		ab.add(now)
		mb.add(now)
		f.ok++
		if f.first.IsZero() {
			f.first = now
		}
		f.last = now
	}
	al, ac := ab.header()
	h.Set("X-App-Rate-Limit", al)
	h.Set("X-App-Rate-Limit-Count", ac)
	ml2, mc := mb.header()
	h.Set("X-Method-Rate-Limit", ml2)
	h.Set("X-Method-Rate-Limit-Count", mc)
	if typ != "" {
		h.Set("X-Rate-Limit-Type", typ)
		h.Set("Retry-After", strconv.Itoa(ra))
		f.tooMany[typ]++
		f.log = append(f.log, fmt.Sprintf("%v 429 %s counts app=%s method=%s", now.Sub(f.first).Round(time.Millisecond), typ, ac, mc))
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (f *fakeRiot) stats() (ok int, tooMany map[string]int, span time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := map[string]int{}
	for k, v := range f.tooMany {
		m[k] = v
	}
	return f.ok, m, f.last.Sub(f.first)
}

var testClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 5 * time.Second}

// call acquires from lim, sends the request and reports the answer. scale
// divides the limits the limiter sees (the fixed 1/N split baseline); 1 = none.
func call(ctx context.Context, lim riot.Limiter, base string, c riot.Call, scale int) (int, error) {
	p, err := lim.Acquire(ctx, c)
	if err != nil {
		return 0, err
	}
	resp, err := testClient.Get(base + "/" + c.Route + "/" + c.Method)
	if err != nil {
		p.Done(0, nil)
		return 0, err
	}
	resp.Body.Close()
	h := resp.Header
	if scale > 1 {
		h = h.Clone()
		for _, k := range []string{"X-App-Rate-Limit", "X-Method-Rate-Limit"} {
			ls := ParseLimits(h.Get(k))
			for i := range ls {
				ls[i].N /= scale
			}
			h.Set(k, FormatLimits(ls))
		}
	}
	p.Done(resp.StatusCode, h)
	return resp.StatusCode, nil
}

// hammer runs workers goroutines calling lim until d has passed.
func hammer(t testing.TB, lims []riot.Limiter, base string, c riot.Call, workers int, d time.Duration, scale int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for _, lim := range lims {
		for range workers {
			wg.Go(func() {
				for ctx.Err() == nil {
					_, err := call(ctx, lim, base, c, scale)
					var re *riot.Error
					if err != nil && !errors.As(err, &re) && ctx.Err() == nil {
						t.Errorf("call: %v", err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
}

// utilisation is accepted requests over what limit:window allows in span
// (one window is added because the first window starts at the first
// request).
func utilisation(ok int, span time.Duration, l Limit) float64 {
	allowed := float64(l.N) * (span.Seconds()/l.Window.Seconds() + 1)
	return float64(ok) / allowed
}

// startNATS runs an embedded JetStream server and returns a connection
// factory (one connection per call, closed at cleanup).
func startNATS(t testing.TB) func() jetstream.JetStream {
	t.Helper()
	s := natstest.Server(t)
	newJS := func() jetstream.JetStream {
		_, js := natstest.Connect(t, s)
		return js
	}
	streamstest.Bucket(t, newJS(), "ratelimit")
	return newJS
}

func newShared(t testing.TB, js jetstream.JetStream, o SharedOptions) *Shared {
	t.Helper()
	if o.KeyID == "" {
		o.KeyID = "k0123abcd"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := NewShared(ctx, js, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// readKVWindow reads the KV window key through s; false when it is absent or
// unreadable.
func readKVWindow(s *Shared, key string) (winVal, bool) {
	ent, err := s.st.kv.Get(context.Background(), key)
	if err != nil {
		return winVal{}, false
	}
	var wv winVal
	return wv, json.Unmarshal(ent.Value(), &wv) == nil
}
