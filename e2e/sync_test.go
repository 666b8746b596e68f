package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/synclock"
	"github.com/riftflow/riftflow/services/resolver"
	retrysweeper "github.com/riftflow/riftflow/services/retry-sweeper"
	"github.com/riftflow/riftflow/services/riftflow/api"
	"github.com/riftflow/riftflow/services/riftflow/api/apitest"
	"github.com/riftflow/riftflow/services/riftflow/stack/stacktest"
	"github.com/riftflow/riftflow/streams"
)

// events collects progress events and rejections by request id.
type events struct {
	mu   sync.Mutex
	prog map[string][]bus.ProgressEvent
	rej  map[string][]bus.Rejection
	subs []*nats.Subscription
}

// collect subscribes to subject and appends each message, decoded as a T,
// to into under its key, holding mu.
func collect[T any](t *testing.T, h *stacktest.Harness, mu *sync.Mutex, subject string, into map[string][]T, key func(T) string) *nats.Subscription {
	t.Helper()
	sub, err := h.St.Infra.NC.Subscribe(subject, func(m *nats.Msg) {
		var v T
		if json.Unmarshal(m.Data, &v) == nil {
			mu.Lock()
			into[key(v)] = append(into[key(v)], v)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

func watch(t *testing.T, h *stacktest.Harness) *events {
	e := &events{prog: map[string][]bus.ProgressEvent{}, rej: map[string][]bus.Rejection{}}
	e.subs = []*nats.Subscription{
		collect(t, h, &e.mu, h.St.Infra.Subjects.ProgressAll(), e.prog, func(ev bus.ProgressEvent) string { return ev.RequestID }),
		collect(t, h, &e.mu, h.St.Infra.Subjects.IngestRejected(), e.rej, func(r bus.Rejection) string { return r.RequestID }),
	}
	h.St.Infra.NC.Flush()
	t.Cleanup(func() {
		for _, s := range e.subs {
			s.Unsubscribe()
		}
	})
	return e
}

// final returns the completed/failed event of id, if any.
func (e *events) final(id string) (bus.ProgressEvent, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.prog[id] {
		if ev.Status == "completed" || ev.Status == "failed" {
			return ev, true
		}
	}
	return bus.ProgressEvent{}, false
}

func (e *events) rejected(id string) (bus.Rejection, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r := e.rej[id]; len(r) > 0 {
		return r[0], true
	}
	return bus.Rejection{}, false
}

// TestSyncConcurrentTriggersOneSync fires six requests for one account at
// once while its sync is slow: exactly one syncs, five are refused with 409
// on lol.ingest.rejected and logged as rejected jobs, each match is fetched
// once, and the lock is released at the end.
func TestSyncConcurrentTriggersOneSync(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{Sim: sim.Options{Synthetic: sim.Synthetic{Players: 1, MatchesPerPlayer: 12},
		Faults: slowTimelines(time.Second)}})
	p := stacktest.SynthPlayer(t, h, 1)
	ev := watch(t, h)
	ids := []string{"c-0", "c-1", "c-2", "c-3", "c-4", "c-5"}
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			publishReq(t, h, bus.IngestRequest{RequestID: id, PUUID: p.PUUID, Platform: "na1", Mode: bus.ModeFull,
				Count: 100, LookbackDays: 730, Trigger: "test"})
		}()
	}
	wg.Wait()
	var winner string
	stacktest.WaitFor(t, "one completion and five rejections", 2*time.Minute, func() bool {
		done, rej := 0, 0
		for _, id := range ids {
			if _, ok := ev.final(id); ok {
				done++
				winner = id
			}
			if _, ok := ev.rejected(id); ok {
				rej++
			}
		}
		return done+rej == len(ids)
	})
	for _, id := range ids {
		_, done := ev.final(id)
		r, rej := ev.rejected(id)
		switch {
		case id == winner && !done:
			t.Errorf("%s: no final event", id)
		case id != winner && (done || !rej || r.Code != 409):
			t.Errorf("%s: done=%v rejection=%+v, want a 409", id, done, r)
		}
	}
	fin, _ := ev.final(winner)
	if fin.Status != "completed" || fin.Total != len(p.Matches) || fin.Progress != fin.Total {
		t.Fatalf("winner %s: %+v, want completed %d/%d", winner, fin, len(p.Matches), len(p.Matches))
	}
	h.WaitIdle(20 * time.Second)
	if got := h.St.Sim.Stats().MethodCount(sim.MethodMatch, 200); got != int64(len(p.Matches)) {
		t.Errorf("getMatch 200s = %d, want %d (each match once)", got, len(p.Matches))
	}
	if n := h.Count(`SELECT count(*) FROM jobs WHERE type = 'sync' AND status = 'rejected' AND error LIKE '%already syncing%'`); n != len(ids)-1 {
		t.Errorf("%d rejected sync jobs, want %d", n, len(ids)-1)
	}
	if n := h.Count(`SELECT count(*) FROM jobs WHERE id = $1 AND status = 'completed' AND finished_at IS NOT NULL`, winner); n != 1 {
		t.Error("winner's job not completed")
	}
	locks, _ := h.St.Infra.Lock(h.Ctx, streams.BucketSyncLocks)
	if _, err := locks.Get(h.Ctx, p.PUUID); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("lock after completion: %v, want released", err)
	}
}

