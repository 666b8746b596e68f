package ratelimit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riftflow/riftflow/pkg/riot"
)

// clockedRiot is a Riot edge on an injected clock: one fixed application
// window of limit per length, begun by the first request that arrives after
// the previous one ended, as Riot counts; a request over the limit is
// answered 429 (application).
type clockedRiot struct {
	now    func() time.Time
	limit  int
	length time.Duration

	// answering, if set, runs for each request after Riot counted it and
	// before its answer leaves.
	answering func(*http.Request)

	mu       sync.Mutex
	start    time.Time
	n        int
	arrivals int
	tooMany  int
}

func (f *clockedRiot) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	status := f.count(w.Header())
	if hook := f.answering; hook != nil {
		hook(r) // before the answer leaves: the caller is still waiting
	}
	if status != http.StatusOK {
		w.WriteHeader(status)
		return
	}
	_, _ = w.Write([]byte("[]"))
}

// count counts one arrival on f's clock and sets the answer's headers; it
// returns the status.
func (f *clockedRiot) count(h http.Header) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	f.arrivals++
	if f.start.IsZero() || !now.Before(f.start.Add(f.length)) {
		f.start, f.n = now, 0
	}
	f.n++
	sec := strconv.Itoa(int(f.length / time.Second))
	for k, v := range riotHeaders(strconv.Itoa(f.limit)+":"+sec, strconv.Itoa(f.n)+":"+sec, "100:"+sec, "1:"+sec) {
		h[k] = v
	}
	if f.n > f.limit {
		f.tooMany++
		h.Set("X-Rate-Limit-Type", "application")
		h.Set("Retry-After", "10")
		return http.StatusTooManyRequests
	}
	return http.StatusOK
}

// stallOnce is a riot.Limiter that, on its first grant, runs stall before
// returning the permit: the time between a grant and its request reaching
// the transport, as on a starved CPU, during which the world moves on.
type stallOnce struct {
	riot.Limiter
	once  sync.Once
	stall func()
}

func (s *stallOnce) Acquire(ctx context.Context, c riot.Call) (riot.Permit, error) {
	p, err := s.Limiter.Acquire(ctx, c)
	if err == nil {
		s.once.Do(s.stall)
	}
	return p, err
}

const lateIDs = riot.MethodMatchIDsByPUUID

// TestSharedLateGrantNeverSent: two processes share a 4 per 10 s key. In
// Riot's window [20 s, 30 s) b sends 3; at 29.5 s a is granted the 4th and
// then stalls (CPU starvation) until 30.5 s, while b, whose window has
// ended, opens the next one. The new KV window carries a's grant, not yet
// settled (winVal.carryOut), so b sends 3 and its 4th waits. a's grant's
// send deadline (10 s − the send allowance after its window's start) has
// passed when it reaches the transport, so it is returned unsent and
// retaken; the retake finds the new window spent and reports a rate-limit
// wait. Riot sees 6 requests and answers no 429; a request sent late
// would have been the 7th.
func TestSharedLateGrantNeverSent(t *testing.T) {
	clk := newManualClock()
	a, b, newClient, f := lateSendSetup(t, clk, "late-send")
	cb := newClient(b)
	send := func(c *riot.Client, n int) {
		t.Helper()
		for i := range n {
			if _, err := c.MatchIDsByPUUID(t.Context(), riot.Region("asia"), "puuid-"+strconv.Itoa(i), riot.MatchIDsQuery{}); err != nil {
				t.Fatalf("b's call %d: %v", i, err)
			}
		}
	}
	clk.at(20 * time.Second)
	send(cb, 3)
	waitSettled(t, b)

	var stalled atomic.Bool
	ca := newClient(&stallOnce{Limiter: a, stall: func() {
		stalled.Store(true)
		clk.at(30*time.Second + 500*time.Millisecond)
		send(cb, 3)
		_, err := cb.MatchIDsByPUUID(t.Context(), riot.Region("asia"), "puuid-b4", riot.MatchIDsQuery{})
		if re := (*riot.Error)(nil); !errors.As(err, &re) || re.Kind != riot.KindRateLimited || re.Status != 0 {
			t.Errorf("b's 4th call in the window that carries a's grant: %v, want the limiter's rate-limit wait", err)
		}
	}})
	clk.at(29*time.Second + 500*time.Millisecond)
	_, err := ca.MatchIDsByPUUID(t.Context(), riot.Region("asia"), "puuid-a", riot.MatchIDsQuery{})
	if !stalled.Load() {
		t.Fatal("a was not granted at 29.5 s")
	}
	var re *riot.Error
	if !errors.As(err, &re) || re.Kind != riot.KindRateLimited || re.Status != 0 {
		t.Fatalf("a's late call: %v, want the limiter's rate-limit wait (nothing sent)", err)
	}
	if arrivals, tooMany := f.counts(); tooMany != 0 || arrivals != 6 {
		t.Fatalf("Riot saw %d requests and answered %d 429s; want 6 and 0 (a's late grant never sent)", arrivals, tooMany)
	}
	var expired int64
	for _, c := range a.Counters() {
		expired += c.Expired
	}
	if expired != 1 {
		t.Fatalf("a counted %d expired grants, want 1", expired)
	}
}

