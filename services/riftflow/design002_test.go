package riftflow

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/store"
)

// jobBy waits for the one sync job requested by who to finish, and returns it.
func (h *harness) jobBy(t *testing.T, who string, timeout time.Duration) store.Job {
	t.Helper()
	var job store.Job
	waitFor(t, "the job requested by "+who+" to finish", timeout, func() bool {
		var n int
		err := h.st.Infra.Store.Pool().QueryRow(h.ctx, `SELECT count(*) FROM jobs WHERE requested_by = $1`, who).Scan(&n)
		if err != nil || n != 1 {
			return false
		}
		jobs, err := h.st.Infra.Store.Jobs(h.ctx, store.JobFilter{Type: "sync"})
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
	h := startHarness(t, harnessOptions{now: clk.Now, env: map[string]string{"SCHEDULE_ENABLE": "false",
		"INGESTION_LOOKBACK_DAYS": "30"},
		sim: sim.Options{Synthetic: sim.Synthetic{Players: 2, MatchesPerPlayer: 10}}})
	p := synthPlayer(t, h, 1)

	// 1. The exact design-002 payload on lol.ingest.request.
	payload := fmt.Sprintf(`{"puuid":%q,"count":3,"lookbackDays":30,"force":false,"requestedBy":"bot-7","platform":"na1"}`, p.PUUID)
	if _, err := h.st.Infra.JS.Publish(h.ctx, h.st.Infra.Subjects.IngestRequest(), []byte(payload)); err != nil {
		t.Fatal(err)
	}
	job := h.jobBy(t, "bot-7", 2*time.Minute)
	if job.Status != "completed" {
		t.Fatalf("design-002 payload: job %+v, want completed", job)
	}
	stored := map[string]bool{}
	rows, _ := h.st.Infra.Store.Pool().Query(h.ctx, `SELECT DISTINCT match_id FROM match_participants WHERE puuid = $1`, p.PUUID)
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
	srv := httptest.NewServer(withToken(t, h.st.Infra, NewAPI(h.st.Infra).Handler(), ScopeAdmin))
	defer srv.Close()
	p2 := synthPlayer(t, h, 2)
	resp, err := http.Post(srv.URL+"/v1/sync", "application/json", strings.NewReader(
		fmt.Sprintf(`{"puuid":%q,"count":2,"lookbackDays":30,"force":false,"requestedBy":"web-ui","platform":"na1"}`, p2.PUUID)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /v1/sync with the design-002 payload: %d, want 202", resp.StatusCode)
	}
	if job := h.jobBy(t, "web-ui", 2*time.Minute); job.Status != "completed" || job.PUUID != p2.PUUID {
		t.Errorf("HTTP design-002 job: %+v", job)
	}
	h.waitIdle(20 * time.Second)

	// 3. force: a stored match is damaged, then a forced sync refetches the
	// 3 stored matches (one of them answering 503 once) and overwrites it.
	newest := p.Matches[0].ID
	if _, err := h.st.Infra.Store.Pool().Exec(h.ctx, `UPDATE match_participants SET kills = -1 WHERE match_id = $1`, newest); err != nil {
		t.Fatal(err)
	}
	h.st.Sim.SetFaults(sim.Faults{Match: map[string]sim.MatchFault{p.Matches[1].ID: {Kind: sim.FaultUnavailableN, N: 1}}})
	before := h.st.Sim.Stats().MethodCount(sim.MethodMatch, 200)
	ids := []string{p.Matches[0].ID, p.Matches[1].ID, p.Matches[2].ID}
	retriesBefore := h.count(`SELECT coalesce(sum(retry_count), 0)::int FROM match_fetches WHERE match_id = ANY($1)`, ids)
	payload = fmt.Sprintf(`{"puuid":%q,"count":3,"lookbackDays":730,"force":true,"requestedBy":"ops","platform":"na1","mode":"full"}`, p.PUUID)
	if _, err := h.st.Infra.JS.Publish(h.ctx, h.st.Infra.Subjects.IngestRequest(), []byte(payload)); err != nil {
		t.Fatal(err)
	}
	job = h.jobBy(t, "ops", 40*time.Second)
	if job.Status != "completed" {
		t.Fatalf("forced sync: %+v", job)
	}
	if got := h.st.Sim.Stats().MethodCount(sim.MethodMatch, 200) - before; got != 3 {
		t.Errorf("forced sync fetched %d matches, want the 3 stored ones again", got)
	}
	if n := h.count(`SELECT count(*) FROM match_participants WHERE match_id = $1 AND kills < 0`, newest); n != 0 {
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
	retried := h.count(`SELECT coalesce(sum(retry_count), 0)::int FROM match_fetches WHERE match_id = ANY($1)`, ids) - retriesBefore
	if job.Retries < 1 || job.Retries != retried {
		t.Errorf("job retries = %d, want the %d failed attempts of its fetches (at least the 503)", job.Retries, retried)
	}
	if !strings.Contains(h.logs.String(), "force: refetching and overwriting stored matches") {
		t.Error("the lister did not log the forced refetch")
	}
}
