package streams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/natstest"
	"github.com/riftflow/riftflow/internal/testenv"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/natsx"
)

var quiet = slog.New(slog.DiscardHandler)

func startJS(t *testing.T) jetstream.JetStream {
	_, _, js := natstest.JetStream(t)
	return js
}

// loadSet is the declarations read with o (Load), or a test failure.
func loadSet(t testing.TB, o Options) *Set {
	t.Helper()
	set, err := Load(o)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// applied is a JetStream server with the default declarations applied.
func applied(t *testing.T) (jetstream.JetStream, *Set) {
	t.Helper()
	js := startJS(t)
	set := loadSet(t, Options{})
	if err := Apply(t.Context(), js, set, quiet); err != nil {
		t.Fatal(err)
	}
	return js, set
}

// snapshot captures the server's view of every declared object.
func snapshot(t *testing.T, js jetstream.JetStream, set *Set) map[string]any {
	t.Helper()
	ctx := t.Context()
	out := map[string]any{}
	for _, s := range set.Streams {
		st, err := js.Stream(ctx, s.Name)
		if err != nil {
			t.Fatalf("stream %s: %v", s.Name, err)
		}
		out["stream/"+s.Name] = []any{st.CachedInfo().Config, st.CachedInfo().Created}
	}
	for _, c := range set.Consumers {
		cons, err := js.Consumer(ctx, c.Stream, c.Config.Durable)
		if err != nil {
			t.Fatalf("consumer %s: %v", c.Config.Durable, err)
		}
		out["consumer/"+c.Config.Durable] = []any{cons.CachedInfo().Config, cons.CachedInfo().Created}
	}
	for _, b := range set.Buckets {
		kv, err := js.KeyValue(ctx, b.Bucket)
		if err != nil {
			t.Fatalf("bucket %s: %v", b.Bucket, err)
		}
		st, _ := kv.Status(ctx)
		out["bucket/"+b.Bucket] = []any{st.TTL(), st.History(), st.Config()}
	}
	return out
}

func TestApplyTwiceIsNoOp(t *testing.T) {
	js, set := applied(t)
	first := snapshot(t, js, set)
	if err := Apply(t.Context(), js, set, quiet); err != nil {
		t.Fatal(err)
	}
	if second := snapshot(t, js, set); !reflect.DeepEqual(first, second) {
		t.Fatalf("second Apply changed something:\nbefore %+v\nafter  %+v", first, second)
	}
}

func TestApplyConcurrently(t *testing.T) {
	js := startJS(t)
	set := loadSet(t, Options{})
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = Apply(t.Context(), js, set, quiet) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	snapshot(t, js, set)
}

func TestDeclaredSubjectsAreStored(t *testing.T) {
	for _, prefix := range []string{"", "rf.dev"} {
		t.Run("prefix="+prefix, func(t *testing.T) {
			js := startJS(t)
			set := loadSet(t, Options{Prefix: prefix})
			if err := Apply(t.Context(), js, set, quiet); err != nil {
				t.Fatal(err)
			}
			sub := bus.Subjects{Prefix: prefix}
			want := map[string]string{
				sub.IngestRequest():                   StreamIngest,
				sub.Sync("jp1"):                       StreamSync,
				sub.Fetch("asia"):                     StreamFetch,
				sub.FetchRetry("asia", "tok1"):        StreamFetch,
				sub.Fetched("europe"):                 StreamFetched,
				sub.Failed("sea"):                     StreamFetched,
				sub.Progress("puuid-1"):               StreamEvents,
				sub.IngestRejected():                  StreamEvents,
				sub.WeeklyReport():                    StreamEvents,
				sub.IngestQueued(sub.IngestRequest()): StreamEvents,
				"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.FETCH.match-fetcher-asia": StreamAdvisories,
				"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.FETCH.match-fetcher-asia": StreamAdvisories,
			}
			for subj, stream := range want {
				ack, err := js.Publish(t.Context(), subj, []byte("{}"))
				if err != nil {
					t.Errorf("publish %s: %v", subj, err)
					continue
				}
				if ack.Stream != stream {
					t.Errorf("%s stored in %s, want %s", subj, ack.Stream, stream)
				}
			}
		})
	}
}

func TestConsumersHaveDeclaredFilters(t *testing.T) {
	js := startJS(t)
	set := loadSet(t, Options{Regions: []string{"americas", "asia"}})
	if err := Apply(t.Context(), js, set, quiet); err != nil {
		t.Fatal(err)
	}
	sub := bus.Subjects{}
	want := []struct {
		stream, name string
		filters      []string
	}{
		{StreamIngest, ConsumerResolver, []string{sub.IngestFor(bus.Interactive)}},
		{StreamIngest, ConsumerResolverBackground, []string{sub.IngestFor(bus.Background)}},
		{StreamSync, ConsumerMatchIDLister, []string{"lol.sync.*"}},
		{StreamSync, ConsumerMatchIDListerInteractive, []string{"lol.sync.*.interactive"}},
		{StreamFetch, FetcherConsumer("americas"), []string{sub.Fetch("americas")}},
		{StreamFetch, FetcherConsumer("asia"), []string{sub.Fetch("asia")}},
		{StreamFetch, InteractiveFetcherConsumer("americas"), []string{sub.FetchFor("americas", bus.Interactive)}},
		{StreamFetch, InteractiveFetcherConsumer("asia"), []string{sub.FetchFor("asia", bus.Interactive)}},
		{StreamFetched, ConsumerPersister, []string{"lol.match.fetched.*", "lol.match.failed.*"}},
		{StreamFetched, ConsumerPersisterInteractive, []string{"lol.match.fetched.*.interactive", "lol.match.failed.*.interactive"}},
		{StreamAdvisories, ConsumerRetrySweeper, nil},
		{StreamEvents, ConsumerRetrySweeperRejections, []string{sub.IngestRejected()}},
		{StreamEvents, ConsumerRetrySweeperQueued, []string{sub.IngestQueuedAll()}},
	}
	if len(set.Consumers) != len(want) {
		t.Errorf("declared %d consumers, want %d", len(set.Consumers), len(want))
	}
	for _, w := range want {
		cons, err := js.Consumer(t.Context(), w.stream, w.name)
		if err != nil {
			t.Errorf("consumer %s on %s: %v", w.name, w.stream, err)
			continue
		}
		cfg := cons.CachedInfo().Config
		got := cfg.FilterSubjects
		if cfg.FilterSubject != "" {
			got = append([]string{cfg.FilterSubject}, got...)
		}
		if !slices.Equal(got, w.filters) {
			t.Errorf("%s filters %v, want %v", w.name, got, w.filters)
		}
		if cfg.AckPolicy != jetstream.AckExplicitPolicy || cfg.Durable != w.name || cfg.MaxDeliver <= 0 || cfg.AckWait < 30*time.Second {
			t.Errorf("%s: ack %v durable %q max_deliver %d ack_wait %s", w.name, cfg.AckPolicy, cfg.Durable, cfg.MaxDeliver, cfg.AckWait)
		}
	}
	// A fetcher sees its own region only.
	if _, err := js.Publish(t.Context(), sub.Fetch("asia"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	// The consumers' pending counts follow the publish asynchronously: poll
	// asia until it sees the message, then check americas.
	for _, c := range []struct {
		region string
		n      uint64
	}{{"asia", 1}, {"americas", 0}} {
		cons, _ := js.Consumer(t.Context(), StreamFetch, FetcherConsumer(c.region))
		var pending uint64
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			info, err := cons.Info(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if pending = info.NumPending; pending == c.n || time.Now().After(deadline) {
				break
			}
		}
		if pending != c.n {
			t.Errorf("%s pending %d, want %d", c.region, pending, c.n)
		}
	}
}

func TestBuckets(t *testing.T) {
	js, _ := applied(t)
	want := map[string]struct {
		ttl       time.Duration
		markerTTL bool
	}{
		BucketRiotIDs:   {24 * time.Hour, false},
		BucketSyncLocks: {0, true},
		BucketCursors:   {0, false},
		BucketRateLimit: {time.Hour, false},
		BucketCronLocks: {0, true},
	}
	for name, w := range want {
		kv, err := js.KeyValue(t.Context(), name)
		if err != nil {
			t.Errorf("bucket %s: %v", name, err)
			continue
		}
		st, _ := kv.Status(t.Context())
		if st.TTL() != w.ttl {
			t.Errorf("%s TTL %s, want %s", name, st.TTL(), w.ttl)
		}
		if w.markerTTL {
			// A per-key TTL only works with LimitMarkerTTL on the bucket.
			if _, err := kv.Create(t.Context(), "k", []byte("v"), jetstream.KeyTTL(time.Minute)); err != nil {
				t.Errorf("%s: create with KeyTTL: %v", name, err)
			}
		}
	}
}

func TestIncompatibleRetention(t *testing.T) {
	js := startJS(t)
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: StreamIngest, Subjects: []string{"lol.ingest.request"}}); err != nil {
		t.Fatal(err)
	}
	set, _ := Load(Options{})
	err := Apply(t.Context(), js, set, quiet)
	if !errors.Is(err, ErrIncompatible) {
		t.Fatalf("err = %v, want ErrIncompatible", err)
	}
}

func TestLoadRejectsBadPrefix(t *testing.T) {
	for _, p := range []string{"lol.>", "a b", "x.*", ".lol"} {
		if _, err := Load(Options{Prefix: p}); err == nil {
			t.Errorf("prefix %q accepted", p)
		}
	}
}

func TestApplyOnThreeNodeCluster(t *testing.T) {
	testenv.SkipShort(t, "cluster test")
	c := natstest.Cluster(t, 3)
	nc, err := natsx.Connect(t.Context(), natsx.ConnConfig{URL: joinURLs(c.URLs()), Name: "streams-test", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	js := natstest.Handle(t, nc)
	set := loadSet(t, Options{Replicas: 3, Regions: []string{"asia"}})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := Apply(ctx, js, set, quiet); err != nil {
		t.Fatal(err)
	}
	if err := Apply(ctx, js, set, quiet); err != nil {
		t.Fatalf("second apply: %v", err)
	}
	st, err := js.Stream(ctx, StreamFetch)
	if err != nil {
		t.Fatal(err)
	}
	if info := st.CachedInfo(); info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("FETCH replicas: config %d, cluster %+v", info.Config.Replicas, info.Cluster)
	}
	kv, err := js.KeyValue(ctx, BucketSyncLocks)
	if err != nil {
		t.Fatal(err)
	}
	lock := natsx.Lock{KV: kv, JS: js}
	rev, err := lock.Claim(ctx, "puuid-1", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Claim(ctx, "puuid-1", "b", time.Minute); !errors.Is(err, natsx.ErrLocked) {
		t.Fatalf("second claim on R3: %v", err)
	}
	if _, err := lock.Renew(ctx, "puuid-1", rev+5, []byte("a"), time.Minute); !errors.Is(err, natsx.ErrNotHolder) {
		t.Fatalf("stale renew on R3 (code 10164): %v", err)
	}
}

func joinURLs(u []string) string {
	s := u[0]
	for _, x := range u[1:] {
		s += "," + x
	}
	return s
}

// TestPriorityQueuesPerStage: at every stage an interactive and a
// background message land on two different consumers (each message on
// exactly one), and declarations from before the split (the resolver,
// lister and persister reading their whole stream) upgrade in place.
func TestPriorityQueuesPerStage(t *testing.T) {
	js := startJS(t)
	set := loadSet(t, Options{})
	// An earlier release's declarations: one consumer per stage over every
	// subject.
	old := map[string]jetstream.ConsumerConfig{
		ConsumerResolver:      {Durable: ConsumerResolver, AckPolicy: jetstream.AckExplicitPolicy},
		ConsumerMatchIDLister: {Durable: ConsumerMatchIDLister, AckPolicy: jetstream.AckExplicitPolicy},
		ConsumerPersister: {Durable: ConsumerPersister, AckPolicy: jetstream.AckExplicitPolicy,
			FilterSubjects: []string{"lol.match.fetched.>", "lol.match.failed.>"}},
	}
	for _, st := range set.Streams {
		if _, err := js.CreateStream(t.Context(), st); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range set.Consumers {
		if o, ok := old[c.Config.Durable]; ok {
			if _, err := js.CreateConsumer(t.Context(), c.Stream, o); err != nil {
				t.Fatalf("old %s: %v", o.Durable, err)
			}
		}
	}
	if err := Apply(t.Context(), js, set, quiet); err != nil {
		t.Fatalf("upgrade from the unsplit consumers: %v", err)
	}
	sub := bus.Subjects{}
	stages := []struct {
		stream                  string
		subject                 func(bus.Priority) string
		interactive, background string
	}{
		{StreamIngest, sub.IngestFor, ConsumerResolver, ConsumerResolverBackground},
		{StreamSync, func(p bus.Priority) string { return sub.SyncFor("jp1", p) }, ConsumerMatchIDListerInteractive, ConsumerMatchIDLister},
		{StreamFetch, func(p bus.Priority) string { return sub.FetchFor("asia", p) }, InteractiveFetcherConsumer("asia"), FetcherConsumer("asia")},
		{StreamFetched, func(p bus.Priority) string { return sub.FetchedFor("asia", p) }, ConsumerPersisterInteractive, ConsumerPersister},
		{StreamFetched, func(p bus.Priority) string { return sub.FailedFor("asia", p) }, ConsumerPersisterInteractive, ConsumerPersister},
	}
	for _, st := range stages {
		if st.subject(bus.Interactive) == st.subject(bus.Background) {
			t.Errorf("%s: one subject for both priorities", st.stream)
		}
		for _, p := range []bus.Priority{bus.Interactive, bus.Background} {
			before := pendingOf(t, js, st.stream, st.interactive) + pendingOf(t, js, st.stream, st.background)
			bi := pendingOf(t, js, st.stream, st.interactive)
			if _, err := js.Publish(t.Context(), st.subject(p), []byte("x")); err != nil {
				t.Fatalf("%s: %v", st.subject(p), err)
			}
			want := st.background
			if p == bus.Interactive {
				want = st.interactive
			}
			deadline := time.Now().Add(5 * time.Second)
			for pendingOf(t, js, st.stream, st.interactive)+pendingOf(t, js, st.stream, st.background) != before+1 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			grew := pendingOf(t, js, st.stream, st.interactive) - bi
			if (want == st.interactive) != (grew == 1) {
				t.Errorf("%s (%s) did not land on %s alone", st.subject(p), p, want)
			}
		}
	}
}

func pendingOf(t *testing.T, js jetstream.JetStream, stream, consumer string) uint64 {
	t.Helper()
	c, err := js.Consumer(t.Context(), stream, consumer)
	if err != nil {
		t.Fatalf("%s on %s: %v", consumer, stream, err)
	}
	info, err := c.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.NumPending
}

// Every request INGEST stores, on either priority's subject, is copied by
// JetStream onto IngestQueued, which EVENTS keeps, with its body, its own
// headers and where INGEST stored it; a duplicate INGEST drops is not
// copied. An INGEST declared before the republish gains it on Apply.
func TestIngestRequestsAreRepublished(t *testing.T) {
	js := startJS(t)
	set := loadSet(t, Options{})
	old := *set.Stream(StreamIngest)
	old.RePublish = nil
	if _, err := js.CreateStream(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	if err := Apply(t.Context(), js, set, quiet); err != nil {
		t.Fatal(err)
	}
	sub := bus.Subjects{}
	for i, subj := range []string{sub.IngestRequest(), sub.IngestFor(bus.Background), sub.IngestRequest()} {
		m := &nats.Msg{Subject: subj, Data: []byte(`{"puuid":"p"}`), Header: nats.Header{}}
		m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("ingest:%d", min(i, 1)))
		if _, err := js.PublishMsg(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	events, err := js.Stream(t.Context(), StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for seq := uint64(1); ; seq++ {
		m, err := events.GetMsg(t.Context(), seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject != sub.IngestQueued(m.Header.Get("Nats-Subject")) || string(m.Data) != `{"puuid":"p"}` || m.Header.Get("Nats-Stream") != StreamIngest {
			t.Errorf("copy %d: %s %s %v", seq, m.Subject, m.Data, m.Header)
		}
		got = append(got, m.Header.Get("Nats-Subject")+"#"+m.Header.Get("Nats-Sequence")+"/"+m.Header.Get(nats.MsgIdHdr))
	}
	want := []string{sub.IngestRequest() + "#1/ingest:0", sub.IngestFor(bus.Background) + "#2/ingest:1"}
	if !slices.Equal(got, want) {
		t.Errorf("EVENTS holds copies %v, want %v", got, want)
	}
}