// TestSharedLateFirstSendMovesWindow: a's request, granted at 20 s when
// a fresh 4 per 10 s window starts, stalls until 25 s, still within its
// send deadline, and is the window's first to reach Riot: Riot's window
// runs from 25 s to 35 s. Without more, the KV window [20 s, 30 s) would
// end at 30 s and b would send 4 more into Riot's window at 30.5 s (5 of
// 4, a 429). Send moves the KV window's start to 25 s − margin/2 before
// a's request goes, so b's calls at 30.5 s wait for the window's end.
func TestSharedLateFirstSendMovesWindow(t *testing.T) {
	clk := newManualClock()
	a, b, newClient, f := lateSendSetup(t, clk, "late-first")
	cb := newClient(b)
	clk.at(20 * time.Second)
	ca := newClient(&stallOnce{Limiter: a, stall: func() { clk.at(25 * time.Second) }})
	sent := 0
	var once sync.Once
	f.answering = func(r *http.Request) {
		if !strings.Contains(r.URL.Path, "puuid-a") {
			return
		}
		// a's answer is slow to come back (a is starved): b acts first.
		once.Do(func() {
			clk.at(30*time.Second + 500*time.Millisecond)
			for i := range 4 {
				_, err := cb.MatchIDsByPUUID(t.Context(), riot.Region("asia"), "puuid-"+strconv.Itoa(i), riot.MatchIDsQuery{})
				var re *riot.Error
				switch {
				case err == nil:
					sent++
				case errors.As(err, &re) && re.Kind == riot.KindRateLimited && re.Status == 0:
				default:
					t.Errorf("b's call %d: %v", i, err)
				}
			}
		})
	}
	if _, err := ca.MatchIDsByPUUID(t.Context(), riot.Region("asia"), "puuid-a", riot.MatchIDsQuery{}); err != nil {
		t.Fatal(err)
	}
	if arrivals, tooMany := f.counts(); tooMany != 0 || sent > 3 {
		t.Fatalf("b sent %d at 30.5 s into Riot's window begun at 25 s by a (%d requests, %d 429s); want at most the 3 left and no 429", sent, arrivals, tooMany)
	}
}

