package matchfetcher

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/natsx"
)

func redeliveryFetcher(t *testing.T, r Matches, js jetstream.JetStream) *Service {
	t.Helper()
	s, err := New(Config{PublishPatience: time.Millisecond}, Deps{JS: js, Consumers: map[string]jetstream.Consumer{"americas": nil}, Riot: r,
		Base: app.Base{Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func fetchData(t *testing.T, id string) []byte {
	t.Helper()
	data, err := json.Marshal(bus.FetchCommand{MatchID: id, Kind: bus.KindMatch, Region: "americas", Attempt: 1, Priority: bus.Background})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// A FETCH message redelivered after its first delivery was handled (the
// ack lost with a NATS restart) is acked without a second getMatch; another
// message for the same match (a sweeper re-publish: another sequence) is
// fetched as usual.
func TestRedeliveryAfterHandledCallsRiotOnce(t *testing.T) {
	r, js := &matchCalls{}, &lockedJS{}
	s := redeliveryFetcher(t, r, js)
	data := fetchData(t, "NA1_7001")
	for num := uint64(1); num <= 3; num++ {
		if res := s.Handle(t.Context(), natsx.Delivery{Data: data, Num: num, Sequence: 812}); res.Err() != nil {
			t.Fatalf("delivery %d: %v", num, res)
		}
	}
	if got := r.calls.Load(); got != 1 {
		t.Fatalf("3 deliveries of one message: %d getMatch calls, want 1", got)
	}
	if js.results != 1 {
		t.Fatalf("%d results published, want 1", js.results)
	}
	if res := s.Handle(t.Context(), natsx.Delivery{Data: data, Num: 1, Sequence: 900}); res.Err() != nil {
		t.Fatal(res)
	}
	if got := r.calls.Load(); got != 2 {
		t.Fatalf("a new message for the match: %d getMatch calls in all, want 2", got)
	}
}

// A redelivery that arrives while the first delivery is still waiting on
// Riot joins it: one call, both settled with its outcome.
func TestRedeliveryWhileInFlightJoins(t *testing.T) {
	r, js := &matchCalls{gate: make(chan struct{})}, &lockedJS{}
	s := redeliveryFetcher(t, r, js)
	data := fetchData(t, "NA1_7002")
	results := make(chan natsx.Result, 2)
	go func() { results <- s.Handle(t.Context(), natsx.Delivery{Data: data, Num: 1, Sequence: 5}) }()
	for r.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	go func() { results <- s.Handle(t.Context(), natsx.Delivery{Data: data, Num: 2, Sequence: 5}) }()
	time.Sleep(50 * time.Millisecond) // the redelivery reaches the in-flight record
	close(r.gate)
	for range 2 {
		if res := <-results; res.Err() != nil {
			t.Fatal(res)
		}
	}
	if got := r.calls.Load(); got != 1 {
		t.Fatalf("a redelivery during the first delivery's call: %d getMatch calls, want 1", got)
	}
}

// A delivery whose handling failed (its result could not be published) is
// not remembered: the redelivery fetches again, since nothing holds the
// payload any more.
func TestRedeliveryAfterFailureFetchesAgain(t *testing.T) {
	r, js := &matchCalls{}, &lockedJS{failing: true}
	s := redeliveryFetcher(t, r, js)
	data := fetchData(t, "NA1_7003")
	if res := s.Handle(t.Context(), natsx.Delivery{Data: data, Num: 1, Sequence: 9}); res.Err() == nil {
		t.Fatal("a result that could not be published settled as done")
	}
	js.mu.Lock()
	js.failing = false
	js.mu.Unlock()
	if res := s.Handle(t.Context(), natsx.Delivery{Data: data, Num: 2, Sequence: 9}); res.Err() != nil {
		t.Fatal(res)
	}
	if got := r.calls.Load(); got != 2 {
		t.Fatalf("redelivery after a failed delivery: %d getMatch calls, want 2", got)
	}
}
