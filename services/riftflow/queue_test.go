package riftflow

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/control"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/services/riftflow/api"
	"github.com/riftflow/riftflow/services/riftflow/stack"
	"github.com/riftflow/riftflow/services/riftflow/stack/stacktest"
	"github.com/riftflow/riftflow/streams"
)

// TestQueuedSyncIsVisible (design 001's "pending"): sync requests accepted
// while the pause switch holds every service are pending, with their place
// in the queue, in GET /v1/jobs, GET /v1/accounts/{puuid} (an account never
// synced included) and `riftflow status`, from the moment they are
// accepted (the HTTP API and the CLI's ingest); they run once the switch is
// off. An account that was synced shows its new request pending too, and
// a queued request the resolver refuses ends rejected.
func TestQueuedSyncIsVisible(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{Env: map[string]string{"SCHEDULE_ENABLE": "false"},
		Sim: sim.Options{Synthetic: sim.Synthetic{Players: 3, MatchesPerPlayer: 3}}})
	pause, srv := pauseSwitch(t, h)
	do := func(method, path, body string, out any) int {
		t.Helper()
		code, _ := jsonCall(t, srv.URL, method, path, body, out)
		return code
	}
	p1, p2, p3 := stacktest.SynthPlayer(t, h, 1), stacktest.SynthPlayer(t, h, 2), stacktest.SynthPlayer(t, h, 3)

	pause(true)
	var ids []string
	for _, p := range []sim.PlayerTruth{p1, p2} {
		var acc struct {
			RequestID string `json:"request_id"`
		}
		if code := do("POST", "/v1/sync", fmt.Sprintf(`{"puuid":%q,"platform":"na1","mode":"full","lookback_days":30}`, p.PUUID), &acc); code != http.StatusAccepted {
			t.Fatalf("POST /v1/sync: %d", code)
		}
		ids = append(ids, acc.RequestID)
	}
	// `riftflow ingest` records its request as the API does, then publishes.
	cli := bus.IngestRequest{RequestID: "cli-queued", PUUID: p3.PUUID, Platform: "na1", Mode: bus.ModeFull, LookbackDays: 30, Trigger: "cli",
		RequestedAt: time.Now().UTC()}
	if err := cli.Normalize(); err != nil {
		t.Fatal(err)
	}
	env := h.St.Infra.Env
	env.Postgres.URL = config.Secret(h.St.DBURL)
	queueInJobLog(h.Ctx, env, cli, io.Discard)
	if err := stack.PublishIngest(h.Ctx, h.St.Infra.NC, h.St.Infra.Subjects, cli); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, cli.RequestID)
	time.Sleep(2 * time.Second) // several pull rounds: the switch holds them

	var jobs struct {
		Jobs []api.Job `json:"jobs"`
	}
	if code := do("GET", "/v1/jobs?type=sync", "", &jobs); code != 200 {
		t.Fatalf("GET /v1/jobs: %d", code)
	}
	pos := map[string]int{}
	for _, j := range jobs.Jobs {
		if j.Status == "pending" {
			pos[j.ID] = j.Position
		}
	}
	for i, id := range ids {
		if pos[id] != i+1 {
			t.Errorf("GET /v1/jobs: request %s pending at %d, want pending at %d (jobs %+v)", id, pos[id], i+1, jobs.Jobs)
		}
	}
	var acct store.AccountStatus
	if code := do("GET", "/v1/accounts/"+p1.PUUID, "", &acct); code != 200 || acct.SyncStatus != "pending" ||
		acct.SyncRequestID != ids[0] || len(acct.Queued) != 1 || acct.Queued[0].Position != 1 {
		t.Errorf("GET /v1/accounts/{never synced, queued}: %d %+v, want pending %s at 1", code, acct, ids[0])
	}
	t.Setenv("DATABASE_URL", h.St.DBURL)
	for args, want := range map[string][]string{
		"status --puuid " + p2.PUUID: {"pending, 0/0 matches, request " + ids[1], "#2 in the interactive queue"},
		"status --jobs":              {"pending #3", cli.RequestID},
	} {
		cliShows(t, args, want...)
	}

	pause(false)
	for _, id := range ids {
		stacktest.WaitFor(t, "request "+id+" to complete", 2*time.Minute, func() bool {
			return h.Count(`SELECT count(*) FROM jobs WHERE id = $1 AND status = 'completed'`, id) == 1
		})
	}
	h.WaitIdle(20 * time.Second)

	// A synced account with a new request queued: pending again, with
	// its last sync kept.
	pause(true)
	var again struct {
		RequestID string `json:"request_id"`
	}
	if code := do("POST", "/v1/sync", fmt.Sprintf(`{"puuid":%q,"platform":"na1"}`, p1.PUUID), &again); code != http.StatusAccepted {
		t.Fatalf("POST /v1/sync again: %d", code)
	}
	acct = store.AccountStatus{}
	if code := do("GET", "/v1/accounts/"+p1.PUUID, "", &acct); code != 200 || acct.SyncStatus != "pending" ||
		acct.SyncRequestID != again.RequestID || acct.LastSyncedAt.IsZero() || acct.Matches == 0 {
		t.Errorf("GET /v1/accounts/{synced, queued}: %d %+v, want pending %s with its last sync", code, acct, again.RequestID)
	}
	pause(false)
	stacktest.WaitFor(t, "the second request to complete", 2*time.Minute, func() bool {
		return h.Count(`SELECT count(*) FROM jobs WHERE id = $1 AND status = 'completed'`, again.RequestID) == 1
	})
	if s, err := h.St.Infra.Store.AccountStatus(h.Ctx, p1.PUUID); err != nil || s.SyncStatus != "completed" || len(s.Queued) != 0 {
		t.Errorf("after the queued sync ran: %+v %v, want completed, nothing queued", s, err)
	}

	// A queued request the resolver refuses (an unknown Riot ID) does not
	// stay pending: its job ends rejected with the reason.
	var unknown struct {
		RequestID string `json:"request_id"`
	}
	if code := do("POST", "/v1/sync", `{"riot_id":"Nobody Here#0000","platform":"na1"}`, &unknown); code != http.StatusAccepted {
		t.Fatalf("POST /v1/sync for an unknown Riot ID: %d", code)
	}
	stacktest.WaitFor(t, "the refused request's job to end rejected", 30*time.Second, func() bool {
		return h.Count(`SELECT count(*) FROM jobs WHERE id = $1 AND status = 'rejected' AND error LIKE '%no Riot account%'`, unknown.RequestID) == 1
	})
	// A client that asks later hears the outcome, with the resolver's code.
	events := sseEvents(t, srv.URL+"/v1/sync/"+unknown.RequestID+"/events", "", 30*time.Second)
	var rej bus.Rejection
	if len(events) > 0 {
		json.Unmarshal([]byte(events[len(events)-1][1]), &rej)
	}
	if len(events) == 0 || events[len(events)-1][0] != "rejected" || rej.Code != http.StatusNotFound {
		t.Errorf("late SSE client of the refused request: %v, want a rejected event with code 404", events)
	}
}

