package e2e

// The three designs riftflow grew from (docs/designs.md): each design's
// promises end to end, and the check that the docs' table names real tests.

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/synclock"
	"github.com/riftflow/riftflow/services/riftflow/api"
	"github.com/riftflow/riftflow/services/riftflow/api/apitest"
	"github.com/riftflow/riftflow/services/riftflow/stack/stacktest"
	"github.com/riftflow/riftflow/streams"
)

// TestDesign000Promises reproduces design 000's retry job end to end:
// permanently unfetchable matches are replayed (all, by match ID, by
// player) through POST /v1/admin/retry, at most 100 per run; a replayed
// match is fetched and stored; each run is logged as a retry job; a request
// that selects nothing is a 400 problem+json.
func TestDesign000Promises(t *testing.T) {
	h, p := stacktest.Synthetic(t, 1, 120, 1)
	// 120 matches an outage left permanently unfetchable.
	if _, err := h.DB.Exec(h.Ctx, `INSERT INTO match_fetches (match_id, kind, status, attempt, retry_count, last_attempt_at)
SELECT id, 'match', 'permanently_unfetchable', 5, 5, now() FROM unnest($1::text[]) id`, idsOf(p.Matches)); err != nil {
		t.Fatal(err)
	}
	srv := stacktest.APIServer(t, h.St.Infra, api.ScopeAdmin)
	post := func(body string) (int, api.RetryResult, string) {
		t.Helper()
		var res api.RetryResult
		code, ct := apitest.JSONCall(t, srv.URL, "POST", "/v1/admin/retry", body, &res)
		return code, res, ct
	}
	stored := func() int {
		return h.Count(`SELECT count(*) FROM match_fetches WHERE kind = 'match' AND status = 'success'`)
	}

	// All: the first run replays 100 (the cap), the second the other 20.
	code, res, _ := post(`{"all":true}`)
	if code != http.StatusOK || len(res.Reopened) != 100 {
		t.Fatalf("first run: %d, %d reopened, want 200 and 100 (design 000's cap)", code, len(res.Reopened))
	}
	stacktest.WaitFor(t, "100 replayed matches stored", 2*time.Minute, func() bool { return stored() == 100 })
	if n := h.Count(`SELECT count(*) FROM match_fetches WHERE kind = 'match' AND status = 'permanently_unfetchable'`); n != 20 {
		t.Errorf("%d still unfetchable after the first run, want 20", n)
	}
	// The second run takes the other 20 matches; it may also take timeline
	// rows the first run's fetches found gone (a 404 for a match older than
	// FETCH_NOT_FOUND_FRESH is final at once).
	code, res, _ = post(`{"all":true}`)
	matchRows := 0
	for _, r := range res.Reopened {
		if strings.HasSuffix(r, "/match") {
			matchRows++
		}
	}
	if code != http.StatusOK || matchRows != 20 {
		t.Fatalf("second run: %d, %d matches reopened (%d rows), want 20", code, matchRows, len(res.Reopened))
	}
	stacktest.WaitFor(t, "all 120 stored", 2*time.Minute, func() bool { return stored() == 120 })
	if n := h.Count(`SELECT count(*) FROM matches m JOIN match_participants pp USING (match_id) WHERE pp.puuid = $1`, p.PUUID); n != 120 {
		t.Errorf("%d of the player's matches readable, want 120", n)
	}
	if n := h.Count(`SELECT count(*) FROM jobs WHERE type = 'retry' AND status = 'completed'`); n != 2 {
		t.Errorf("%d retry jobs logged, want 2", n)
	}
	h.WaitIdle(30 * time.Second)

	// By match ID and by player: only what is selected is replayed.
	mark := func(ids ...string) {
		t.Helper()
		if _, err := h.DB.Exec(h.Ctx, `UPDATE match_fetches SET status = 'permanently_unfetchable'
WHERE kind = 'match' AND match_id = ANY($1)`, ids); err != nil {
			t.Fatal(err)
		}
	}
	mark(p.Matches[0].ID, p.Matches[1].ID)
	// A replay takes the match's unfetchable timeline row too (the
	// simulator lacks some timelines), never another match's rows.
	reopened := func(res api.RetryResult) map[string]bool {
		out := map[string]bool{}
		for _, r := range res.Reopened {
			out[r] = true
		}
		return out
	}
	code, res, _ = post(fmt.Sprintf(`{"match_ids":[%q]}`, p.Matches[0].ID))
	got := reopened(res)
	if code != http.StatusOK || !got[p.Matches[0].ID+"/match"] || len(got) > 2 ||
		(len(got) == 2 && !got[p.Matches[0].ID+"/timeline"]) {
		t.Fatalf("by match ID: %d %+v", code, res)
	}
	code, res, _ = post(fmt.Sprintf(`{"puuid":%q,"limit":1000}`, p.PUUID))
	got = reopened(res)
	if code != http.StatusOK || !got[p.Matches[1].ID+"/match"] || got[p.Matches[2].ID+"/match"] {
		t.Fatalf("by player: %d %+v", code, res)
	}
	for r := range got {
		if !strings.HasSuffix(r, "/timeline") && r != p.Matches[1].ID+"/match" {
			t.Errorf("by player reopened %s, which was not unfetchable", r)
		}
	}
	stacktest.WaitFor(t, "the two replays stored", time.Minute, func() bool { return stored() == 120 })

	// Bad input: RFC 9457.
	for _, body := range []string{`{}`, `{"all":true,"puuid":"x"}`, `{"match_ids":["nope"]}`, `{"bogus":1}`} {
		if code, _, ct := post(body); code != http.StatusBadRequest || ct != "application/problem+json" {
			t.Errorf("%s: %d %s, want 400 application/problem+json", body, code, ct)
		}
	}
}