// TestSyncKilledListerRecovers plays a lister that died mid-sync: it
// claimed the lock (short TTL), began the sync, claimed 12 of 20 matches in
// the ledger and published only 4. The lock expires; once the sync has
// made no progress for SYNC_STUCK_AFTER a retry-sweeper process starts, its start-up recovery
// pass resets the sync and queues it again, and the new sync adopts the 8
// orphans and lists the rest: every match is fetched exactly once.
// SYNC_STUCK_AFTER is 2s, so "no progress for SYNC_STUCK_AFTER" is waited
// for, not slept.
func TestSyncKilledListerRecovers(t *testing.T) {
	clk := &offsetClock{}
	h := stacktest.Start(t, stacktest.Options{Now: clk.Now, Env: map[string]string{"SYNC_LOCK_TTL": "1s",
		"SYNC_STUCK_AFTER": "2s", "SCHEDULE_ENABLE": "false"},
		Sim: sim.Options{Synthetic: sim.Synthetic{Players: 1, MatchesPerPlayer: 20}}})
	p := stacktest.SynthPlayer(t, h, 1)
	if len(p.Matches) != 20 {
		t.Fatalf("%d matches, want 20", len(p.Matches))
	}
	ids := make([]string, len(p.Matches))
	for i, m := range p.Matches {
		ids[i] = m.ID
	}
	ctx, inf := h.Ctx, h.St.Infra
	locks, err := inf.Lock(ctx, streams.BucketSyncLocks)
	if err != nil {
		t.Fatal(err)
	}
	const dead = "dead-1"
	if _, err := synclock.Claim(ctx, locks, p.PUUID, dead, time.Second, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := inf.Store.BeginSync(ctx, store.SyncStart{RequestID: dead, PUUID: p.PUUID, Platform: "na1", Region: "americas",
		Mode: "full", Trigger: "test"}); err != nil {
		t.Fatal(err)
	}
	res, err := inf.Store.ClaimMatches(ctx, dead, p.PUUID, ids[:12])
	if err != nil || len(res.Publish) != 12 {
		t.Fatalf("claim: %+v %v", res, err)
	}
	for _, id := range res.Publish[:4] {
		fc := bus.FetchCommand{MatchID: id, Kind: bus.KindMatch, Region: "americas", Attempt: 1, RequestID: dead, PUUID: p.PUUID}
		if _, err := natsx.Publish(ctx, inf.JS, inf.Subjects.Fetch("americas"), fc, jetstream.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
	}
	// The lister is "killed" here. Its 4 fetches complete; the lock dies.
	stacktest.WaitFor(t, "the 4 published matches stored", time.Minute, func() bool {
		return h.Count(`SELECT count(*) FROM match_fetches WHERE kind = 'match' AND status = 'success'`) == 4
	})
	stacktest.WaitFor(t, "the dead lister's lock to expire", time.Minute, func() bool {
		_, err := locks.Get(ctx, p.PUUID)
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	if n := h.Count(`SELECT count(*) FROM accounts WHERE puuid = $1 AND sync_status = 'syncing'`, p.PUUID); n != 1 {
		t.Fatal("account not left in syncing")
	}
	ev := watch(t, h)
	stacktest.WaitFor(t, "no progress for SYNC_STUCK_AFTER", time.Minute, func() bool {
		stuck, err := inf.Store.StuckSyncs(ctx, clk.Now(), clk.Now().Add(-2*time.Second))
		return err == nil && len(stuck) == 1
	})

	proc, err := retrysweeper.Open(ctx, inf.Process, inf.Store, inf.Riot)
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithCancel(ctx)
	pdone := make(chan error, 1)
	go func() { pdone <- proc.Run(pctx) }()
	defer func() { pcancel(); <-pdone }()

	const next = "recover-" + dead
	stacktest.WaitFor(t, "the recovered sync to finish", 2*time.Minute, func() bool { _, ok := ev.final(next); return ok })
	fin, _ := ev.final(next)
	if fin.Status != "completed" || fin.Total != 16 || fin.Progress != 16 {
		t.Fatalf("recovered sync: %+v, want completed 16/16 (8 orphans + 8 new)", fin)
	}
	h.WaitIdle(20 * time.Second)
	if got := h.St.Sim.Stats().MethodCount(sim.MethodMatch, 200); got != 20 {
		t.Errorf("getMatch 200s = %d, want 20: a match was fetched twice or never", got)
	}
	if n := h.Count(`SELECT count(*) FROM match_fetches WHERE kind = 'match' AND status = 'success' AND match_id = ANY($1)`, ids); n != 20 {
		t.Errorf("%d of 20 matches stored", n)
	}
	if n := h.Count(`SELECT count(*) FROM accounts WHERE puuid = $1 AND sync_status = 'completed' AND sync_request_id = $2`, p.PUUID, next); n != 1 {
		t.Error("account not completed by the recovery sync")
	}
	if n := h.Count(`SELECT count(*) FROM jobs WHERE id = $1 AND status = 'failed' AND error LIKE 'abandoned%'`, dead); n != 1 {
		t.Error("the abandoned sync's job is not closed as failed")
	}
	if n := h.Count(`SELECT count(*) FROM jobs WHERE type = 'recovery' AND status = 'completed' AND detail->>'recovered' = '1'`); n != 1 {
		t.Error("start-up recovery pass not in the job log")
	}
}

// TestSyncLatestCursorFetchesOnlyNew: a full sync at T lists the matches
// played before T and moves the cursor to T; a day later (the services'
// clock starts a day behind the simulator's, then catches up) a latest
// sync lists from the cursor and fetches only the 8 games played since.
// (The services' clock runs behind, not ahead: fetch retries are JetStream
// schedules at the services' time, which the server fires at its own.)
func TestSyncLatestCursorFetchesOnlyNew(t *testing.T) {
	clk := &offsetClock{}
	clk.Set(-24 * time.Hour)
	// Synthetic player 1: games 1h, 4h, 7h, ... before now. At the
	// services' T = now-24h, games j ≥ 8 (25h+ before now) are past.
	h := stacktest.Start(t, stacktest.Options{Now: clk.Now, Env: map[string]string{"SCHEDULE_ENABLE": "false"},
		Sim: sim.Options{Synthetic: sim.Synthetic{Players: 1, MatchesPerPlayer: 24}}})
	p := stacktest.SynthPlayer(t, h, 1)
	ev, err := h.Ingest(bus.IngestRequest{PUUID: p.PUUID, Platform: "na1", Mode: bus.ModeFull, Count: 1000, LookbackDays: 30}, 2*time.Minute)
	if err != nil || ev.Status != "completed" || ev.Total != 16 {
		t.Fatalf("first sync: %+v %v, want completed with 16 matches", ev, err)
	}
	h.WaitIdle(20 * time.Second)
	if got := h.St.Sim.Stats().MethodCount(sim.MethodMatch, 200); got != 16 {
		t.Fatalf("getMatch 200s after the first sync = %d, want 16", got)
	}
	kv, _ := h.St.Infra.KV(h.Ctx, streams.BucketCursors)
	e, err := kv.Get(h.Ctx, p.PUUID)
	if err != nil {
		t.Fatalf("cursor not saved: %v", err)
	}
	var cur struct {
		ListedUntilS int64 `json:"listed_until_s"`
	}
	json.Unmarshal(e.Value(), &cur)
	if d := time.Since(time.Unix(cur.ListedUntilS, 0)); d < 23*time.Hour || d > 25*time.Hour {
		t.Errorf("cursor at %v, want about the services' clock (now-24h)", time.Unix(cur.ListedUntilS, 0))
	}

	clk.Set(0)
	ev, err = h.Ingest(bus.IngestRequest{PUUID: p.PUUID, Platform: "na1", Mode: bus.ModeLatest, Count: 1000}, 2*time.Minute)
	if err != nil || ev.Status != "completed" || ev.Total != 8 {
		t.Fatalf("latest sync: %+v %v, want completed with the 8 new matches", ev, err)
	}
	h.WaitIdle(20 * time.Second)
	if got := h.St.Sim.Stats().MethodCount(sim.MethodMatch, 200); got != 24 {
		t.Errorf("getMatch 200s = %d, want 24: the latest sync re-fetched old matches", got)
	}
	// A third latest at the same time finds nothing new.
	ev, err = h.Ingest(bus.IngestRequest{PUUID: p.PUUID, Platform: "na1", Mode: bus.ModeLatest}, time.Minute)
	if err != nil || ev.Status != "completed" || ev.Total != 0 {
		t.Fatalf("third sync: %+v %v, want completed with nothing new", ev, err)
	}
}

// TestSyncFullBackfillBounds: a full backfill is bounded by count (the
// newest N) and by lookback_days, and on a player with 1,100 matches it
// stops cleanly at Riot's 1,000-match list: ten pages, no request past
// the cap, the cursor saved.
func TestSyncFullBackfillBounds(t *testing.T) {
	h, p2 := stacktest.Synthetic(t, 2, 1100, 2)
	stored := func(puuid string) map[string]bool {
		rows, _ := h.DB.Query(h.Ctx, `SELECT DISTINCT match_id FROM match_participants WHERE puuid = $1`, puuid)
		out := map[string]bool{}
		for rows.Next() {
			var id string
			rows.Scan(&id)
			out[id] = true
		}
		return out
	}
	// Bounded by count: the 5 newest.
	ev, err := h.Ingest(bus.IngestRequest{PUUID: p2.PUUID, Platform: "na1", Mode: bus.ModeFull, Count: 5, LookbackDays: 730}, 2*time.Minute)
	if err != nil || ev.Status != "completed" || ev.Total != 5 {
		t.Fatalf("count-bounded: %+v %v", ev, err)
	}
	got := stored(p2.PUUID)
	for _, m := range p2.Matches[:5] {
		if !got[m.ID] {
			t.Errorf("newest match %s not stored", m.ID)
		}
	}
	if len(got) != 5 {
		t.Errorf("%d matches stored, want 5", len(got))
	}
	// Bounded by lookback: games 1h1m + 3h·j ago within a day are j = 0..7.
	ev, err = h.Ingest(bus.IngestRequest{PUUID: p2.PUUID, Platform: "na1", Mode: bus.ModeFull, Count: 1000, LookbackDays: 1}, 2*time.Minute)
	if err != nil || ev.Status != "completed" || ev.Total != 3 {
		t.Fatalf("lookback-bounded: %+v %v, want the 3 not yet stored of the day's 8", ev, err)
	}
	if got := stored(p2.PUUID); len(got) != 8 {
		t.Errorf("%d matches stored after a 1-day backfill, want 8", len(got))
	}

	// Riot's cap: player 1 has 1,100 matches; all but the 6 newest of the
	// 1,000 listable are already settled, so listing pages through all ten.
	p1 := stacktest.SynthPlayer(t, h, 1)
	if len(p1.Matches) != 1000 {
		t.Fatalf("truth lists %d matches, want Riot's 1000", len(p1.Matches))
	}
	var settled []string
	for _, m := range p1.Matches[6:] {
		settled = append(settled, m.ID)
	}
	if _, err := h.DB.Exec(h.Ctx, `INSERT INTO match_fetches (match_id, kind, status)
SELECT id, 'match', 'outside_retention_window' FROM unnest($1::text[]) id`, settled); err != nil {
		t.Fatal(err)
	}
	listsBefore := h.St.Sim.Stats().MethodCount(sim.MethodMatchIDs, 200)
	ev, err = h.Ingest(bus.IngestRequest{PUUID: p1.PUUID, Platform: "na1", Mode: bus.ModeFull, Count: 1000, LookbackDays: 730}, 2*time.Minute)
	if err != nil || ev.Status != "completed" || ev.Total != 6 {
		t.Fatalf("capped backfill: %+v %v, want completed with 6", ev, err)
	}
	if n := h.St.Sim.Stats().MethodCount(sim.MethodMatchIDs, 200) - listsBefore; n != 10 {
		t.Errorf("%d match-list pages, want 10 (1000 IDs, nothing asked past the cap)", n)
	}
	kv, _ := h.St.Infra.KV(h.Ctx, streams.BucketCursors)
	if _, err := kv.Get(h.Ctx, p1.PUUID); err != nil {
		t.Errorf("cursor not saved after a listing that reached the cap: %v", err)
	}
}

// TestHTTPSyncEndpoints drives the HTTP API: POST /v1/sync (202, then 409
// while it runs), the SSE stream to completion, GET /v1/accounts, the
// login trigger (fresh, then stale → sync), the link trigger and GET
// /v1/jobs.
func TestHTTPSyncEndpoints(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{Env: map[string]string{"SCHEDULE_ENABLE": "false"},
		Sim: sim.Options{Synthetic: sim.Synthetic{Players: 2, MatchesPerPlayer: 8}, Faults: slowTimelines(700 * time.Millisecond)}})
	a := stacktest.NewAPI(h.St.Infra)
	srv := httptest.NewServer(stacktest.WithToken(t, h.St.Infra, a.Handler(), api.ScopeAdmin))
	defer srv.Close()
	p := stacktest.SynthPlayer(t, h, 1)
	post := func(path, body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	code, out := post("/v1/sync", fmt.Sprintf(`{"puuid":%q,"platform":"na1","mode":"full","lookback_days":30}`, p.PUUID))
	if code != http.StatusAccepted || out["request_id"] == "" {
		t.Fatalf("POST /v1/sync: %d %v", code, out)
	}
	id := out["request_id"].(string)
	// Follow the events from now on.
	resp, err := http.Get(srv.URL + "/v1/sync/" + id + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("events content type %q", ct)
	}
	locks, _ := h.St.Infra.Lock(h.Ctx, streams.BucketSyncLocks)
	stacktest.WaitFor(t, "the sync to hold the lock", 30*time.Second, func() bool {
		v, err := synclock.Get(h.Ctx, locks, p.PUUID)
		return err == nil && v.RequestID == id
	})
	rejected, stopRej := capture(h, h.St.Infra.Subjects.IngestRejected())
	defer stopRej()
	code, out = post("/v1/sync", fmt.Sprintf(`{"request_id":"second","puuid":%q,"platform":"na1"}`, p.PUUID))
	if code != http.StatusConflict || out["request_id"] != id {
		t.Errorf("second POST: %d %v, want 409 naming %s", code, out, id)
	}
	var last bus.ProgressEvent
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			if err := json.Unmarshal([]byte(d), &last); err != nil {
				t.Fatal(err)
			}
		}
	}
	if last.Status != "completed" || last.Total != len(p.Matches) || last.Progress != last.Total {
		t.Fatalf("last SSE event %+v, want completed %d/%d", last, len(p.Matches), len(p.Matches))
	}
	var rej bus.Rejection
	for _, m := range rejected() {
		json.Unmarshal(m.Data, &rej)
	}
	// The client's request_id "second" is scoped to its token (http-…),
	// so the rejection names the scoped ID, never the holder's.
	secondID := rej.RequestID
	if !strings.HasPrefix(secondID, "http-") || secondID == id || rej.Code != 409 {
		t.Errorf("rejection on lol.ingest.rejected: %+v", rej)
	}

	ar, err := http.Get(srv.URL + "/v1/accounts/" + p.PUUID)
	if err != nil {
		t.Fatal(err)
	}
	var acct store.AccountStatus
	json.NewDecoder(ar.Body).Decode(&acct)
	ar.Body.Close()
	if ar.StatusCode != 200 || acct.SyncStatus != "completed" || acct.SyncTotal != len(p.Matches) || acct.LastSyncedAt.IsZero() {
		t.Errorf("GET account: %d %+v", ar.StatusCode, acct.Account)
	}

	// Login: fresh, then (age 0) stale → a latest sync.
	code, out = post("/v1/accounts/"+p.PUUID+"/login", "")
	if code != 200 || out["status"] != "fresh" {
		t.Errorf("login after a sync: %d %v, want 200 fresh", code, out)
	}
	a.StaleAfter = time.Nanosecond
	code, out = post("/v1/accounts/"+p.PUUID+"/login", "")
	if code != http.StatusAccepted {
		t.Fatalf("stale login: %d %v, want 202", code, out)
	}
	loginID := out["request_id"].(string)
	if code, _ := post("/v1/accounts/nobody/login", ""); code != 404 {
		t.Errorf("login of an unknown account: %d, want 404", code)
	}

	// Link: a new account becomes active and syncs now.
	p2 := stacktest.SynthPlayer(t, h, 2)
	code, out = post("/v1/accounts/"+p2.PUUID+"/link", `{"platform":"na1","riot_id":"Synth0002#SYN"}`)
	if code != http.StatusAccepted {
		t.Fatalf("link: %d %v", code, out)
	}
	linkID := out["request_id"].(string)
	stacktest.WaitFor(t, "the login and link syncs", 2*time.Minute, func() bool {
		return h.Count(`SELECT count(*) FROM jobs WHERE id IN ($1, $2) AND status = 'completed'`, loginID, linkID) == 2
	})
	if n := h.Count(`SELECT count(*) FROM accounts WHERE puuid = $1 AND active AND game_name = 'Synth0002' AND sync_status = 'completed' AND sync_total = $2`, p2.PUUID, len(p2.Matches)); n != 1 {
		t.Error("linked account not active and fully synced")
	}

	jr, err := http.Get(srv.URL + "/v1/jobs?type=sync")
	if err != nil {
		t.Fatal(err)
	}
	var jobs struct {
		Jobs []api.Job `json:"jobs"`
	}
	json.NewDecoder(jr.Body).Decode(&jobs)
	jr.Body.Close()
	byID := map[string]api.Job{}
	for _, j := range jobs.Jobs {
		byID[j.ID] = j
	}
	for id, want := range map[string]string{id: "completed", secondID: "rejected", loginID: "completed", linkID: "completed"} {
		j, ok := byID[id]
		if !ok || j.Status != want || (want == "completed" && (j.StartedAt == nil || j.FinishedAt == nil)) {
			t.Errorf("job %s: %+v, want %s with timestamps", id, j, want)
		}
	}
	if d := string(byID[linkID].Detail); !strings.Contains(d, `"trigger": "link"`) && !strings.Contains(d, `"trigger":"link"`) {
		t.Errorf("link job detail %s", d)
	}
}

// TestSyncEventsForLateClients: a client that opens the SSE stream after
// its request ended still gets the outcome. A finished sync answers from
// the jobs table (EVENTS purged, so nothing else could), and a request the
// resolver rejected in milliseconds (an unknown Riot ID, no jobs row) is
// replayed from the EVENTS stream.
func TestSyncEventsForLateClients(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{Env: map[string]string{"SCHEDULE_ENABLE": "false"},
		Sim: sim.Options{Synthetic: sim.Synthetic{Players: 1, MatchesPerPlayer: 6}}})
	srv := stacktest.APIServer(t, h.St.Infra, api.ScopeAdmin)
	p := stacktest.SynthPlayer(t, h, 1)

	ev, err := h.Ingest(bus.IngestRequest{RequestID: "late-done", PUUID: p.PUUID, Platform: "na1", Mode: bus.ModeFull, LookbackDays: 30}, time.Minute)
	if err != nil || ev.Status != "completed" {
		t.Fatalf("sync: %+v %v", ev, err)
	}
	stacktest.WaitFor(t, "the jobs row to complete", 10*time.Second, func() bool {
		j, err := h.St.Infra.Store.JobByID(h.Ctx, "late-done")
		return err == nil && j.Status == "completed"
	})
	if events, err := h.St.Infra.JS.Stream(h.Ctx, "EVENTS"); err != nil {
		t.Fatal(err)
	} else if err := events.Purge(h.Ctx); err != nil {
		t.Fatal(err)
	}
	got := apitest.SSEEvents(t, srv.URL+"/v1/sync/late-done/events", "", 10*time.Second)
	var last bus.ProgressEvent
	if len(got) != 1 || got[0][0] != "progress" || json.Unmarshal([]byte(got[0][1]), &last) != nil {
		t.Fatalf("events for a finished sync: %v, want one progress event", got)
	}
	if last.Status != "completed" || last.RequestID != "late-done" || last.PUUID != p.PUUID ||
		last.Total != len(p.Matches) || last.Progress != last.Total {
		t.Errorf("final event %+v, want completed %d/%d", last, len(p.Matches), len(p.Matches))
	}
}

// TestSyncEventsReplayRejection: the resolver rejects an unknown Riot ID
// before the client opens the SSE stream; the rejection is replayed.
func TestSyncEventsReplayRejection(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{Env: map[string]string{"SCHEDULE_ENABLE": "false"}})
	srv := stacktest.APIServer(t, h.St.Infra, api.ScopeAdmin)
	rejected, stop := capture(h, h.St.Infra.Subjects.IngestRejected())
	defer stop()
	resp, err := http.Post(srv.URL+"/v1/sync", "application/json",
		strings.NewReader(`{"request_id":"late-rej","riot_id":"Nobody Here#NOPE1","platform":"na1"}`))
	if err != nil {
		t.Fatal(err)
	}
	var accepted struct {
		RequestID string `json:"request_id"` // "late-rej" scoped to the token (TestRequestIDScopedToToken)
	}
	json.NewDecoder(resp.Body).Decode(&accepted)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || accepted.RequestID == "" {
		t.Fatalf("POST /v1/sync: %d %+v", resp.StatusCode, accepted)
	}
	stacktest.WaitFor(t, "the resolver's rejection", 15*time.Second, func() bool { return len(rejected()) > 0 })
	got := apitest.SSEEvents(t, srv.URL+"/v1/sync/"+accepted.RequestID+"/events", "", 10*time.Second)
	var rej bus.Rejection
	if len(got) != 1 || got[0][0] != "rejected" || json.Unmarshal([]byte(got[0][1]), &rej) != nil {
		t.Fatalf("events for a rejected request: %v, want one rejected event", got)
	}
	if rej.RequestID != accepted.RequestID || rej.Code != http.StatusNotFound || !strings.Contains(rej.Reason, "Nobody Here#NOPE1") {
		t.Errorf("rejection %+v, want 404 naming the Riot ID", rej)
	}
}

