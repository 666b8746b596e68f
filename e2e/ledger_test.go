package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/synclock"
	retrysweeper "github.com/riftflow/riftflow/services/retry-sweeper"
	"github.com/riftflow/riftflow/services/riftflow"
	"github.com/riftflow/riftflow/services/riftflow/stack"
	"github.com/riftflow/riftflow/services/riftflow/stack/stacktest"
	"github.com/riftflow/riftflow/streams"
)

// fetchRow is one match_fetches row.
type fetchRow struct {
	Status                        string
	Attempt, RetryCount, NotFound int
	LastError                     string
}

// fetchRowOf is the match_fetches row of matchID and kind, if there is one.
func fetchRowOf(h *stacktest.Harness, matchID, kind string) (fetchRow, bool) {
	h.T.Helper()
	var r fetchRow
	err := h.DB.QueryRow(h.Ctx, `SELECT status, attempt, retry_count, not_found, coalesce(last_error, '')
FROM match_fetches WHERE match_id = $1 AND kind = $2`, matchID, kind).Scan(&r.Status, &r.Attempt, &r.RetryCount, &r.NotFound, &r.LastError)
	return r, err == nil
}

// waitFinal waits until the match ledger row of every id is final and, when
// it is success, its timeline row too.
func waitFinal(h *stacktest.Harness, timeout time.Duration, ids ...string) {
	h.T.Helper()
	final := func(s string) bool { return bus.Outcome(s).Final() }
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		done := true
		for _, id := range ids {
			m, ok := fetchRowOf(h, id, "match")
			if !ok || !final(m.Status) {
				done = false
				break
			}
			if m.Status == "success" {
				if tl, ok := fetchRowOf(h, id, "timeline"); !ok || !final(tl.Status) {
					done = false
					break
				}
			}
		}
		if done {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, id := range ids {
		m, _ := fetchRowOf(h, id, "match")
		tl, _ := fetchRowOf(h, id, "timeline")
		h.T.Logf("%s: match %+v timeline %+v", id, m, tl)
	}
	h.T.Fatalf("ledger not final for %v within %v", ids, timeout)
}

// publishFetch publishes a FetchCommand (attempt 1) for each id, as the
// lister would, without a sync around it.
func publishFetch(h *stacktest.Harness, cmds ...bus.FetchCommand) {
	h.T.Helper()
	for _, c := range cmds {
		_, region, err := riot.ParseMatchID(c.MatchID)
		if err != nil {
			h.T.Fatal(err)
		}
		c.Region, c.Attempt = string(region), max(c.Attempt, 1)
		if c.Kind == "" {
			c.Kind = bus.KindMatch
		}
		if _, err := natsx.Publish(h.Ctx, h.St.Infra.JS, h.St.Infra.Subjects.Fetch(c.Region), c, jetstream.WithMsgID(c.MatchID)); err != nil {
			h.T.Fatal(err)
		}
	}
}

// fetchable returns n matches the simulator serves (getMatch 200) created
// within maxAge of its clock, newest first, with a timeline when withTimeline.
func fetchable(t *testing.T, h *stacktest.Harness, n int, maxAge time.Duration, withTimeline bool) []sim.MatchTruth {
	t.Helper()
	truth := h.St.Sim.Truth()
	seen := map[string]bool{}
	var out []sim.MatchTruth
	for _, p := range truth.Players {
		for _, m := range p.Matches {
			age := time.Duration(truth.Now-m.GameCreation) * time.Millisecond
			if seen[m.ID] || !m.MatchOK || m.Synthetic || age > maxAge || (withTimeline && !m.TimelineOK) {
				continue
			}
			seen[m.ID] = true
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	if len(out) < n {
		t.Fatalf("the simulator has %d fitting matches, want %d", len(out), n)
	}
	return out[:n]
}

// TestLedgerFlaky503sRecover: a match answering 503 N times then 200 ends
// success with retry_count N and attempt N+1; each 503 was one attempt (the
// simulator saw exactly N 503s for it) and one ledger update.
func TestLedgerFlaky503sRecover(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{})
	ms := fetchable(t, h, 3, 300*24*time.Hour, true)
	flaky := map[string]int{ms[0].ID: 2, ms[1].ID: 3} // ms[2] is clean
	f := sim.Faults{Match: map[string]sim.MatchFault{}}
	for id, n := range flaky {
		f.Match[id] = sim.MatchFault{Kind: sim.FaultUnavailableN, N: n}
	}
	if err := h.St.Sim.SetFaults(f); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.ID)
		publishFetch(h, bus.FetchCommand{MatchID: m.ID})
	}
	// Up to 3 retries each, 1 s apart (FastEnv's FETCH_BACKOFF) as
	// JetStream schedules fire, whole seconds: a minute leaves a loaded
	// machine room (20 s was once too short in CI).
	waitFinal(h, time.Minute, ids...)
	for _, m := range ms {
		want := flaky[m.ID]
		r, _ := fetchRowOf(h, m.ID, "match")
		if r.Status != "success" || r.RetryCount != want || r.Attempt != want+1 || r.LastError != "" {
			t.Errorf("%s match ledger %+v, want success after %d failed attempts", m.ID, r, want)
		}
		// The same fault hits the timeline: N 503s, then success.
		tl, _ := fetchRowOf(h, m.ID, "timeline")
		if tl.Status != "success" || tl.RetryCount != want {
			t.Errorf("%s timeline ledger %+v, want success after %d failed attempts", m.ID, tl, want)
		}
		if n := h.Count(`SELECT count(*) FROM matches WHERE match_id = $1`, m.ID); n != 1 {
			t.Errorf("%s: %d matches rows", m.ID, n)
		}
	}
	wantAnswers(h, sim.MethodMatch, map[int]int64{503: 5, 200: 3})
}

