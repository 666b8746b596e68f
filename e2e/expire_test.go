package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/services/riftflow/api"
	"github.com/riftflow/riftflow/services/riftflow/api/apitest"
	"github.com/riftflow/riftflow/services/riftflow/stack/stacktest"
	"github.com/riftflow/riftflow/streams"
)

// TestRequestExpiresVisiblyWhilePaused: with the pause switch held longer
// than INGEST keeps a message (its max_age shortened to 20 s here, the
// sweeper's margin to 18 s), a request published on NATS does not vanish:
// the retry-sweeper, which the switch does not hold, ends it before the
// stream would drop it, as a rejected job (503, "expired") and a
// Rejection, which ends `ingest --wait` and the SSE stream, also for a
// client that connects later. Resuming then runs nothing for it.
func TestRequestExpiresVisiblyWhilePaused(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{Env: map[string]string{"SCHEDULE_ENABLE": "false",
		"SWEEP_EXPIRE_EVERY": "200ms", "SWEEP_EXPIRE_MARGIN": "18s"}, Sim: sim.Options{Synthetic: sim.Synthetic{Players: 1, MatchesPerPlayer: 2}}})
	srv := stacktest.APIServer(t, h.St.Infra, api.ScopeAdmin)
	st, err := h.St.Infra.JS.Stream(h.Ctx, streams.StreamIngest)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxAge, cfg.Duplicates = 20*time.Second, 10*time.Second
	if _, err := h.St.Infra.JS.UpdateStream(h.Ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if code, _ := apitest.JSONCall(t, srv.URL, "PUT", "/v1/admin/pause", `{"paused":true,"reason":"maintenance","by":"test"}`, nil); code != 200 {
		t.Fatalf("pause: %d", code)
	}
	stacktest.WaitFor(t, "this process to see the switch", 10*time.Second, h.St.Infra.Pause.Paused)
	rejected, stop := capture(h, h.St.Infra.Subjects.IngestRejected())
	defer stop()
	p := stacktest.SynthPlayer(t, h, 1)
	publishReq(t, h, bus.IngestRequest{RequestID: "held-too-long", PUUID: p.PUUID, Platform: "na1", Mode: bus.ModeFull, LookbackDays: 30})

	var rej bus.Rejection
	stacktest.WaitFor(t, "the expired request's rejection", time.Minute, func() bool {
		for _, m := range rejected() {
			if json.Unmarshal(m.Data, &rej) == nil && rej.RequestID == "held-too-long" {
				return true
			}
		}
		return false
	})
	if rej.Code != 503 || !strings.HasPrefix(rej.Reason, "expired: waited") {
		t.Errorf("rejection %+v, want 503 expired", rej)
	}
	if n := h.Count(`SELECT count(*) FROM jobs WHERE id = 'held-too-long' AND status = 'rejected' AND error LIKE 'expired: waited%'`); n != 1 {
		t.Error("no rejected job with the reason for the expired request")
	}
	got := apitest.SSEEvents(t, srv.URL+"/v1/sync/held-too-long/events", "", 10*time.Second)
	var late bus.Rejection
	if len(got) != 1 || got[0][0] != "rejected" || json.Unmarshal([]byte(got[0][1]), &late) != nil || late.Code != 503 {
		t.Fatalf("events for the expired request: %v, want one rejected event with code 503", got)
	}
	if code, _ := apitest.JSONCall(t, srv.URL, "PUT", "/v1/admin/pause", `{"paused":false}`, nil); code != 200 {
		t.Fatalf("resume: %d", code)
	}
	// The resolver's pull that was open when the switch went on may hold
	// the request in memory and hand it on now: its sync must not begin.
	time.Sleep(2 * time.Second)
	if n := h.Count(`SELECT count(*) FROM jobs WHERE id = 'held-too-long' AND status <> 'rejected'`) +
		h.Count(`SELECT count(*) FROM accounts WHERE sync_request_id = 'held-too-long'`); n != 0 {
		t.Error("the expired request ran after the pause")
	}
}