// An event stream for a request that was never submitted through this API
// and has no jobs row, but whose rejection is in the EVENTS stream (a
// request published on NATS by `riftflow ingest`), is replayed, not 404.
func TestSyncEventsForRequestOnlyInEvents(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{NoRun: true})
	rej := bus.NewRejection("cli-only", h.St.Infra.Subjects.IngestRequest(), http.StatusNotFound, errors.New("no such Riot ID"), nil, time.Now())
	for _, id := range []string{"other-1", "other-2"} {
		other := rej
		other.RequestID = id
		if _, err := natsx.Publish(h.Ctx, h.St.Infra.JS, h.St.Infra.Subjects.IngestRejected(), other); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := natsx.Publish(h.Ctx, h.St.Infra.JS, h.St.Infra.Subjects.IngestRejected(), rej); err != nil {
		t.Fatal(err)
	}
	srv := stacktest.APIServer(t, h.St.Infra, api.ScopeRead)
	got := apitest.SSEEvents(t, srv.URL+"/v1/sync/cli-only/events", "", 15*time.Second)
	if len(got) != 1 || got[0][0] != "rejected" || !strings.Contains(got[0][1], "cli-only") {
		t.Fatalf("events %v, want the replayed rejection", got)
	}
	c := apitest.Call(t, http.MethodGet, srv.URL+"/v1/sync/never-seen/events", "", "")
	c.Problem(t, "an unknown id with events of others in the stream", http.StatusNotFound)
}