// TestLedger404sAndPoison: an ID that always 404s ends permanently
// unfetchable after exactly 5 requests; a poison payload (invalid JSON from
// Riot) is recorded permanently unfetchable with the reason after one
// request; a clean match behind them completes. `riftflow status
// --failures` lists both with reasons and counts by status, and
// visible_matches hides permanently unfetchable matches.
func TestLedger404sAndPoison(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{})
	ms := fetchable(t, h, 3, 300*24*time.Hour, true)
	gone, poison, clean := ms[0].ID, ms[1].ID, ms[2].ID
	if err := h.St.Sim.SetFaults(sim.Faults{Match: map[string]sim.MatchFault{
		gone: {Kind: sim.FaultNotFound}, poison: {Kind: sim.FaultPoison}}}); err != nil {
		t.Fatal(err)
	}
	// Listed in a window well inside retention: a 404 is "not there (yet)".
	listed := time.UnixMilli(h.St.Sim.Truth().Now).Add(-300 * 24 * time.Hour).Unix()
	publishFetch(h, bus.FetchCommand{MatchID: gone, ListedAfterS: listed}, bus.FetchCommand{MatchID: poison, ListedAfterS: listed},
		bus.FetchCommand{MatchID: clean, ListedAfterS: listed})
	waitFinal(h, 30*time.Second, gone, poison, clean)

	r, _ := fetchRowOf(h, gone, "match")
	if r.Status != "permanently_unfetchable" || r.RetryCount != 5 || r.Attempt != 5 || r.NotFound != 5 ||
		!strings.Contains(r.LastError, "gave up after 5 attempts") {
		t.Errorf("always-404 ledger %+v", r)
	}
	st := h.St.Sim.Stats()
	if got := st.MethodCount(sim.MethodMatch, 404); got != 5 {
		t.Errorf("getMatch 404s = %d, want exactly 5 (one per attempt)", got)
	}
	p, _ := fetchRowOf(h, poison, "match")
	if p.Status != "permanently_unfetchable" || p.Attempt != 1 || p.LastError == "" {
		t.Errorf("poison ledger %+v", p)
	}
	if st.Faults["poison"] != 1 {
		t.Errorf("poison payload served %d times, want 1", st.Faults["poison"])
	}
	if c, _ := fetchRowOf(h, clean, "match"); c.Status != "success" {
		t.Errorf("clean match behind the poison: %+v", c)
	}
	if n := h.Count(`SELECT count(*) FROM matches`); n != 1 {
		t.Errorf("%d matches stored, want 1 (the clean one)", n)
	}
	h.WaitIdle(10 * time.Second) // nothing blocks the stream

	// The operator's view.
	t.Setenv("DATABASE_URL", h.St.DBURL)
	var out, errOut bytes.Buffer
	if code := riftflow.Main([]string{"status", "--failures"}, &out, &errOut); code != 0 {
		t.Fatalf("status --failures exit %d: %s", code, errOut.String())
	}
	text := out.String()
	t.Log("\n" + text)
	for _, want := range []string{gone, poison, "permanently_unfetchable", "gave up after 5 attempts", "match/success"} {
		if !strings.Contains(text, want) {
			t.Errorf("status --failures lacks %q", want)
		}
	}
	var js struct {
		Counts   map[string]int  `json:"counts"`
		Failures []store.Failure `json:"failures"`
	}
	out.Reset()
	if code := riftflow.Main([]string{"status", "--failures", "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("status --failures --json exit %d: %s", code, errOut.String())
	}
	if err := json.Unmarshal(out.Bytes(), &js); err != nil {
		t.Fatal(err)
	}
	if js.Counts["match/permanently_unfetchable"] != 2 || js.Counts["match/success"] != 1 || len(js.Failures) != 2 {
		t.Errorf("counts %v, %d failures", js.Counts, len(js.Failures))
	}

	// visible_matches hides a stored match whose fetch is permanently
	// unfetchable (an operator override here; matches rows exist only for
	// fetched matches otherwise).
	if n := h.Count(`SELECT count(*) FROM visible_matches`); n != 1 {
		t.Fatalf("visible_matches = %d, want 1", n)
	}
	if _, err := h.DB.Exec(h.Ctx, `UPDATE match_fetches SET status = 'permanently_unfetchable'
WHERE match_id = $1 AND kind = 'match'`, clean); err != nil {
		t.Fatal(err)
	}
	if n := h.Count(`SELECT count(*) FROM visible_matches`); n != 0 {
		t.Errorf("visible_matches shows a permanently unfetchable match")
	}
	if n := h.Count(`SELECT count(*) FROM matches`); n != 1 {
		t.Errorf("the admin path (matches) must still show it")
	}
}

