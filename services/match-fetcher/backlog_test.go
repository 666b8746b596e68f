package matchfetcher

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/natstest"
)

// TestBacklogHoldsAndReleases: the hold goes on when the stream reaches max
// bytes and off only once it is back under half (hysteresis), each change
// reported once.
func TestBacklogHoldsAndReleases(t *testing.T) {
	_, _, js := natstest.JetStream(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R", Subjects: []string{"r.>"}, Retention: jetstream.WorkQueuePolicy})
	if err != nil {
		t.Fatal(err)
	}
	b := &backlog{stream: st, max: 100 << 10}
	var mu sync.Mutex
	var changes []bool
	done := make(chan struct{})
	go func() {
		b.run(ctx, func(full bool, _ uint64) { mu.Lock(); changes = append(changes, full); mu.Unlock() })
		close(done)
	}()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("gave up waiting for %s", what)
			}
		}
	}
	payload := make([]byte, 10<<10)
	publish := func(n int) {
		for range n {
			if _, err := js.Publish(ctx, "r.x", payload); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(5) // ~50 KiB: under max
	time.Sleep(3 * BacklogPoll)
	if b.Full() {
		t.Fatal("held under max")
	}
	publish(6) // ~110 KiB: over max
	waitFor("the hold", b.Full)
	// Down to ~70 KiB: under max, over half: still held.
	c, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "p", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	ack := func(n int) {
		batch, err := c.Fetch(n)
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	ack(4)
	time.Sleep(3 * BacklogPoll)
	if !b.Full() {
		t.Fatal("released over half of max")
	}
	ack(4) // ~30 KiB: under half
	waitFor("the release", func() bool { return !b.Full() })
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(changes) != 2 || !changes[0] || changes[1] {
		t.Fatalf("changes reported %v, want [true false]", changes)
	}
}
