package riftflow

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/synclock"
	"github.com/riftflow/riftflow/streams"
)

// TestDesign001Promises reproduces design 001's per-account sync job end
// to end: a second request for an account answers 409 while its sync runs;
// the pause switch stops all syncing (requests published on NATS wait in
// their stream, the API answers 503 problem+json) and resuming finishes
// them; the API answers 503 problem+json while the database is down.
// Stale-sync recovery (an account left syncing by a dead lister is
// resumed) is TestSyncKilledListerRecovers.
func TestDesign001Promises(t *testing.T) {
	h := startHarness(t, harnessOptions{env: map[string]string{"SCHEDULE_ENABLE": "false"},
		sim: sim.Options{Synthetic: sim.Synthetic{Players: 2, MatchesPerPlayer: 6}, Faults: slowTimelines(500 * time.Millisecond)}})
	srv := httptest.NewServer(withToken(t, h.st.Infra, NewAPI(h.st.Infra).Handler(), ScopeAdmin))
	defer srv.Close()
	do := func(method, path, body string) (int, string, map[string]any) {
		t.Helper()
		var out map[string]any
		code, ct := jsonCall(t, srv.URL, method, path, body, &out)
		return code, ct, out
	}
	p := synthPlayer(t, h, 1)

	// 409 while a sync runs.
	code, _, out := do("POST", "/v1/sync", fmt.Sprintf(`{"puuid":%q,"platform":"na1","mode":"full","lookback_days":30}`, p.PUUID))
	if code != http.StatusAccepted {
		t.Fatalf("first sync: %d %v", code, out)
	}
	first := out["request_id"].(string)
	locks, _ := h.st.Infra.Lock(h.ctx, streams.BucketSyncLocks)
	waitFor(t, "the sync to hold the lock", 30*time.Second, func() bool {
		v, err := synclock.Get(h.ctx, locks, p.PUUID)
		return err == nil && v.RequestID == first
	})
	if code, _, out := do("POST", "/v1/sync", fmt.Sprintf(`{"puuid":%q,"platform":"na1"}`, p.PUUID)); code != http.StatusConflict {
		t.Errorf("second sync while the first runs: %d %v, want 409", code, out)
	}
	waitFor(t, "the first sync", 2*time.Minute, func() bool {
		return h.count(`SELECT count(*) FROM jobs WHERE id = $1 AND status = 'completed'`, first) == 1
	})

	// The pause switch.
	if code, _, out := do("PUT", "/v1/admin/pause", `{"paused":true,"reason":"maintenance","by":"test"}`); code != 200 {
		t.Fatalf("pause: %d %v", code, out)
	}
	waitFor(t, "this process to see the switch", 10*time.Second, h.st.Infra.Pause.Paused)
	code, ct, out := do("POST", "/v1/sync", fmt.Sprintf(`{"puuid":%q,"platform":"na1"}`, p.PUUID))
	if code != http.StatusServiceUnavailable || ct != "application/problem+json" || out["status"] != float64(503) ||
		!strings.Contains(fmt.Sprint(out["detail"]), "maintenance") {
		t.Errorf("POST /v1/sync while paused: %d %s %v, want 503 problem+json naming the reason", code, ct, out)
	}
	if code, _, _ := do("GET", "/v1/jobs", ""); code != 200 {
		t.Errorf("GET /v1/jobs while paused: %d, want 200 (reads go on)", code)
	}
	p2 := synthPlayer(t, h, 2)
	publishReq(t, h, bus.IngestRequest{RequestID: "while-paused", PUUID: p2.PUUID, Platform: "na1", Mode: bus.ModeFull, LookbackDays: 30})
	// Give the services several pull rounds: nothing may start.
	time.Sleep(3 * time.Second)
	if n := h.count(`SELECT count(*) FROM jobs WHERE id = 'while-paused'`); n != 0 {
		t.Fatalf("a request published while paused was processed (%d jobs rows)", n)
	}
	if code, _, out := do("PUT", "/v1/admin/pause", `{"paused":false}`); code != 200 {
		t.Fatalf("resume: %d %v", code, out)
	}
	waitFor(t, "the request held by the pause to complete", 2*time.Minute, func() bool {
		return h.count(`SELECT count(*) FROM jobs WHERE id = 'while-paused' AND status = 'completed'`) == 1
	})

	// The database down: 503 problem+json from every route but the switch.
	url := pgtest.NewDatabase(t)
	down, err := store.Open(h.ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	down.Close()
	inf := *h.st.Infra
	inf.Store = down
	srvDown := httptest.NewServer(withToken(t, h.st.Infra, NewAPI(&inf).Handler(), ScopeAdmin))
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