// TestLedgerRetentionNeverRequested re-dates the simulator so its newest
// match is 400 days old: a full sync fetches the matches (within 730 days)
// but never requests a timeline (older than 365 days: outside retention
// without a call), and a FetchCommand for a match known to be older than
// 730 days is recorded outside_retention_window with no request at all.
func TestLedgerRetentionNeverRequested(t *testing.T) {
	probe, err := sim.New(sim.Options{APIKey: "probe", FixturesDir: sim.FindFixtures()})
	if err != nil {
		t.Fatal(err)
	}
	var newest int64
	for _, p := range probe.Truth().Players {
		for _, m := range p.Matches {
			if !m.Synthetic {
				newest = max(newest, m.GameCreation)
			}
		}
	}
	// Move the newest match from probe's "now - age" to now - 400 days.
	age := time.Duration(probe.Truth().Now-newest) * time.Millisecond
	shift := probe.Shift() - (400*24*time.Hour - age)
	probe.Close()

	h := stacktest.Start(t, stacktest.Options{Sim: sim.Options{Shift: shift}})
	p, listed := richestPlayer(t, h, 730)
	truth := h.St.Sim.Truth()
	// The oldest dated match older than 730 days, of anyone. Undated ones
	// (gameCreation 0: aborted or ghost games) never expire, so they are
	// skipped; picking the oldest keeps the choice independent of map order.
	var old sim.MatchTruth
	for _, pt := range truth.Players {
		for _, m := range pt.Matches {
			if m.GameCreation > 0 && truth.Now-m.GameCreation > int64(731*24*time.Hour/time.Millisecond) &&
				(old.ID == "" || m.GameCreation < old.GameCreation || (m.GameCreation == old.GameCreation && m.ID < old.ID)) {
				old = m
			}
		}
	}
	if old.ID == "" {
		t.Fatal("no match older than 730 days after re-dating: test premise broken")
	}
	publishFetch(h, bus.FetchCommand{MatchID: old.ID, GameCreationMs: old.GameCreation})
	ev, err := h.Ingest(bus.IngestRequest{PUUID: p.PUUID, Platform: p.Platform, Mode: bus.ModeFull, LookbackDays: 730, Count: 1000}, time.Minute)
	if err != nil || ev.Status != "completed" || ev.Total != len(listed) {
		t.Fatalf("sync: %+v %v (want %d matches)", ev, err, len(listed))
	}
	waitFinal(h, 10*time.Second, old.ID)
	h.WaitIdle(10 * time.Second)

	for _, m := range listed {
		if r, _ := fetchRowOf(h, m.ID, "match"); r.Status != "success" {
			t.Errorf("%s match %+v, want success", m.ID, r)
		}
		if r, _ := fetchRowOf(h, m.ID, "timeline"); r.Status != "outside_retention_window" || r.Attempt != 1 || r.RetryCount != 0 {
			t.Errorf("%s timeline %+v, want outside_retention_window without a failed attempt", m.ID, r)
		}
	}
	if r, _ := fetchRowOf(h, old.ID, "match"); r.Status != "outside_retention_window" || !strings.Contains(r.LastError, "keeps matches 730 days") {
		t.Errorf("old match %+v", r)
	}
	st := h.St.Sim.Stats()
	timelineCalls := int64(0)
	for _, ms := range st.Requests {
		for _, n := range ms[sim.MethodTimeline] {
			timelineCalls += n
		}
	}
	if timelineCalls != 0 {
		t.Errorf("%d getTimeline requests for timelines older than 365 days", timelineCalls)
	}
	if got, total := st.MethodCount(sim.MethodMatch, 200), st.MethodCount(sim.MethodMatch, 404); got != int64(len(listed)) || total != 0 {
		t.Errorf("getMatch: %d 200s (want %d), %d 404s (want 0): the old match was requested", got, len(listed), total)
	}
	if n := h.Count(`SELECT count(*) FROM match_timelines`); n != 0 {
		t.Errorf("%d timelines stored", n)
	}
}

