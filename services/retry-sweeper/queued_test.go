package retrysweeper_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/syncjob"
	retrysweeper "github.com/riftflow/riftflow/services/retry-sweeper"
	"github.com/riftflow/riftflow/streams"
)

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

// infra is a stage test's process with its own store, as the tests here
// use them together.
type infra struct {
	*app.Process
	Store *store.Store
}

func stageInfra(e *stagetest.Env) infra { return infra{e.Process, e.Store} }
