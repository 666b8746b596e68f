package retrysweeper_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/store"
	retrysweeper "github.com/riftflow/riftflow/services/retry-sweeper"
	"github.com/riftflow/riftflow/streams"
)

// TestWaitingRequestsExpireVisibly: with nothing consuming INGEST and SYNC
// (the pause switch held, or their services down), an ingest request and
// a sync command (whose job is already pending) that wait until their
// stream would drop them do not vanish: each ends as a rejected job with
// the reason, a 503 Rejection for its followers, and leaves the stream. The
// streams' max_age is shortened for the test (20 s) and the margin set so
// that a request expires once a second old; a request still within its
// time is left waiting.
func TestWaitingRequestsExpireVisibly(t *testing.T) {
	e := stagetest.New(t, stagetest.Options{DB: true})
	ctx, inf := t.Context(), e.Process
	const maxAge = 20 * time.Second
	for _, name := range []string{streams.StreamIngest, streams.StreamSync} {
		st, err := inf.JS.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		cfg.MaxAge, cfg.Duplicates = maxAge, maxAge/2
		if _, err := inf.JS.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	rejected := e.Subscribe(inf.Subjects.IngestRejected())
	if err := e.Store.RecordJob(ctx, store.Job{ID: "queued-sync", Type: "sync", PUUID: "puuid-queued", Status: "pending"}); err != nil {
		t.Fatal(err)
	}
	e.Publish(inf.Subjects.IngestFor(bus.Interactive), bus.IngestRequest{RequestID: "waiting-ingest", RiotID: "Someone#EUW", Platform: "euw1",
		Mode: bus.ModeLatest, RequestedAt: time.Now()})
	e.Publish(inf.Subjects.SyncFor("euw1", bus.Background), bus.SyncCommand{RequestID: "queued-sync", PUUID: "puuid-queued", Platform: "euw1",
		Region: "europe", Mode: bus.ModeFull, Count: 10, Priority: bus.Background, Requested: time.Now()})

	s := newExpiringSweeper(e, retrysweeper.Config{ExpireEvery: 100 * time.Millisecond, ExpireMargin: maxAge - time.Second})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); s.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	got := map[string]bus.Rejection{}
	for len(got) < 2 {
		r := stagetest.Decode[bus.Rejection](t, stagetest.Next(t, rejected, "the rejections of the expired requests"))
		got[r.RequestID] = r
	}
	for _, id := range []string{"waiting-ingest", "queued-sync"} {
		r := got[id]
		if r.Code != 503 || !strings.HasPrefix(r.Reason, "expired: waited") {
			t.Errorf("rejection of %s: %+v, want 503 expired", id, r)
		}
		j, err := e.Store.JobByID(ctx, id)
		if err != nil {
			t.Fatalf("job of %s: %v", id, err)
		}
		if j.Status != "rejected" || !strings.HasPrefix(j.Error, "expired: waited") || j.FinishedAt.IsZero() {
			t.Errorf("job of %s: %s %q finished %v, want rejected, expired", id, j.Status, j.Error, j.FinishedAt)
		}
	}
	if j, _ := e.Store.JobByID(ctx, "queued-sync"); j.PUUID != "puuid-queued" {
		t.Errorf("pending job's puuid became %q", j.PUUID)
	}
	for _, name := range []string{streams.StreamIngest, streams.StreamSync} {
		e.Wait(name+" emptied of the expired requests", func() bool {
			st, err := inf.JS.Stream(ctx, name)
			return err == nil && st.CachedInfo().State.Msgs == 0
		})
	}
}

// newExpiringSweeper is a sweeper on e's NATS and database with cfg,
// whose hourly sweep never comes round in a test.
func newExpiringSweeper(e *stagetest.Env, cfg retrysweeper.Config) *retrysweeper.Service {
	cfg.Interval = time.Hour
	return newSweeper(e, cfg, nil)
}