// lateSendSetup starts two Shared limiters, a and b, on one KV bucket with
// the injected clock, teaches them a 4 per 10 s application budget for
// match-v5.getMatchIdsByPUUID on asia (at 0 s, without a request to the
// fake), and returns a riot.Client factory for the fake Riot on clk.
func lateSendSetup(t *testing.T, clk *manualClock, keyID string) (a, b *Shared, newClient func(riot.Limiter) *riot.Client, f *clockedRiot) {
	t.Helper()
	newJS := startNATS(t)
	o := SharedOptions{KeyID: keyID, StatsEvery: -1, ClockSync: -1,
		Options: Options{Now: clk.Now, MaxWait: time.Second, InitialMargin: time.Millisecond}}
	o.ProcID = "a"
	a = newShared(t, newJS(), o)
	o.ProcID = "b"
	b = newShared(t, newJS(), o)
	call := riot.Call{Route: "asia", Method: lateIDs}
	p, err := a.Acquire(t.Context(), call)
	if err != nil {
		t.Fatal(err)
	}
	p.Done(200, riotHeaders("4:10", "1:10", "100:10", "1:10"))
	waitFor(t, "b learns the limits", func() bool {
		n := 0
		for _, s := range b.Snapshot() {
			n += len(s.Windows)
		}
		return n == 2
	})

	f = &clockedRiot{now: clk.Now, limit: 4, length: 10 * time.Second}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	client := func(lim riot.Limiter) *riot.Client {
		c, err := riot.New(riot.Config{APIKey: "RGAPI-test", BaseURL: srv.URL + "/{route}", Limiter: lim, MaxRetries: -1, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return a, b, client, f
}

// counts is what f saw: requests and 429s.
func (f *clockedRiot) counts() (arrivals, tooMany int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.arrivals, f.tooMany
}

// TestSharedLateSendAfterOnTimeOneKeepsWindow: a sends its first request
// of a 4 per 10 s window on time at 20 s, so Riot's window is open from
// then (recorded in KV as winVal.Open). b's first request of the same
// window goes at 25 s: late for b, but it cannot open Riot's window, so
// the KV window keeps its start. Before, it moved to 25 s, and with many
// processes whose first sends straggle (workers asleep until a long
// window's end), each late one pushed the whole key's window later: a
// 120 s window of the development key began 100 s late in the benchmark.
func TestSharedLateSendAfterOnTimeOneKeepsWindow(t *testing.T) {
	clk, a, b := taughtPair(t, "open")
	const key = "open.asia.win.app.10"
	start := clk.Now().UnixMilli()
	if pa := grants(t, a, 1)[0]; !pa.Send() {
		t.Fatal("a's on-time send refused")
	}
	waitFor(t, "a's on-time send recorded", func() bool { return readWindow(t, a, key).Open != 0 })
	clk.at(25 * time.Second)
	pb := grants(t, b, 1)
	if len(pb) != 1 || !pb[0].Send() {
		t.Fatal("b's late first send refused")
	}
	if w := readWindow(t, b, key); w.Start != start {
		t.Fatalf("KV window start %d ms after b's late first send, want %d (Riot's window was open since a's send)", w.Start-start, 0)
	}
}

// TestSharedLateFirstSendMovesWindowOnce: a's first request of a fresh
// 4 per 10 s window (KV start 20 s) goes late, at 20.5 s, and moves the
// KV window's start to 20.5 s − margin/2: it may be the request that
// opens Riot's window. a's next grant leases again and sees the moved
// start; a's send of it at 21 s is not a first send of the window (same
// KV epoch), and b's late first send at 22 s lands in the window a's
// request opened (recorded in KV as winVal.Open): the start stays where
// a's first send put it. Before, every lease after a late first send
// gave its process a "new" window to open late again, each send moved
// the start to its own time, and the window's end walked with it: in
// the bench-limit prod case, one process's 60 s window ended 19 s late
// (0.903 of a perfect client over 3 windows).
func TestSharedLateFirstSendMovesWindowOnce(t *testing.T) {
	clk, a, b := taughtPair(t, "once")
	const key = "once.asia.win.app.10"
	fresh := clk.Now().UnixMilli()
	pa := grants(t, a, 1)
	clk.at(20*time.Second + 500*time.Millisecond)
	if len(pa) != 1 || !pa[0].Send() {
		t.Fatal("a's late first send refused")
	}
	moved := readWindow(t, a, key)
	if moved.Start <= fresh {
		t.Fatalf("KV window start %d ms after a's late first send, want it moved past the fresh start %d", moved.Start, fresh)
	}
	waitFor(t, "a's late first send recorded as the window's opening", func() bool { return readWindow(t, a, key).Open != 0 })

	clk.at(21 * time.Second)
	pa = grants(t, a, 1)
	if len(pa) != 1 || !pa[0].Send() {
		t.Fatal("a's second send refused")
	}
	if w := readWindow(t, a, key); w.Start != moved.Start {
		t.Fatalf("a's second send in the window moved its start by %d ms, want 0", w.Start-moved.Start)
	}
	clk.at(22 * time.Second)
	pb := grants(t, b, 1)
	if len(pb) != 1 || !pb[0].Send() {
		t.Fatal("b's late first send refused")
	}
	if w := readWindow(t, b, key); w.Start != moved.Start {
		t.Fatalf("b's late first send moved the window's start by %d ms, want 0 (a's request opened Riot's window)", w.Start-moved.Start)
	}
}