// TestDesign001Promises reproduces design 001's per-account sync job end
// to end: a second request for an account answers 409 while its sync runs;
// the pause switch stops all syncing (requests published on NATS wait in
// their stream, the API answers 503 problem+json) and resuming finishes
// them; the API answers 503 problem+json while the database is down.
// Stale-sync recovery (an account left syncing by a dead lister is
// resumed) is TestSyncKilledListerRecovers.
func TestDesign001Promises(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{Env: map[string]string{"SCHEDULE_ENABLE": "false"},
		Sim: sim.Options{Synthetic: sim.Synthetic{Players: 2, MatchesPerPlayer: 6}, Faults: slowTimelines(500 * time.Millisecond)}})
	srv := stacktest.APIServer(t, h.St.Infra, api.ScopeAdmin)
	do := func(method, path, body string) (int, string, map[string]any) {
		t.Helper()
		var out map[string]any
		code, ct := apitest.JSONCall(t, srv.URL, method, path, body, &out)
		return code, ct, out
	}
	p := stacktest.SynthPlayer(t, h, 1)

	// 409 while a sync runs.
	code, _, out := do("POST", "/v1/sync", fmt.Sprintf(`{"puuid":%q,"platform":"na1","mode":"full","lookback_days":30}`, p.PUUID))
	if code != http.StatusAccepted {
		t.Fatalf("first sync: %d %v", code, out)
	}
	first := out["request_id"].(string)
	locks, _ := h.St.Infra.Lock(h.Ctx, streams.BucketSyncLocks)
	stacktest.WaitFor(t, "the sync to hold the lock", 30*time.Second, func() bool {
		v, err := synclock.Get(h.Ctx, locks, p.PUUID)
		return err == nil && v.RequestID == first
	})
	if code, _, out := do("POST", "/v1/sync", fmt.Sprintf(`{"puuid":%q,"platform":"na1"}`, p.PUUID)); code != http.StatusConflict {
		t.Errorf("second sync while the first runs: %d %v, want 409", code, out)
	}
	stacktest.WaitFor(t, "the first sync", 2*time.Minute, func() bool {
		return h.Count(`SELECT count(*) FROM jobs WHERE id = $1 AND status = 'completed'`, first) == 1
	})

	// The pause switch.
	if code, _, out := do("PUT", "/v1/admin/pause", `{"paused":true,"reason":"maintenance","by":"test"}`); code != 200 {
		t.Fatalf("pause: %d %v", code, out)
	}
	stacktest.WaitFor(t, "this process to see the switch", 10*time.Second, h.St.Infra.Pause.Paused)
	code, ct, out := do("POST", "/v1/sync", fmt.Sprintf(`{"puuid":%q,"platform":"na1"}`, p.PUUID))
	if code != http.StatusServiceUnavailable || ct != "application/problem+json" || out["status"] != float64(503) ||
		!strings.Contains(fmt.Sprint(out["detail"]), "maintenance") {
		t.Errorf("POST /v1/sync while paused: %d %s %v, want 503 problem+json naming the reason", code, ct, out)
	}
	if code, _, _ := do("GET", "/v1/jobs", ""); code != 200 {
		t.Errorf("GET /v1/jobs while paused: %d, want 200 (reads go on)", code)
	}
	p2 := stacktest.SynthPlayer(t, h, 2)
	publishReq(t, h, bus.IngestRequest{RequestID: "while-paused", PUUID: p2.PUUID, Platform: "na1", Mode: bus.ModeFull, LookbackDays: 30})
	// Give the services several pull rounds: nothing may start. The
	// request is visible as a pending job (issue 26 point 4), never
	// running.
	time.Sleep(3 * time.Second)
	if n := h.Count(`SELECT count(*) FROM jobs WHERE id = 'while-paused' AND status <> 'pending'`); n != 0 {
		t.Fatalf("a request published while paused was processed (%d jobs rows not pending)", n)
	}
	if code, _, out := do("PUT", "/v1/admin/pause", `{"paused":false}`); code != 200 {
		t.Fatalf("resume: %d %v", code, out)
	}
	stacktest.WaitFor(t, "the request held by the pause to complete", 2*time.Minute, func() bool {
		return h.Count(`SELECT count(*) FROM jobs WHERE id = 'while-paused' AND status = 'completed'`) == 1
	})

	// The database down: 503 problem+json from every route but the switch.
	srvDown := httptest.NewServer(stacktest.WithToken(t, h.St.Infra, stacktest.NewAPI(dbDown(h)).Handler(), api.ScopeAdmin))
	defer srvDown.Close()
	for _, path := range []string{"/v1/jobs", "/v1/accounts/" + p.PUUID} {
		resp, err := srvDown.Client().Get(srvDown.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("GET %s with the database down: %d %s, want 503 problem+json", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
}

// jobBy waits for the one sync job requested by who to finish, and returns it.
func jobBy(h *stacktest.Harness, t *testing.T, who string, timeout time.Duration) store.Job {
	t.Helper()
	var job store.Job
	stacktest.WaitFor(t, "the job requested by "+who+" to finish", timeout, func() bool {
		var n int
		err := h.DB.QueryRow(h.Ctx, `SELECT count(*) FROM jobs WHERE requested_by = $1`, who).Scan(&n)
		if err != nil || n != 1 {
			return false
		}
		jobs, err := h.St.Infra.Store.Jobs(h.Ctx, store.JobFilter{Type: "sync"})
		if err != nil {
			return false
		}
		for _, j := range jobs {
			if j.RequestedBy == who && (j.Status == "completed" || j.Status == "failed" || j.Status == "rejected") {
				job = j
				return true
			}
		}
		return false
	})
	return job
}

// TestDesign002Promises reproduces design 002's request promises end to
// end: its exact payload is accepted on the ingest subject and over HTTP;
// latest means the newest N games even when every game of the player is
// older than the lookback; requestedBy is stored on the job; force refetches
// and overwrites stored matches and says so in the job log; retried fetches
// are counted on the job.
func TestDesign002Promises(t *testing.T) {
	// The services' clock runs 60 days ahead of the simulator's: every game
	// of the player is older than INGESTION_LOOKBACK_DAYS (30).
	clk := &offsetClock{}
	clk.Set(60 * 24 * time.Hour)
	h := stacktest.Start(t, stacktest.Options{Now: clk.Now, Env: map[string]string{"SCHEDULE_ENABLE": "false",
		"INGESTION_LOOKBACK_DAYS": "30"},
		Sim: sim.Options{Synthetic: sim.Synthetic{Players: 2, MatchesPerPlayer: 10}}})
	p := stacktest.SynthPlayer(t, h, 1)

	// 1. The exact design-002 payload on lol.ingest.request: no platform;
	// the resolver finds it (account-v1 getActiveRegion) and the job says so.
	payload := fmt.Sprintf(`{"puuid":%q,"count":3,"lookbackDays":30,"force":false,"requestedBy":"bot-7"}`, p.PUUID)
	if _, err := h.St.Infra.JS.Publish(h.Ctx, h.St.Infra.Subjects.IngestRequest(), []byte(payload)); err != nil {
		t.Fatal(err)
	}
	job := jobBy(h, t, "bot-7", 2*time.Minute)
	if job.Status != "completed" {
		t.Fatalf("design-002 payload: job %+v, want completed", job)
	}
	wantFoundPlatform(t, job, p.Platform)
	stored := map[string]bool{}
	rows, _ := h.DB.Query(h.Ctx, `SELECT DISTINCT match_id FROM match_participants WHERE puuid = $1`, p.PUUID)
	for rows.Next() {
		var id string
		rows.Scan(&id)
		stored[id] = true
	}
	if len(stored) != 3 {
		t.Errorf("latest count 3 stored %d matches, want the newest 3 (games older than the lookback included)", len(stored))
	}
	for _, m := range p.Matches[:3] {
		if !stored[m.ID] {
			t.Errorf("newest match %s not stored", m.ID)
		}
	}

	// 2. Over HTTP, the same payload: 202, and requestedBy on the job.
	srv := stacktest.APIServer(t, h.St.Infra, api.ScopeAdmin)
	p2 := stacktest.SynthPlayer(t, h, 2)
	resp, err := http.Post(srv.URL+"/v1/sync", "application/json", strings.NewReader(
		fmt.Sprintf(`{"puuid":%q,"count":2,"lookbackDays":30,"force":false,"requestedBy":"web-ui"}`, p2.PUUID)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /v1/sync with the design-002 payload: %d, want 202", resp.StatusCode)
	}
	job = jobBy(h, t, "web-ui", 2*time.Minute)
	if job.Status != "completed" || job.PUUID != p2.PUUID {
		t.Errorf("HTTP design-002 job: %+v", job)
	}
	wantFoundPlatform(t, job, p2.Platform)
	if n := h.St.Sim.Stats().MethodCount(sim.MethodActiveRegion, 200); n != 2 {
		t.Errorf("%d account-v1 getActiveRegion calls, want 2 (one per player)", n)
	}
	h.WaitIdle(20 * time.Second)

	// 3. force: a stored match is damaged, then a forced sync refetches the
	// 3 stored matches (one of them answering 503 once) and overwrites it.
	newest := p.Matches[0].ID
	if _, err := h.DB.Exec(h.Ctx, `UPDATE match_participants SET kills = -1 WHERE match_id = $1`, newest); err != nil {
		t.Fatal(err)
	}
	h.St.Sim.SetFaults(sim.Faults{Match: map[string]sim.MatchFault{p.Matches[1].ID: {Kind: sim.FaultUnavailableN, N: 1}}})
	before := h.St.Sim.Stats().MethodCount(sim.MethodMatch, 200)
	ids := []string{p.Matches[0].ID, p.Matches[1].ID, p.Matches[2].ID}
	retriesBefore := h.Count(`SELECT coalesce(sum(retry_count), 0)::int FROM match_fetches WHERE match_id = ANY($1)`, ids)
	payload = fmt.Sprintf(`{"puuid":%q,"count":3,"lookbackDays":730,"force":true,"requestedBy":"ops","platform":"na1","mode":"full"}`, p.PUUID)
	if _, err := h.St.Infra.JS.Publish(h.Ctx, h.St.Infra.Subjects.IngestRequest(), []byte(payload)); err != nil {
		t.Fatal(err)
	}
	job = jobBy(h, t, "ops", 40*time.Second)
	if job.Status != "completed" {
		t.Fatalf("forced sync: %+v", job)
	}
	if got := h.St.Sim.Stats().MethodCount(sim.MethodMatch, 200) - before; got != 3 {
		t.Errorf("forced sync fetched %d matches, want the 3 stored ones again", got)
	}
	if n := h.Count(`SELECT count(*) FROM match_participants WHERE match_id = $1 AND kills < 0`, newest); n != 0 {
		t.Errorf("forced sync left the damaged row (%d participants with kills -1)", n)
	}
	var detail struct {
		Force  bool `json:"force"`
		Forced int  `json:"forced"`
	}
	json.Unmarshal(job.Detail, &detail)
	if !detail.Force || detail.Forced != 3 {
		t.Errorf("job log detail %s, want force true and forced 3", job.Detail)
	}
	// Every failed attempt of the job's fetches (the 503, and the
	// simulator's 404s for timelines it lacks) is one retry of the job.
	retried := h.Count(`SELECT coalesce(sum(retry_count), 0)::int FROM match_fetches WHERE match_id = ANY($1)`, ids) - retriesBefore
	if job.Retries < 1 || job.Retries != retried {
		t.Errorf("job retries = %d, want the %d failed attempts of its fetches (at least the 503)", job.Retries, retried)
	}
	if !strings.Contains(h.Logs.String(), "force: refetching and overwriting stored matches") {
		t.Error("the lister did not log the forced refetch")
	}
}

// wantFoundPlatform checks that job's detail names platform as the one the
// resolver found (the request named none).
func wantFoundPlatform(t *testing.T, job store.Job, platform string) {
	t.Helper()
	var d struct {
		Platform      string `json:"platform"`
		PlatformFound bool   `json:"platform_found"`
	}
	if err := json.Unmarshal(job.Detail, &d); err != nil || d.Platform != platform || !d.PlatformFound {
		t.Errorf("job %s detail %s, want platform %q found through account-v1", job.ID, job.Detail, platform)
	}
}

// TestDesign002Caches reproduces design 002's caches end to end: a Riot ID
// is resolved by account-v1 once and then from the riot-ids bucket (TTL one
// day); a player's match IDs listed minutes ago are reused by the next
// latest sync (no match-v5 list call), and listed again once the
// five-minute lifetime has passed on the services' clock; a stored match
// is never fetched again by a later sync; the read API serves matches for a
// day (Cache-Control max-age=86400, ETag, 304) and a player's match pages
// for five minutes, each with an ETag.
func TestDesign002Caches(t *testing.T) {
	clk := &offsetClock{}
	h := stacktest.Start(t, stacktest.Options{Now: clk.Now, Env: map[string]string{"SCHEDULE_ENABLE": "false"},
		Sim: sim.Options{Synthetic: sim.Synthetic{Players: 1, MatchesPerPlayer: 4}}})
	p := stacktest.SynthPlayer(t, h, 1)
	riotID := sim.SyntheticRiotID(1).String()
	stats := func(method string) int64 { return h.St.Sim.Stats().MethodCount(method, 200) }
	sync := func(what string) bus.ProgressEvent {
		t.Helper()
		ev, err := h.Ingest(bus.IngestRequest{RiotID: riotID, Platform: "na1", Mode: bus.ModeLatest, Count: 10}, time.Minute)
		if err != nil || ev.Status != "completed" {
			t.Fatalf("%s: %+v %v", what, ev, err)
		}
		h.WaitIdle(20 * time.Second)
		return ev
	}

	// Riot ID → PUUID: one account-v1 call, then the cache (1 day).
	first := sync("first sync")
	if n := stats(sim.MethodAccountByRiotID); n != 1 {
		t.Fatalf("first sync: %d account-v1 by-riot-id calls, want 1", n)
	}
	kv, err := h.St.Infra.KV(h.Ctx, streams.BucketRiotIDs)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := kv.Status(h.Ctx); err != nil || st.TTL() != 24*time.Hour {
		t.Errorf("riot-ids lifetime: %v %v, want 24h", st, err)
	}
	lists, matches := stats(sim.MethodMatchIDs), stats(sim.MethodMatch)
	if lists == 0 || matches != int64(first.Total) || first.Total != 4 {
		t.Fatalf("first sync: %d list calls, %d match calls, total %d; want ≥ 1, 4, 4", lists, matches, first.Total)
	}

	// Match IDs: a second latest sync a moment later lists nothing from Riot.
	if ev := sync("second sync"); ev.Total != 0 {
		t.Errorf("second sync: total %d, want 0 (nothing new)", ev.Total)
	}
	if n := stats(sim.MethodAccountByRiotID); n != 1 {
		t.Errorf("second sync: %d account-v1 by-riot-id calls in all, want still 1 (cached)", n)
	}
	if n := stats(sim.MethodMatchIDs); n != lists {
		t.Errorf("second sync: %d list calls in all, want still %d (match IDs cached)", n, lists)
	}
	// Six minutes later (the services' clock), the list is read again.
	clk.Set(6 * time.Minute)
	sync("third sync")
	if n := stats(sim.MethodMatchIDs); n <= lists {
		t.Errorf("third sync, past the 5-minute lifetime: %d list calls in all, want more than %d", n, lists)
	}
	// Match details: stored ones are never fetched again.
	if n := stats(sim.MethodMatch); n != matches {
		t.Errorf("%d match calls after three syncs, want %d (stored matches are not refetched)", n, matches)
	}

	// The read API's lifetimes and validators.
	srv := stacktest.APIServer(t, h.St.Infra, api.ScopeRead)
	for path, cc := range map[string]string{
		"/v1/matches/" + p.Matches[0].ID:      "public, max-age=86400",
		"/v1/players/" + p.PUUID + "/matches": "public, max-age=300",
		"/v1/players/" + p.PUUID:              "private, max-age=0",
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		etag := resp.Header.Get("ETag")
		if resp.StatusCode != 200 || resp.Header.Get("Cache-Control") != cc || etag == "" {
			t.Errorf("GET %s: %d, Cache-Control %q, ETag %q; want 200, %q and an ETag", path, resp.StatusCode, resp.Header.Get("Cache-Control"), etag, cc)
			continue
		}
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("If-None-Match", etag)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with If-None-Match: %d, want 304", path, resp.StatusCode)
		}
	}
}

// TestDesignsTableNamesRealTests: every test docs/designs.md names as
// keeping a promise exists (a func Test… in some _test.go of the repo).
func TestDesignsTableNamesRealTests(t *testing.T) {
	doc, err := os.ReadFile("../docs/designs.md")
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(`)
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != ".." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range decl.FindAllSubmatch(b, -1) {
				defined[string(m[1])] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("`(Test[A-Za-z0-9_]+)`").FindAllSubmatch(doc, -1)
	if len(named) < 20 {
		t.Fatalf("docs/designs.md names %d tests; its table is missing", len(named))
	}
	for _, m := range named {
		if !defined[string(m[1])] {
			t.Errorf("docs/designs.md names %s, which no _test.go defines", m[1])
		}
	}
}