// TestLedgerCrashBetweenFetchAndPersist runs the resolver, lister and
// fetcher without the persister until every fetch result waits in FETCHED,
// stops them (a crash of the persister side), then starts the whole stack
// on the same NATS and database: every match is stored exactly once and
// fetched from Riot once.
func TestLedgerCrashBetweenFetchAndPersist(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{NoRun: true})
	p, listed := richestPlayer(t, h, 300)
	withTL := 0
	for _, m := range listed {
		if m.TimelineOK {
			withTL++
		}
	}
	ctx1, cancel1 := context.WithCancel(h.Ctx)
	g, gctx := errgroup.WithContext(ctx1)
	for _, s := range h.St.Services[:3] { // resolver, lister, fetcher
		g.Go(func() error { return s.Run(gctx) })
	}
	req := bus.IngestRequest{RequestID: "crash-" + stack.RandHex(4), PUUID: p.PUUID, Platform: p.Platform, Mode: bus.ModeFull,
		LookbackDays: 300, Count: 1000, Trigger: "test"}
	if _, err := h.St.Infra.JS.Publish(h.Ctx, h.St.Infra.Subjects.IngestRequest(), mustJSON(req)); err != nil {
		t.Fatal(err)
	}
	fetched, err := h.St.Infra.JS.Stream(h.Ctx, streams.StreamFetched)
	if err != nil {
		t.Fatal(err)
	}
	// Every match result is published; timelines only after their match
	// result, so wait for results of both kinds to stop growing: matches
	// + timelines of the matches that have one.
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := fetched.Info(h.Ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs >= uint64(len(listed)+withTL) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d results in FETCHED, want ≥ %d", info.State.Msgs, len(listed)+withTL)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel1()
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if n := h.Count(`SELECT count(*) FROM matches`); n != 0 {
		t.Fatalf("%d matches stored without a persister", n)
	}
	// Restart: everything, persister included.
	ctx2, cancel2 := context.WithCancel(h.Ctx)
	done := make(chan error, 1)
	go func() { done <- h.St.Run(ctx2) }()
	defer func() { cancel2(); <-done }()
	waitFinal(h, 30*time.Second, idsOf(listed)...)
	h.WaitIdle(10 * time.Second)
	if n := h.Count(`SELECT count(*) FROM matches`); n != len(listed) {
		t.Errorf("%d matches stored, want %d", n, len(listed))
	}
	for _, m := range listed {
		if n := h.Count(`SELECT count(*) FROM match_participants WHERE match_id = $1`, m.ID); n != m.Participants {
			t.Errorf("%s: %d participants, want %d", m.ID, n, m.Participants)
		}
		if r, _ := fetchRowOf(h, m.ID, "match"); r.Status != "success" || r.Attempt != 1 || r.RetryCount != 0 {
			t.Errorf("%s ledger %+v, want success at attempt 1", m.ID, r)
		}
	}
	if n := h.Count(`SELECT count(*) FROM match_timelines`); n != withTL {
		t.Errorf("%d timelines, want %d", n, withTL)
	}
	if got := h.St.Sim.Stats().MethodCount(sim.MethodMatch, 200); got != int64(len(listed)) {
		t.Errorf("getMatch 200s = %d, want %d: a crash made the pipeline fetch again", got, len(listed))
	}
	if n := h.Count(`SELECT count(*) FROM accounts WHERE puuid = $1 AND sync_status = 'completed'`, p.PUUID); n != 1 {
		t.Error("the sync did not complete after the restart")
	}
}

