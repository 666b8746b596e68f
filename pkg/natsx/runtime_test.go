package natsx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/riftflow/riftflow/pkg/fault"
)

var quiet = slog.New(slog.DiscardHandler)

// wqConsumer makes a WorkQueue stream W on w.> and a durable consumer on it.
func wqConsumer(t *testing.T, js jetstream.JetStream, cc jetstream.ConsumerConfig) (jetstream.Stream, jetstream.Consumer) {
	t.Helper()
	ctx := t.Context()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "W", Subjects: []string{"w.>"}, Retention: jetstream.WorkQueuePolicy})
	if err != nil {
		t.Fatal(err)
	}
	cc.Durable = "c"
	cons, err := js.CreateOrUpdateConsumer(ctx, "W", cc)
	if err != nil {
		t.Fatal(err)
	}
	return st, cons
}

// await receives from ch or fails the test after a generous bound (a hang
// guard, not a timing assertion).
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("gave up waiting for %s", what)
		panic("unreachable")
	}
}

func TestConsumeSettlesEachMessageOnce(t *testing.T) {
	_, _, js := startJS(t)
	st, cons := wqConsumer(t, js, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 5})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	// The advisory proves Term reached the server with its reason.
	nc := js.Conn()
	terms, _ := nc.SubscribeSync("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.W.c")

	pctx, parent := otel.Tracer("test").Start(ctx, "ingest")
	for _, s := range []string{"w.ack", "w.nak", "w.term", "w.panic"} {
		if _, err := Publish(pctx, js, s, s); err != nil {
			t.Fatal(err)
		}
	}
	parent.End()

	type seen struct {
		subject   string
		delivered uint64
		traceID   trace.TraceID
	}
	got := make(chan seen, 16)
	h := func(ctx context.Context, d Delivery) Result {
		got <- seen{d.Subject, d.Num, trace.SpanContextFromContext(ctx).TraceID()}
		switch {
		case d.Subject == "w.nak" && d.Num == 1:
			return Retry(errors.New("try again"))
		case d.Subject == "w.term":
			return Fail(fault.Wrap(fault.Gone, errors.New("riot 404")))
		case d.Subject == "w.panic" && d.Num == 1:
			panic("boom")
		}
		return Ack()
	}
	done := make(chan error, 1)
	go func() {
		done <- Consume(ctx, cons, h, ConsumeOptions{Concurrency: 2, FetchWait: 500 * time.Millisecond, Settle: SettleOptions{Backoff: Backoff{Base: 50 * time.Millisecond}}, Logger: quiet})
	}()

	counts := map[string]uint64{}
	for range 6 { // ack 1 + nak 2 + term 1 + panic 2
		s := await(t, got, "deliveries")
		counts[s.subject] = max(counts[s.subject], s.delivered)
		if s.traceID != parent.SpanContext().TraceID() {
			t.Errorf("%s: handler ctx trace %s, want the publisher's %s", s.subject, s.traceID, parent.SpanContext().TraceID())
		}
	}
	want := map[string]uint64{"w.ack": 1, "w.nak": 2, "w.term": 1, "w.panic": 2}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("%s delivered %d times, want %d", k, counts[k], v)
		}
	}
	adv, err := terms.NextMsg(20 * time.Second)
	if err != nil {
		t.Fatalf("no terminated advisory: %v", err)
	}
	if !strings.Contains(string(adv.Data), `"reason":"riot 404"`) {
		t.Errorf("advisory %s lacks the reason", adv.Data)
	}
	cancel()
	if err := await(t, done, "Consume to return"); err != nil {
		t.Fatal(err)
	}
	// Every message was settled: the work queue is empty, nothing pending.
	waitEmpty(t, st)
	if ci, _ := cons.Info(t.Context()); ci.NumAckPending != 0 {
		t.Fatalf("ack pending %d, want 0", ci.NumAckPending)
	}
	select {
	case s := <-got:
		t.Fatalf("extra delivery %+v", s)
	default:
	}
	// The consumer span continues the publisher's trace.
	var consumerSpans int
	for _, s := range spans.Ended() {
		if s.SpanKind() == trace.SpanKindConsumer && s.SpanContext().TraceID() == parent.SpanContext().TraceID() {
			consumerSpans++
		}
	}
	if consumerSpans != 6 {
		t.Errorf("%d consumer spans in the trace, want 6", consumerSpans)
	}
}

