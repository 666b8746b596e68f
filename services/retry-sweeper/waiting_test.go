package retrysweeper_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/syncjob"
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

// TestRequestsPublishedOnNATSArePending (issue 26's point 4): requests
// published straight on INGEST, with no resolver running and the sweeper
// itself under a hold that never lifts (the pause switch), are pending
// jobs: one without a request id under the id the resolver gives it
// (bus.StoredRequestID of its time and sequence in INGEST), in its
// priority's queue; one by Riot ID without a PUUID, found by its Riot ID.
// A job the HTTP API recorded when it accepted its request is left as it
// is; a request refused before its copy was read stays rejected; a copy
// that is no valid request records nothing.
func TestRequestsPublishedOnNATSArePending(t *testing.T) {
	e := stagetest.New(t, stagetest.Options{DB: true})
	ctx, inf := t.Context(), stageInfra(e)
	queued := func() *retrysweeper.Service {
		cons, err := inf.JS.Consumer(ctx, streams.StreamEvents, streams.ConsumerRetrySweeperQueued)
		if err != nil {
			t.Fatal(err)
		}
		return sweeperWith(e, retrysweeper.Config{Interval: time.Hour}, retrysweeper.Deps{Queued: cons})
	}
	held := natsx.WithHold(context.Background(), func() bool { return true })
	run := func(s *retrysweeper.Service) {
		runCtx, stop := context.WithCancel(held)
		done := make(chan struct{})
		go func() { defer close(done); s.Run(runCtx) }()
		t.Cleanup(func() { stop(); <-done })
	}

	// Refused by the resolver, and the refusal read (HandleRejection),
	// before the request's copy is read: the refusal records the job.
	if ended, err := inf.Store.RejectQueued(ctx, "nats-refused", "no Riot account", 404); err != nil || !ended {
		t.Fatalf("refusal of a request with no job: %v %v", ended, err)
	}
	api := bus.IngestRequest{RequestID: "http-accepted", PUUID: "puuid-api", Platform: "euw1", Mode: bus.ModeFull, Trigger: "http",
		Priority: bus.Interactive, RequestedAt: time.Now().Add(-time.Minute).UTC()}
	if _, err := inf.Store.QueueSync(ctx, syncjob.Queued(api, api.PUUID)); err != nil {
		t.Fatal(err)
	}
	publish := func(subject string, data string) uint64 {
		t.Helper()
		ack, err := inf.JS.PublishMsg(ctx, natsMsg(subject, []byte(data), nil))
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	anon := publish(inf.Subjects.IngestFor(bus.Background), `{"puuid":"puuid-anon","count":20,"lookbackDays":30,"requestedBy":"bot","priority":"background"}`)
	publish(inf.Subjects.IngestRequest(), `{"request_id":"nats-riot","riot_id":"Queued One#EUW","mode":"full"}`)
	publish(inf.Subjects.IngestRequest(), `{"request_id":"nats-refused","riot_id":"Nobody#0000"}`)
	publish(inf.Subjects.IngestRequest(), `{"request_id":"http-accepted","puuid":"puuid-api","platform":"euw1","trigger":"nats"}`)
	publish(inf.Subjects.IngestRequest(), `{"request_id":"not-a-request","puuid":"x","mode":"sideways"}`)

	raw := ingestMsg(e, anon)
	anonID := bus.StoredRequestID(raw.Time, raw.Sequence)

	run(queued())
	e.Wait("the copies to be read", func() bool {
		c, err := inf.JS.Consumer(ctx, streams.StreamEvents, streams.ConsumerRetrySweeperQueued)
		return err == nil && c.CachedInfo().NumPending == 0 && c.CachedInfo().NumAckPending == 0 &&
			e.Count(`SELECT count(*) FROM jobs WHERE id IN ($1, 'nats-riot')`, anonID) == 2
	})
	jobs, err := inf.Store.Jobs(ctx, store.JobFilter{Type: "sync"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]store.Job{}
	for _, j := range jobs {
		got[j.ID] = j
	}
	if j := got[anonID]; j.Status != "pending" || j.PUUID != "puuid-anon" || j.Position != 1 || j.RequestedBy != "bot" ||
		j.RequestedAt.Sub(raw.Time).Abs() > time.Millisecond {
		t.Errorf("request without an id: %+v, want pending %s for puuid-anon, first in the background queue, requested when stored", j, anonID)
	}
	if j := got["nats-riot"]; j.Status != "pending" || j.PUUID != "" || j.Position != 2 {
		t.Errorf("request by Riot ID: %+v, want pending without a PUUID, second in the interactive queue", j)
	}
	if st, err := inf.Store.AccountByRiotID(ctx, "queued one", "euw"); err != nil || st.SyncStatus != "pending" || st.SyncRequestID != "nats-riot" {
		t.Errorf("account by the queued Riot ID: %+v %v, want pending nats-riot", st, err)
	}
	if j := got["http-accepted"]; j.Status != "pending" || j.Position != 1 || string(j.Detail) == "" ||
		j.RequestedAt.Sub(api.RequestedAt).Abs() > time.Millisecond {
		t.Errorf("job the API recorded: %+v, want it unchanged", j)
	}
	if d := string(got["http-accepted"].Detail); !strings.Contains(d, `"trigger": "http"`) {
		t.Errorf("job the API recorded: detail %s, want its trigger http kept", d)
	}
	if j := got["nats-refused"]; j.Status != "rejected" || j.Error != "no Riot account" {
		t.Errorf("request refused before its copy was read: %+v, want rejected", j)
	}
	if _, ok := got["not-a-request"]; ok || len(got) != 4 {
		t.Errorf("jobs %v, want 4 and none for an invalid request", got)
	}
}

// ingestMsg is the message INGEST stores at seq.
func ingestMsg(e *stagetest.Env, seq uint64) *jetstream.RawStreamMsg {
	e.T.Helper()
	st, err := stageInfra(e).JS.Stream(e.T.Context(), streams.StreamIngest)
	if err != nil {
		e.T.Fatal(err)
	}
	m, err := st.GetMsg(e.T.Context(), seq)
	if err != nil {
		e.T.Fatal(err)
	}
	return m
}