// TestLedgerSweeper drives two retry-sweeper replicas with an injected clock
// on a pipeline whose services are not running (so the re-published
// commands stay in FETCH to be read back): stale temporary failures and
// unfetched rows are re-published in batches with dedup ids, final rows are
// not, the replicas run each tick once, a fresh row is left alone, and a
// row at the attempt limit becomes permanent, which completes its sync:
// progress is published and the sync lock released.
func TestLedgerSweeper(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{NoRun: true})
	st, inf := h.St.Infra.Store, h.St.Infra
	ctx := h.Ctx
	now := time.Now()
	var ledger []store.LedgerUpdate
	temp := []string{"NA1_9001", "NA1_9002", "NA1_9003", "NA1_9004"}
	for i, id := range temp {
		for a := 1; a <= 1+i%3; a++ { // attempts 1, 1-2, 1-3, 1
			ledger = append(ledger, store.LedgerUpdate{MatchID: id, Kind: "match", Status: "temporary_failure", Attempt: a, HTTPStatus: 503, Error: "503", AttemptedAt: now})
		}
	}
	ledger = append(ledger,
		store.LedgerUpdate{MatchID: "NA1_9101", Kind: "match", Status: "permanently_unfetchable", Attempt: 5, HTTPStatus: 404, AttemptedAt: now},
		store.LedgerUpdate{MatchID: "NA1_9102", Kind: "match", Status: "success", Attempt: 1, AttemptedAt: now},
		store.LedgerUpdate{MatchID: "NA1_9103", Kind: "timeline", Status: "outside_retention_window", Attempt: 1, AttemptedAt: now})
	if _, err := st.PersistBatch(ctx, store.Batch{Ledger: ledger}); err != nil {
		t.Fatal(err)
	}
	// A sync whose only match failed 5 times with 404 but is still
	// temporary_failure (e.g. the fetcher died before recording the last
	// one), holding its lock; and a sync whose only match failed 5 times
	// with 500 (pending: never final, re-published, the sync completes).
	const puuid, reqID = "sweeper-puuid", "sweeper-req"
	if _, err := st.BeginSync(ctx, store.SyncStart{RequestID: reqID, PUUID: puuid, Platform: "na1", Region: "americas", Mode: "latest", Trigger: "test", RequestedAt: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ClaimMatches(ctx, reqID, puuid, []string{"NA1_9200", "NA1_9300"}); err != nil {
		t.Fatal(err)
	}
	const puuid2, reqID2 = "sweeper-puuid-2", "sweeper-req-2"
	if _, err := st.BeginSync(ctx, store.SyncStart{RequestID: reqID2, PUUID: puuid2, Platform: "na1", Region: "americas", Mode: "latest", Trigger: "test", RequestedAt: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ClaimMatches(ctx, reqID2, puuid2, []string{"NA1_9201"}); err != nil {
		t.Fatal(err)
	}
	var five []store.LedgerUpdate
	for a := 1; a <= 5; a++ {
		five = append(five, store.LedgerUpdate{MatchID: "NA1_9200", Kind: "match", Status: "temporary_failure", Attempt: a, HTTPStatus: 404, Error: "404", AttemptedAt: now},
			store.LedgerUpdate{MatchID: "NA1_9201", Kind: "match", Status: "temporary_failure", Attempt: a, HTTPStatus: 500, Error: "500", AttemptedAt: now})
	}
	five = append(five, store.LedgerUpdate{MatchID: "NA1_9300", Kind: "match", Status: "outside_retention_window", Attempt: 1, AttemptedAt: now})
	if _, err := st.PersistBatch(ctx, store.Batch{Ledger: five}); err != nil {
		t.Fatal(err)
	}
	locks, err := inf.Lock(ctx, streams.BucketSyncLocks)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := synclock.Claim(ctx, locks, puuid, reqID, time.Hour, now); err != nil {
		t.Fatal(err)
	}
	cron, err := inf.KV(ctx, streams.BucketCronLocks)
	if err != nil {
		t.Fatal(err)
	}
	progress, stopCapture := capture(h, inf.Subjects.Progress(puuid))
	defer stopCapture()

	var clock struct {
		sync.Mutex
		t time.Time
	}
	setClock := func(t time.Time) { clock.Lock(); clock.t = t; clock.Unlock() }
	clk := func() time.Time { clock.Lock(); defer clock.Unlock(); return clock.t }
	replica := func() *retrysweeper.Service {
		s, err := retrysweeper.New(retrysweeper.Config{Interval: time.Hour, StaleAfter: 10 * time.Minute, BatchSize: 2, FetchAttempts: config.FetchAttempts{MaxAttempts: 5}},
			retrysweeper.Deps{JS: inf.JS, Store: st, Locks: locks, CronLocks: cron, Base: app.Base{Subjects: inf.Subjects, Now: clk}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := replica(), replica()

	// 5 minutes later nothing is stale; the sync waiting only for the
	// pending NA1_9201 completes, "with 1 match pending".
	setClock(now.Add(5 * time.Minute))
	if rep, err := a.Sweep(ctx); err != nil || rep.Republished+rep.Permanent != 0 || rep.Settled != 1 {
		t.Fatalf("sweep of fresh rows: %+v %v, want nothing re-published and 1 sync settled", rep, err)
	}
	// 11 minutes later both replicas tick at once: one sweeps.
	setClock(now.Add(11 * time.Minute))
	var reps [2]retrysweeper.Report
	var errs [2]error
	var wg sync.WaitGroup
	for i, s := range []*retrysweeper.Service{a, b} {
		wg.Add(1)
		go func() { defer wg.Done(); reps[i], errs[i] = s.Tick(ctx) }()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	if reps[0].Ran == reps[1].Ran {
		t.Fatalf("replicas ran %v and %v: want exactly one", reps[0].Ran, reps[1].Ran)
	}
	rep := reps[0]
	if !rep.Ran {
		rep = reps[1]
	}
	// 4 temporary failures re-published, plus the timeline of NA1_9102 (a
	// stored match whose timeline was never queued) and NA1_9201 (five
	// 500s: pending, never final); NA1_9200 (five 404s) made permanent; 7
	// due rows in pages of 2 → 4 pages.
	if rep.Republished != 6 || rep.Permanent != 1 || rep.Batches != 4 {
		t.Errorf("sweep report %+v, want 6 republished, 1 permanent, 4 batches", rep)
	}
	// The same tick again does nothing; a second sweep in the same
	// duplicate window re-publishes nothing new (dedup ids).
	if again, err := b.Tick(ctx); err != nil || again.Ran {
		t.Errorf("second tick in the same hour: %+v %v", again, err)
	}
	if _, err := a.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	cons, err := inf.JS.Consumer(ctx, streams.StreamFetch, streams.FetcherConsumer("americas"))
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.FetchNoWait(100)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bus.FetchCommand{}
	for m := range batch.Messages() {
		var c bus.FetchCommand
		if err := json.Unmarshal(m.Data(), &c); err != nil {
			t.Fatal(err)
		}
		id := m.Headers().Get(jetstream.MsgIDHeader)
		if want := fmt.Sprint(c.MatchID, "/", c.Kind, "/sweep/a", c.Attempt); id != want {
			t.Errorf("msg id %q, want %q", id, want)
		}
		if _, dup := got[c.MatchID]; dup {
			t.Errorf("%s re-published twice", c.MatchID)
		}
		got[c.MatchID] = c
		m.Ack()
	}
	wantAttempt := map[string]int{"NA1_9001": 2, "NA1_9002": 3, "NA1_9003": 4, "NA1_9004": 2, "NA1_9102": 1, "NA1_9201": 6}
	if len(got) != len(wantAttempt) {
		t.Errorf("re-published %v", got)
	}
	for id, a := range wantAttempt {
		kind := bus.KindMatch
		if id == "NA1_9102" {
			kind = bus.KindTimeline
		}
		if c, ok := got[id]; !ok || c.Attempt != a || c.Kind != kind || c.Priority != bus.Background {
			t.Errorf("%s: re-published %+v, want %s attempt %d", id, c, kind, a)
		}
	}
	if r, _ := fetchRowOf(h, "NA1_9101", "match"); r.Status != "permanently_unfetchable" {
		t.Errorf("permanent row changed: %+v", r)
	}
	if r, _ := fetchRowOf(h, "NA1_9200", "match"); r.Status != "permanently_unfetchable" || !strings.Contains(r.LastError, "sweeper") {
		t.Errorf("row at the attempt limit after five 404s: %+v", r)
	}
	if r, _ := fetchRowOf(h, "NA1_9201", "match"); r.Status != "temporary_failure" {
		t.Errorf("row at the attempt limit after five 500s: %+v, want temporary_failure (never final)", r)
	}
	if n := h.Count(`SELECT count(*) FROM accounts WHERE puuid = $1 AND sync_status = 'completed'`, puuid2); n != 1 {
		t.Error("the sync waiting only for a pending fetch did not complete")
	}
	// Pending, it waits StaleAfter·2 after its first sweep retry, at most
	// RetryMax.
	if d := a.PendingDelay(6); d != 20*time.Minute {
		t.Errorf("PendingDelay(6) = %s, want 20m", d)
	}
	if d := a.PendingDelay(40); d != 6*time.Hour {
		t.Errorf("PendingDelay(40) = %s, want the 6h cap", d)
	}
	// The sweeper finished the sync: progress published, lock released.
	if n := h.Count(`SELECT count(*) FROM accounts WHERE puuid = $1 AND sync_status = 'completed'`, puuid); n != 1 {
		t.Error("sync not completed")
	}
	if _, err := synclock.Get(ctx, locks, puuid); err == nil {
		t.Error("sync lock still held after the sweeper completed the sync")
	}
	completed := false
	deadline := time.Now().Add(5 * time.Second)
	for !completed && time.Now().Before(deadline) {
		for _, m := range progress() {
			var ev bus.ProgressEvent
			if json.Unmarshal(m.Data, &ev) == nil && ev.Status == "completed" && ev.Total == 2 && ev.Progress == 2 {
				completed = true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !completed {
		t.Error("no completed progress event from the sweeper")
	}
	// While FETCHED holds a result older than QueueSlack (the persister is
	// behind, e.g. paused by a Postgres outage), the ledger is not current:
	// the sweep re-publishes nothing (it would fetch the backlog again).
	res := bus.FetchResult{MatchID: "NA1_9001", Kind: bus.KindMatch, Region: "americas", Outcome: bus.TemporaryFailure, Attempt: 2}
	if _, err := natsx.Publish(ctx, inf.JS, inf.Subjects.Failed("americas"), res); err != nil {
		t.Fatal(err)
	}
	behind, err := retrysweeper.New(retrysweeper.Config{Interval: time.Hour, StaleAfter: 10 * time.Minute, QueueSlack: time.Nanosecond, FetchAttempts: config.FetchAttempts{MaxAttempts: 5}},
		retrysweeper.Deps{JS: inf.JS, Store: st, Locks: locks, CronLocks: cron, Base: app.Base{Subjects: inf.Subjects, Now: func() time.Time { return now.Add(24 * time.Hour) }}})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := behind.Sweep(ctx); err != nil || !rep.ResultsBehind || rep.Republished+rep.StillQueued+rep.Recovered != 0 {
		t.Errorf("sweep with the persister behind: %+v %v, want nothing re-published", rep, err)
	}
}

// TestLedgerMaxDeliveriesAdvisory: a fetch command that exhausts its
// deliveries (here nak'ed by hand on the sea consumer, which no fetcher
// serves in this test) becomes a ledger entry through the running
// retry-sweeper's advisory consumer, and is removed from FETCH.
func TestLedgerMaxDeliveriesAdvisory(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{Env: map[string]string{"FETCHER_REGIONS": "americas,asia,europe"}})
	const id = "OC1_777001"
	publishFetch(h, bus.FetchCommand{MatchID: id, Attempt: 2})
	cons, err := h.St.Infra.JS.Consumer(h.Ctx, streams.StreamFetch, streams.FetcherConsumer("sea"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(h.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < info.Config.MaxDeliver; i++ {
		b, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range b.Messages() {
			n++
			if err := m.Nak(); err != nil {
				t.Fatal(err)
			}
		}
		if n != 1 {
			t.Fatalf("delivery %d: got %d messages", i+1, n)
		}
	}
	// The server notices the exhaustion when it would deliver again.
	if b, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second)); err == nil {
		for m := range b.Messages() {
			t.Fatalf("delivered beyond MaxDeliver: %s", m.Subject())
		}
	}
	if as, err := h.St.Infra.JS.Stream(h.Ctx, streams.StreamAdvisories); err == nil {
		ai, _ := as.Info(h.Ctx)
		t.Logf("ADVISORIES holds %d messages", ai.State.Msgs)
	}
	deadline := time.Now().Add(10 * time.Second)
	var r fetchRow
	for time.Now().Before(deadline) {
		if r, _ = fetchRowOf(h, id, "match"); r.Status != "" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r.Status != "temporary_failure" || r.Attempt != 2 || !strings.Contains(r.LastError, "exhausted its deliveries") {
		t.Fatalf("ledger after MAX_DELIVERIES: %+v", r)
	}
	// The exhausted message is deleted from the work queue.
	for time.Now().Before(deadline) {
		if info, err = cons.Info(h.Ctx); err == nil && info.NumPending == 0 && info.NumAckPending == 0 {
			st, _ := h.St.Infra.JS.Stream(h.Ctx, streams.StreamFetch)
			si, _ := st.Info(h.Ctx, jetstream.WithSubjectFilter(h.St.Infra.Subjects.Fetch("sea")))
			if si != nil && len(si.State.Subjects) == 0 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the exhausted message is still in FETCH")
}

// TestLedgerRecoversLostCommits: Postgres loses the last commits it had
// already reported (a crash with synchronous_commit off, or a failover to
// an asynchronous standby) after the persister acked their FetchResults,
// so the ledger goes back in time: an always-404 match that had ended
// permanently_unfetchable after 5 attempts is back at temporary_failure
// after 2, and a stored match is back to unfetched with no matches row.
// The retry-sweeper re-publishes both; the fetches it starts must reach
// the ledger, not be dropped as duplicates: their results and retries
// carry message ids that name the delivery, so they differ from the lost
// chain's, which FETCHED and FETCH still hold inside their duplicate
// windows.
func TestLedgerRecoversLostCommits(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{Env: map[string]string{"SWEEP_INTERVAL": "1s"}})
	ms := fetchable(t, h, 2, 300*24*time.Hour, true)
	gone, clean := ms[0].ID, ms[1].ID
	if err := h.St.Sim.SetFaults(sim.Faults{Match: map[string]sim.MatchFault{gone: {Kind: sim.FaultNotFound}}}); err != nil {
		t.Fatal(err)
	}
	listed := time.UnixMilli(h.St.Sim.Truth().Now).Add(-300 * 24 * time.Hour).Unix()
	publishFetch(h, bus.FetchCommand{MatchID: gone, ListedAfterS: listed}, bus.FetchCommand{MatchID: clean, ListedAfterS: listed})
	waitFinal(h, 30*time.Second, gone, clean)
	h.WaitIdle(10 * time.Second)
	if r, _ := fetchRowOf(h, gone, "match"); r.Status != "permanently_unfetchable" || r.Attempt != 5 {
		t.Fatalf("always-404 ledger %+v before the loss", r)
	}

	// The lost commits, an hour ago by the ledger's clock (stale for the
	// sweeper).
	pool := h.DB
	// Every column goes back, the fetcher's holds (written after those
	// commits) too.
	if _, err := pool.Exec(h.Ctx, `UPDATE match_fetches SET status = 'temporary_failure', attempt = 2, retry_count = 2,
  not_found = 2, last_attempt_at = now() - interval '1 hour', held_until = NULL, held_by = NULL WHERE match_id = $1 AND kind = 'match'`, gone); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(h.Ctx, `DELETE FROM matches WHERE match_id = $1`, clean); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(h.Ctx, `UPDATE match_fetches SET status = 'unfetched', attempt = 0, fetched_at = NULL,
  last_attempt_at = now() - interval '1 hour', updated_at = now() - interval '1 hour', held_until = NULL, held_by = NULL
  WHERE match_id = $1 AND kind = 'match'`, clean); err != nil {
		t.Fatal(err)
	}
	waitFinal(h, 30*time.Second, gone, clean)
	if r, _ := fetchRowOf(h, gone, "match"); r.Status != "permanently_unfetchable" || r.Attempt != 5 {
		t.Errorf("always-404 ledger %+v after the sweeper, want permanently_unfetchable at attempt 5", r)
	}
	if r, _ := fetchRowOf(h, clean, "match"); r.Status != "success" {
		t.Errorf("clean match ledger %+v after the sweeper, want success", r)
	}
	if n := h.Count(`SELECT count(*) FROM matches WHERE match_id = $1`, clean); n != 1 {
		t.Errorf("clean match: %d matches rows, want 1", n)
	}
	// Riot calls: 5 + the 3 attempts redone for the 404 chain; 2 for the
	// clean match (the lost success is fetched once more).
	wantAnswers(h, sim.MethodMatch, map[int]int64{404: 8, 200: 2})
}

// TestLedgerTransientNeverFinal: a match Riot answers 503 every time is
// tried FETCH_MAX_ATTEMPTS (5) times in-process and then left
// temporary_failure ("left to the retry-sweeper"), never
// permanently_unfetchable: a 5xx streak says nothing about the match. The
// sync still ends, "completed with 1 match pending", and when Riot
// recovers the sweeper's retry stores the match, once.
func TestLedgerTransientNeverFinal(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{Env: map[string]string{"SWEEP_INTERVAL": "1s", "SWEEP_STALE_AFTER": "2s",
		"SWEEP_QUEUE_SLACK": "2s", "SWEEP_RETRY_MAX": "4s"}})
	p, listed := richestPlayer(t, h, 300)
	down := listed[0]
	if err := h.St.Sim.SetFaults(sim.Faults{Match: map[string]sim.MatchFault{down.ID: {Kind: sim.FaultUnavailableN, N: 1 << 30}}}); err != nil {
		t.Fatal(err)
	}
	ev, err := h.Ingest(bus.IngestRequest{PUUID: p.PUUID, Platform: p.Platform, Mode: bus.ModeFull, LookbackDays: 300, Count: 1000}, 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Status != "completed" || ev.Pending != 1 || ev.Total != len(listed) {
		t.Fatalf("final event %+v, want completed with 1 of %d pending", ev, len(listed))
	}
	r, _ := fetchRowOf(h, down.ID, "match")
	if r.Status != "temporary_failure" || r.RetryCount < 5 || !strings.Contains(r.LastError, "left to the retry-sweeper") {
		t.Fatalf("ledger after the 503 streak: %+v, want temporary_failure left to the retry-sweeper", r)
	}
	if n := h.Count(`SELECT count(*) FROM match_fetches WHERE status = 'permanently_unfetchable' AND http_status >= 500`); n != 0 {
		t.Errorf("%d fetches made final by a 5xx streak", n)
	}
	if got := h.St.Sim.Stats().MethodCount(sim.MethodMatch, 503); got < 5 {
		t.Errorf("getMatch 503s = %d, want ≥ 5 (the in-process attempts)", got)
	}
	// Riot recovers: the sweeper's next retry stores the match.
	if err := h.St.Sim.SetFaults(sim.Faults{}); err != nil {
		t.Fatal(err)
	}
	waitFinal(h, 60*time.Second, down.ID)
	if r, _ := fetchRowOf(h, down.ID, "match"); r.Status != "success" {
		t.Errorf("ledger after Riot recovered: %+v, want success", r)
	}
	if n := h.Count(`SELECT count(*) FROM matches WHERE match_id = $1`, down.ID); n != 1 {
		t.Errorf("%d matches rows for the recovered match, want 1", n)
	}
	if got := h.St.Sim.Stats().MethodCount(sim.MethodMatch, 200); got != int64(len(listed)) {
		t.Errorf("getMatch 200s = %d, want %d (one per match)", got, len(listed))
	}
}