// `riftflow status --schedules` shows each scheduled job with its
// schedule, its last run from the job log (or never) and its next time
// (design 000 checked its recurring job in Hangfire's dashboard).
func TestStatusSchedules(t *testing.T) {
	url := pgtest.NewDatabase(t)
	st, err := store.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ran := time.Now().UTC().Truncate(time.Hour).Add(-time.Hour)
	if err := st.RecordJob(t.Context(), store.Job{ID: "latest_all-ran", Type: "latest_all", Status: "completed",
		RequestedAt: ran, StartedAt: ran, FinishedAt: ran.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", url)
	t.Setenv("SCHEDULE_ENABLE", "true")
	t.Setenv("CRON_RANK_DAILY", "15 3 * * *")
	before := time.Now()
	var out, errOut bytes.Buffer
	if code := Main([]string{"status", "--schedules", "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("status --schedules: exit %d: %s", code, errOut.String())
	}
	var runs []scheduleRun
	if err := json.Unmarshal(out.Bytes(), &runs); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	got := map[string]scheduleRun{}
	for _, r := range runs {
		got[r.Job] = r
	}
	latest, rank := got["latest_all"], got["rank_daily"]
	if len(runs) != 4 || latest.LastRun == nil || latest.LastRun.ID != "latest_all-ran" || latest.LastRun.Status != "completed" ||
		latest.Next.Minute() != 0 || !latest.Next.After(before) || latest.Next.Sub(before) > 2*time.Hour {
		t.Errorf("latest_all: %+v (of %d schedules), want its last run latest_all-ran and the next full hour", latest, len(runs))
	}
	if rank.Expr != "15 3 * * *" || rank.Env != "CRON_RANK_DAILY" || rank.LastRun != nil || rank.Next.Hour() != 3 || rank.Next.Minute() != 15 {
		t.Errorf("rank_daily: %+v, want CRON_RANK_DAILY 15 3 * * *, never run, next at 03:15", rank)
	}
	cliShows(t, "status --schedules", "NEXT RUN", "latest_all", "completed", "never", "CRON_PRUNE_JOBS")
}

// TestNATSRequestIsVisible (issue 26's point 4): requests published
// straight on NATS, not through the API or the CLI, are pending in GET
// /v1/jobs, GET /v1/accounts/{puuid} and `riftflow status` from the moment
// INGEST stores them: while the pause switch holds every service, and
// while no resolver runs at all. One has no request id (it is named as the
// resolver names it), one is by Riot ID (no PUUID until the lister starts
// it). Once the switch is off and a resolver runs, each completes under
// the same job.
func TestNATSRequestIsVisible(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{NoRun: true, Env: map[string]string{"SCHEDULE_ENABLE": "false"},
		Sim: sim.Options{Synthetic: sim.Synthetic{Players: 3, MatchesPerPlayer: 3}}})
	pause, srv := pauseSwitch(t, h)
	p1, p2 := stacktest.SynthPlayer(t, h, 1), stacktest.SynthPlayer(t, h, 2)
	// Every service but the resolver, under the pause switch.
	pause(true)
	run, stop := context.WithCancel(h.St.Infra.HoldContext(h.Ctx))
	done := make(chan error, len(h.St.Services))
	running := 0
	start := func(s app.Service) {
		running++
		go func() { done <- s.Run(run) }()
	}
	t.Cleanup(func() {
		stop()
		for range running {
			<-done
		}
	})
	for _, s := range h.St.Services[1:] {
		start(s)
	}
	publish := func(body string) uint64 {
		t.Helper()
		ack, err := h.St.Infra.JS.Publish(h.Ctx, h.St.Infra.Subjects.IngestRequest(), []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	pending := func(what string, want map[string]int) {
		t.Helper()
		var jobs struct {
			Jobs []api.Job `json:"jobs"`
		}
		stacktest.WaitFor(t, what+": GET /v1/jobs shows the requests pending", 20*time.Second, func() bool {
			jobs.Jobs = nil
			if code, _ := jsonCall(t, srv.URL, "GET", "/v1/jobs?type=sync&status=pending", "", &jobs); code != 200 {
				return false
			}
			got := map[string]int{}
			for _, j := range jobs.Jobs {
				got[j.ID] = j.Position
			}
			return len(got) == len(want) && func() bool {
				for id, pos := range want {
					if got[id] != pos {
						return false
					}
				}
				return true
			}()
		})
	}

	seq := publish(fmt.Sprintf(`{"puuid":%q,"platform":"na1","mode":"full","lookback_days":30}`, p1.PUUID))
	ingest, err := h.St.Infra.JS.Stream(h.Ctx, streams.StreamIngest)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := ingest.GetMsg(h.Ctx, seq)
	if err != nil {
		t.Fatal(err)
	}
	anon := bus.StoredRequestID(raw.Time, raw.Sequence)
	pending("paused", map[string]int{anon: 1})
	var acct store.AccountStatus
	if code, _ := jsonCall(t, srv.URL, "GET", "/v1/accounts/"+p1.PUUID, "", &acct); code != 200 || acct.SyncStatus != "pending" ||
		acct.SyncRequestID != anon || len(acct.Queued) != 1 || acct.Queued[0].Position != 1 {
		t.Errorf("GET /v1/accounts/{queued on NATS}: %d %+v, want pending %s at 1", code, acct, anon)
	}

	// The switch is off, but no resolver runs: a request by Riot ID waits
	// in INGEST, pending, without a PUUID.
	pause(false)
	riotID := p2.GameName + "#" + p2.TagLine
	publish(fmt.Sprintf(`{"request_id":"nats-riot","riot_id":%q,"platform":"na1","mode":"full","lookback_days":30}`, riotID))
	time.Sleep(time.Second) // pull rounds of every running service
	pending("no resolver", map[string]int{anon: 1, "nats-riot": 2})
	t.Setenv("DATABASE_URL", h.St.DBURL)
	for args, want := range map[string][]string{
		"status --puuid " + p1.PUUID: {"pending, 0/0 matches, request " + anon, "#1 in the interactive queue"},
		"status --jobs":              {"pending #1", anon, "pending #2", "nats-riot"},
	} {
		cliShows(t, args, want...)
	}
	var out, errOut bytes.Buffer
	if code := Main([]string{"status", "--riot-id", riotID}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "nats-riot") ||
		!strings.Contains(out.String(), "pending") {
		t.Errorf("riftflow status --riot-id %s: exit %d, want pending nats-riot:\n%s%s", riotID, code, out.String(), errOut.String())
	}

	// A resolver starts: both complete, under the jobs shown pending.
	start(h.St.Services[0])
	for id, puuid := range map[string]string{anon: p1.PUUID, "nats-riot": p2.PUUID} {
		stacktest.WaitFor(t, "request "+id+" to complete", 2*time.Minute, func() bool {
			return h.Count(`SELECT count(*) FROM jobs WHERE id = $1 AND puuid = $2 AND status = 'completed'`, id, puuid) == 1
		})
	}
	if n := h.Count(`SELECT count(*) FROM jobs WHERE type = 'sync'`); n != 2 {
		t.Errorf("%d sync jobs, want the 2 requests' own", n)
	}
}

// pauseSwitch gives the queue tests the pause switch of h's services
// (pause sets it and waits until they see it) and an API server that
// ignores it: a replica that accepted its requests before the switch
// reached it. The replica gets its own copy of the Process, so the
// services' switch stays.
func pauseSwitch(t *testing.T, h *stacktest.Harness) (pause func(on bool), srv *httptest.Server) {
	t.Helper()
	kv, err := h.St.Infra.KV(h.Ctx, streams.BucketControl)
	if err != nil {
		t.Fatal(err)
	}
	pause = func(on bool) {
		t.Helper()
		if err := control.Set(h.Ctx, kv, control.State{Paused: on, Reason: "queue test", By: "test"}); err != nil {
			t.Fatal(err)
		}
		stacktest.WaitFor(t, fmt.Sprintf("the services to see paused=%v", on), 10*time.Second, func() bool { return h.St.Infra.Pause.Paused() == on })
	}
	proc := *h.St.Infra.Process
	proc.Pause = nil
	unpaused := *h.St.Infra
	unpaused.Process = &proc
	return pause, stacktest.APIServer(t, &unpaused, api.ScopeAdmin)
}

// cliShows runs the CLI (Main) with the words of args and fails the test
// unless it exits 0 with each of want in its output.
func cliShows(t *testing.T, args string, want ...string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := Main(strings.Fields(args), &out, &errOut); code != 0 {
		t.Fatalf("riftflow %s: exit %d: %s", args, code, errOut.String())
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("riftflow %s lacks %q:\n%s", args, w, out.String())
		}
	}
}