// TestSyncLockLivesAsLongAsTheWork: a slow but healthy sync (every match
// answers 503 once, then waits out a 4 s retry backoff, so nothing is
// stored for longer than the 2 s lock TTL and the 3 s stuck threshold)
// keeps its PUUID lock, renewed on a timer, and the retry-sweeper never
// takes it for stuck: the lock is renewed on a timer, not per stored
// match, so it does not expire while nothing is stored.
func TestSyncLockLivesAsLongAsTheWork(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{Env: map[string]string{"SYNC_LOCK_TTL": "2s", "SYNC_STUCK_AFTER": "3s",
		"SWEEP_INTERVAL": "500ms", "FETCH_BACKOFF": "4s"}})
	p, listed := richestPlayer(t, h, 300)
	f := sim.Faults{Match: map[string]sim.MatchFault{}}
	for _, m := range listed {
		f.Match[m.ID] = sim.MatchFault{Kind: sim.FaultUnavailableN, N: 1}
	}
	if err := h.St.Sim.SetFaults(f); err != nil {
		t.Fatal(err)
	}
	locks, err := h.St.Infra.Lock(h.Ctx, streams.BucketSyncLocks)
	if err != nil {
		t.Fatal(err)
	}
	var held, lost atomic.Int64
	watch, stopWatch := context.WithCancel(h.Ctx)
	defer stopWatch()
	go func() {
		for watch.Err() == nil {
			if h.Count(`SELECT count(*) FROM accounts WHERE puuid = $1 AND sync_status = 'syncing'`, p.PUUID) == 1 {
				if _, err := synclock.Get(watch, locks, p.PUUID); err == nil {
					held.Add(1)
				} else if watch.Err() == nil {
					lost.Add(1)
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	ev, err := h.Ingest(bus.IngestRequest{PUUID: p.PUUID, Platform: p.Platform, Mode: bus.ModeFull, LookbackDays: 300, Count: 1000}, 90*time.Second)
	stopWatch()
	if err != nil {
		t.Fatal(err)
	}
	if ev.Status != "completed" || ev.Total != len(listed) {
		t.Fatalf("final event %+v, want completed with %d matches", ev, len(listed))
	}
	if held.Load() == 0 || lost.Load() != 0 {
		t.Errorf("lock seen held %d times, missing %d times while the sync ran", held.Load(), lost.Load())
	}
	if strings.Contains(h.Logs.String(), "stuck sync recovered") {
		t.Error("a slow but healthy sync was taken for stuck and recovered")
	}
	if got := h.St.Sim.Stats().MethodCount(sim.MethodMatch, 200); got != int64(len(listed)) {
		t.Errorf("getMatch 200s = %d, want %d", got, len(listed))
	}
}

// TestRiotIDRefreshedByPUUID: a player who renamed themselves (the stored
// Riot ID is stale) gets the current one back from account-v1 by-puuid on
// their next sync by PUUID, and the riot-ids cache learns it.
func TestRiotIDRefreshedByPUUID(t *testing.T) {
	h, p := stacktest.Synthetic(t, 1, 2, 1)
	if err := h.St.Infra.Store.UpsertAccount(h.Ctx, store.Account{PUUID: p.PUUID, GameName: "OldName", TagLine: "OLD",
		Platform: "na1", Region: "americas", Active: true}); err != nil {
		t.Fatal(err)
	}
	before := h.St.Sim.Stats().MethodCount(sim.MethodAccountByPUUID, 200)
	ev, err := h.Ingest(bus.IngestRequest{PUUID: p.PUUID, Platform: "na1"}, 2*time.Minute)
	if err != nil || ev.Status != "completed" {
		t.Fatalf("sync: %+v %v", ev, err)
	}
	if n := h.Count(`SELECT count(*) FROM accounts WHERE puuid = $1 AND game_name = 'Synth0001' AND tag_line = 'SYN'`, p.PUUID); n != 1 {
		t.Error("the stored Riot ID was not refreshed by PUUID")
	}
	if got := h.St.Sim.Stats().MethodCount(sim.MethodAccountByPUUID, 200) - before; got != 1 {
		t.Errorf("%d account-v1 by-puuid calls, want 1", got)
	}
	kv, _ := h.St.Infra.KV(h.Ctx, streams.BucketRiotIDs)
	if e, err := kv.Get(h.Ctx, resolver.CacheKey(riot.RiotID{GameName: "Synth0001", TagLine: "SYN"})); err != nil || string(e.Value()) != p.PUUID {
		t.Errorf("riot-ids cache not updated: %v", err)
	}
}