func TestConsumeKeepsLongHandlersAlive(t *testing.T) {
	// every 200 ms as asked; every 5 s asked for, longer than AckWait:
	// kept at AckWait/3.
	for _, every := range []time.Duration{200 * time.Millisecond, 5 * time.Second} {
		t.Run(every.String(), func(t *testing.T) { keepsLongHandlerAlive(t, every) })
	}
}

func keepsLongHandlerAlive(t *testing.T, every time.Duration) {
	_, _, js := startJS(t)
	// AckWait 1s: without InProgress the message would be redelivered
	// while the handler still runs.
	_, cons := wqConsumer(t, js, jetstream.ConsumerConfig{AckWait: time.Second})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if _, err := js.Publish(ctx, "w.slow", nil); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	deliveries := 0
	finished := make(chan struct{})
	h := func(ctx context.Context, _ Delivery) Result {
		mu.Lock()
		deliveries++
		first := deliveries == 1
		mu.Unlock()
		if !first {
			return Ack()
		}
		time.Sleep(3 * time.Second) // three AckWaits
		close(finished)
		return Ack()
	}
	done := make(chan error, 1)
	go func() {
		done <- Consume(ctx, cons, h, ConsumeOptions{Concurrency: 2, InProgressEvery: every, FetchWait: 500 * time.Millisecond, Logger: quiet})
	}()
	await(t, finished, "handler")
	cancel()
	if err := await(t, done, "Consume"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if deliveries != 1 {
		t.Fatalf("delivered %d times, want 1", deliveries)
	}
}

func TestConsumeDrainsInFlightOnCancel(t *testing.T) {
	_, _, js := startJS(t)
	st, cons := wqConsumer(t, js, jetstream.ConsumerConfig{AckWait: 30 * time.Second})
	ctx, cancel := context.WithCancel(t.Context())
	if _, err := js.Publish(ctx, "w.one", nil); err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	var handlerCtxErr error
	h := func(hctx context.Context, _ Delivery) Result {
		close(started)
		<-release
		handlerCtxErr = hctx.Err()
		return Ack()
	}
	done := make(chan error, 1)
	go func() {
		done <- Consume(ctx, cons, h, ConsumeOptions{FetchWait: 500 * time.Millisecond, DrainTimeout: time.Minute, Logger: quiet})
	}()
	await(t, started, "handler start")
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Consume returned %v while a handler was in flight", err)
	default:
	}
	close(release)
	if err := await(t, done, "Consume"); err != nil {
		t.Fatal(err)
	}
	if handlerCtxErr != nil {
		t.Errorf("handler ctx cancelled within the drain budget: %v", handlerCtxErr)
	}
	if info, _ := st.Info(t.Context()); info.State.Msgs != 0 {
		t.Fatalf("in-flight message not acked: %d left", info.State.Msgs)
	}
}

func TestConsumeBatch(t *testing.T) {
	_, _, js := startJS(t)
	st, cons := wqConsumer(t, js, jetstream.ConsumerConfig{AckWait: 30 * time.Second})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for i := range 5 {
		if _, err := Publish(ctx, js, fmt.Sprintf("w.%d", i), i); err != nil {
			t.Fatal(err)
		}
	}
	batches := make(chan int, 8)
	var batchSpan trace.SpanContext
	h := func(ctx context.Context, ds []Delivery) []Result {
		batchSpan = trace.SpanContextFromContext(ctx)
		res := make([]Result, len(ds))
		for i, d := range ds {
			if d.Subject == "w.3" {
				res[i] = Rejectf("bad payload")
			}
		}
		batches <- len(ds)
		return res
	}
	done := make(chan error, 1)
	go func() {
		done <- ConsumeBatch(ctx, cons, h, BatchOptions{MaxBatch: 10, MaxWait: 500 * time.Millisecond, Logger: quiet})
	}()
	total := 0
	for total < 5 {
		total += await(t, batches, "batch")
	}
	cancel()
	if err := await(t, done, "ConsumeBatch"); err != nil {
		t.Fatal(err)
	}
	waitEmpty(t, st)
	var links int
	for _, s := range spans.Ended() {
		if s.SpanContext().SpanID() == batchSpan.SpanID() {
			links = len(s.Links())
		}
	}
	if links == 0 {
		t.Fatal("batch span has no links to the messages' spans")
	}
}

// waitEmpty polls until the work-queue stream holds no message: every
// message was acked or termed (acks are asynchronous; guarded, not timed).
func waitEmpty(t *testing.T, st jetstream.Stream) {
	t.Helper()
	var n uint64
	for range 200 {
		info, err := st.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if n = info.State.Msgs; n == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%d messages never settled", n)
}
