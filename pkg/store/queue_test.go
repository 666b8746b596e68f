package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/riftflow/riftflow/pkg/store"
)

// A queued sync is pending with its place in its priority's queue; the
// place moves up when the request ahead starts; a repeated request id is
// one job; a pending job refused ends rejected with its code, and a
// started one is not touched by a late refusal.
func TestQueueSyncPositions(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	t0 := time.Now().Add(-time.Minute)
	for i, q := range []store.SyncRequest{
		{RequestID: "a", PUUID: "p1", Mode: "latest", Priority: "interactive", RequestedAt: t0},
		{RequestID: "b", PUUID: "p2", Mode: "full", Priority: "background", RequestedAt: t0.Add(time.Second)},
		{RequestID: "c", RiotID: "Some One#EUW", Mode: "latest", Priority: "interactive", RequestedAt: t0.Add(2 * time.Second)},
		{RequestID: "a", PUUID: "p1", Mode: "latest", Priority: "interactive", RequestedAt: t0.Add(3 * time.Second)},
	} {
		created, err := s.QueueSync(ctx, q)
		if err != nil || created != (i < 3) {
			t.Fatalf("QueueSync %s: created %v, %v", q.RequestID, created, err)
		}
	}
	positions := func() map[string]int {
		jobs, err := s.Jobs(ctx, store.JobFilter{Type: "sync"})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, j := range jobs {
			out[j.ID+"/"+string(j.Status)] = j.Position
		}
		return out
	}
	if got := positions(); got["a/pending"] != 1 || got["b/pending"] != 1 || got["c/pending"] != 2 || len(got) != 3 {
		t.Errorf("positions %v, want a 1 and c 2 (interactive), b 1 (background)", got)
	}
	if _, err := s.BeginSync(ctx, store.SyncStart{RequestID: "a", PUUID: "p1", Platform: "euw1", Region: "europe", Mode: "latest"}); err != nil {
		t.Fatal(err)
	}
	if got := positions(); got["a/running"] != 0 || got["c/pending"] != 1 {
		t.Errorf("after a started: %v, want a running, c next", got)
	}
	if st, err := s.AccountByRiotID(ctx, "some one", "euw"); err != nil || st.SyncStatus != "pending" || st.SyncRequestID != "c" ||
		len(st.Queued) != 1 || st.Queued[0].Position != 1 {
		t.Errorf("account by Riot ID with a queued request: %+v, %v", st, err)
	}
	for _, id := range []string{"c", "a"} {
		ended, err := s.RejectQueued(ctx, id, "no Riot account", 404)
		if err != nil || ended != (id == "c") {
			t.Errorf("RejectQueued %s: %v %v, want ended only for the pending c", id, ended, err)
		}
	}
	if j, err := s.JobByID(ctx, "c"); err != nil || j.Status != "rejected" || j.Error != "no Riot account" || !j.FinishedAt.After(t0) {
		t.Errorf("refused queued job: %+v %v", j, err)
	}
	if _, err := s.AccountByRiotID(ctx, "Some One", "EUW"); err == nil {
		t.Error("an account with no row and nothing queued any more was found")
	}
	// A refusal read before the request's pending job was recorded: the
	// job is rejected, and the late QueueSync leaves it so.
	if ended, err := s.RejectQueued(ctx, "d", "no Riot account", 404); err != nil || !ended {
		t.Errorf("RejectQueued of a request with no job: %v %v, want recorded", ended, err)
	}
	if created, err := s.QueueSync(ctx, store.SyncRequest{RequestID: "d", RiotID: "No One#EUW", Mode: "latest"}); err != nil || created {
		t.Errorf("QueueSync after its refusal: created %v, %v", created, err)
	}
	if j, err := s.JobByID(ctx, "d"); err != nil || j.Status != "rejected" || j.Type != "sync" || string(j.Detail) != `{"code": 404}` {
		t.Errorf("job refused before it was queued: %+v %v, want rejected with code 404", j, err)
	}
}
