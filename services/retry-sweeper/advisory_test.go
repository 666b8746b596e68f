package retrysweeper_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/store"
	retrysweeper "github.com/riftflow/riftflow/services/retry-sweeper"
	"github.com/riftflow/riftflow/streams"
)

// advisoryEnv is a sweeper bound to the ADVISORIES consumer and DEAD, and
// a way to hand it the MAX_DELIVERIES advisory of a work-queue message.
type advisoryEnv struct {
	e    *stagetest.Env
	s    *retrysweeper.Service
	cons jetstream.Consumer // retry-sweeper on ADVISORIES
}

func newAdvisoryEnv(t *testing.T) *advisoryEnv {
	e := stagetest.New(t, stagetest.Options{DB: true})
	inf := e.Process
	cons, err := inf.JS.Consumer(t.Context(), streams.StreamAdvisories, streams.ConsumerRetrySweeper)
	if err != nil {
		t.Fatal(err)
	}
	s := sweeperWith(e, retrysweeper.Config{}, retrysweeper.Deps{Advisories: cons, Dead: inf.DeadLetter()})
	return &advisoryEnv{e: e, s: s, cons: cons}
}

// exhaust stores data on subject in stream (as a message that ran out of
// deliveries on consumer) and publishes its MAX_DELIVERIES advisory; it
// returns the message's stream sequence.
func (a *advisoryEnv) exhaust(stream, consumer, subject string, data []byte, hdr map[string]string) uint64 {
	t, js := a.e.T, a.e.Process.JS
	ack, err := js.PublishMsg(t.Context(), natsMsg(subject, data, hdr))
	if err != nil {
		t.Fatal(err)
	}
	adv, _ := json.Marshal(map[string]any{"type": "io.nats.jetstream.advisory.v1.max_deliver", "stream": stream,
		"consumer": consumer, "stream_seq": ack.Sequence, "deliveries": 15})
	if _, err := js.Publish(t.Context(), fmt.Sprintf("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.%s.%s", stream, consumer), adv); err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// handle hands m to the sweeper as the runner of its consumer would.
func (a *advisoryEnv) handle(m jetstream.Msg) natsx.Result {
	return a.s.HandleAdvisory(a.e.T.Context(), natsx.NewDelivery(m, a.cons.CachedInfo().Config.MaxDeliver))
}

// next takes the next advisory delivery.
func (a *advisoryEnv) next() jetstream.Msg {
	t := a.e.T
	b, err := a.cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range b.Messages() {
		return m
	}
	t.Fatal("no advisory delivered")
	return nil
}

// still reports whether stream still holds the message seq.
func (a *advisoryEnv) still(stream string, seq uint64) bool {
	st, err := a.e.Process.JS.Stream(a.e.T.Context(), stream)
	if err != nil {
		a.e.T.Fatal(err)
	}
	_, err = st.GetMsg(a.e.T.Context(), seq)
	return err == nil
}

// dead returns the reasons of the dead letters in DEAD.
func (a *advisoryEnv) dead() []string {
	t := a.e.T
	st, err := a.e.Process.JS.Stream(t.Context(), streams.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(t.Context(), seq)
		if err == nil {
			out = append(out, m.Header.Get(natsx.DeadReasonHeader))
		}
	}
	return out
}

// A FetchResult whose Riot error text carries \u0000 exhausts its
// deliveries on FETCHED: Postgres refuses NUL in text (SQLSTATE 22021),
// and a failed ledger write would leave the message in FETCHED, where
// every sweep would report "persister behind". It is recorded with the
// NUL stripped, dead-lettered and removed.
func TestAdvisoryRecordsNULErrorText(t *testing.T) {
	a := newAdvisoryEnv(t)
	res := bus.FetchResult{MatchID: "NA1_8800", Kind: bus.KindMatch, Region: "americas", Outcome: bus.PermanentlyUnfetchable,
		Attempt: 2, Status: 400, Error: "400 Bad Request: bad\u0000 gateway"}
	data, hdr, err := bus.EncodeFetchResult(res)
	if err != nil {
		t.Fatal(err)
	}
	seq := a.exhaust(streams.StreamFetched, "persister", a.e.Process.Subjects.Failed("americas"), data, hdr)
	m := a.next()
	if r := a.handle(m); r.Err() != nil {
		t.Fatalf("advisory settled %v, want ack", r)
	}
	if a.still(streams.StreamFetched, seq) {
		t.Fatal("the exhausted FetchResult is still in FETCHED")
	}
	if n := a.e.Count(`SELECT count(*) FROM match_fetches WHERE match_id = 'NA1_8800' AND status = 'permanently_unfetchable'
  AND last_error LIKE '%bad gateway%'`); n != 1 {
		t.Fatalf("ledger rows recorded with the NUL stripped: %d", n)
	}
	if d := a.dead(); len(d) != 1 {
		t.Fatalf("dead letters %q, want 1", d)
	}
}

// A message whose ledger entry Postgres refuses for its data (here a
// check constraint the row violates: 23514, Invalid) can never be
// recorded: it is still dead-lettered with the reason and removed from its
// work queue.
func TestAdvisoryRemovesWhatCannotBeRecorded(t *testing.T) {
	a := newAdvisoryEnv(t)
	if _, err := a.e.DB.Exec(t.Context(), `ALTER TABLE match_fetches ADD CONSTRAINT refuse_8801 CHECK (match_id <> 'NA1_8801')`); err != nil {
		t.Fatal(err)
	}
	cmd, _ := json.Marshal(bus.FetchCommand{MatchID: "NA1_8801", Kind: bus.KindMatch, Region: "americas", Attempt: 2})
	seq := a.exhaust(streams.StreamFetch, streams.FetcherConsumer("americas"), a.e.Process.Subjects.Fetch("americas"), cmd, nil)
	if r := a.handle(a.next()); r.Err() != nil {
		t.Fatalf("advisory settled %v, want ack", r)
	}
	if a.still(streams.StreamFetch, seq) {
		t.Fatal("the exhausted FetchCommand is still in FETCH")
	}
	if d := a.dead(); len(d) != 1 || !strings.Contains(d[0], "not recorded in the ledger") {
		t.Fatalf("dead letters %q, want 1 saying it was not recorded", d)
	}
}

// While the ledger cannot be written for a reason that is not the data's
// (here its table is missing: 42P01, Transient) the advisory is retried,
// never given up into a stall: on its consumer's last delivery the
// exhausted message is dead-lettered and removed all the same. Before, the
// settle policy dead-lettered the advisory and the message stayed in FETCH
// until max_age (7 days).
func TestAdvisoryNeverLeavesTheMessageOnLastDelivery(t *testing.T) {
	a := newAdvisoryEnv(t)
	cmd, _ := json.Marshal(bus.FetchCommand{MatchID: "NA1_8802", Kind: bus.KindMatch, Region: "americas", Attempt: 1})
	seq := a.exhaust(streams.StreamFetch, streams.FetcherConsumer("americas"), a.e.Process.Subjects.Fetch("americas"), cmd, nil)
	if _, err := a.e.DB.Exec(t.Context(), `ALTER TABLE match_fetches RENAME TO match_fetches_away`); err != nil {
		t.Fatal(err)
	}
	info, err := a.cons.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= info.Config.MaxDeliver; i++ {
		m := a.next()
		r := a.handle(m)
		if i < info.Config.MaxDeliver {
			if r.Err() == nil {
				t.Fatalf("delivery %d settled ack while the ledger is away", i)
			}
			if err := m.Nak(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if r.Err() != nil {
			t.Fatalf("last delivery settled %v, want ack", r)
		}
	}
	if a.still(streams.StreamFetch, seq) {
		t.Fatal("the exhausted FetchCommand is still in FETCH after the advisory's last delivery")
	}
	if d := a.dead(); len(d) != 1 || !strings.Contains(d[0], "not recorded in the ledger") {
		t.Fatalf("dead letters %q", d)
	}
}

// natsMsg is a message on subject with data and the headers hdr (nil:
// none).
func natsMsg(subject string, data []byte, hdr map[string]string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = data
	for k, v := range hdr {
		m.Header.Set(k, v)
	}
	return m
}

// An ingest request and a sync command that exhaust their deliveries
// (the resolver or the lister kept failing) do not leave their pending
// jobs pending for ever: each job ends rejected (503, with the reason), a
// Rejection tells whoever follows the request, and the message is
// dead-lettered and removed as any other. A job that started already is
// left as it is.
func TestAdvisoryEndsExhaustedRequests(t *testing.T) {
	a := newAdvisoryEnv(t)
	ctx, inf := a.e.T.Context(), stageInfra(a.e)
	rejected := a.e.Subscribe(inf.Subjects.IngestRejected())
	if _, err := inf.Store.QueueSync(ctx, store.SyncRequest{RequestID: "sync-queued", PUUID: "puuid-2", Mode: "latest"}); err != nil {
		t.Fatal(err)
	}
	if err := inf.Store.RecordJob(ctx, store.Job{ID: "sync-started", Type: "sync", PUUID: "puuid-3", Status: "running", StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	ingestSeq := a.exhaust(streams.StreamIngest, streams.ConsumerResolver, inf.Subjects.IngestRequest(), []byte(`{"puuid":"puuid-1"}`), nil)
	raw := ingestMsg(a.e, ingestSeq)
	anon := bus.StoredRequestID(raw.Time, raw.Sequence)
	if _, err := inf.Store.QueueSync(ctx, store.SyncRequest{RequestID: anon, PUUID: "puuid-1", Mode: "latest"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"sync-queued", "sync-started"} {
		data, _ := json.Marshal(bus.SyncCommand{RequestID: id, PUUID: "p", Platform: "euw1", Region: "europe", Mode: bus.ModeLatest})
		a.exhaust(streams.StreamSync, streams.ConsumerMatchIDLister, inf.Subjects.Sync("euw1"), data, nil)
	}
	for range 3 {
		m := a.next()
		if r := a.handle(m); r.Err() != nil {
			t.Fatalf("advisory: %v", r)
		}
		m.Ack()
	}
	got := map[string]bus.Rejection{}
	for len(got) < 3 {
		r := stagetest.Decode[bus.Rejection](t, stagetest.Next(t, rejected, "the rejections of the exhausted requests"))
		got[r.RequestID] = r
	}
	for _, id := range []string{anon, "sync-queued"} {
		j, err := inf.Store.JobByID(ctx, id)
		if err != nil || j.Status != "rejected" || !strings.Contains(j.Error, "exhausted its deliveries") || got[id].Code != 503 {
			t.Errorf("job of exhausted request %s: %+v %v, rejection %+v; want rejected, 503", id, j, err, got[id])
		}
	}
	if j, err := inf.Store.JobByID(ctx, "sync-started"); err != nil || j.Status != "running" {
		t.Errorf("a started job was ended by its command's advisory: %+v %v", j, err)
	}
	if a.still(streams.StreamIngest, ingestSeq) || len(a.dead()) != 3 {
		t.Errorf("exhausted requests: still in INGEST %v, %d dead letters, want removed and 3", a.still(streams.StreamIngest, ingestSeq), len(a.dead()))
	}
}
