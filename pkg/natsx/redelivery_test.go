package natsx

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// deliveredMsg is a jetstream.Msg whose only working method is Metadata.
type deliveredMsg struct {
	jetstream.Msg
	n uint64
}

func (m deliveredMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{NumDelivered: m.n}, nil
}

func TestDeliveryBackoffDoubles(t *testing.T) {
	base := 5 * time.Second
	for n, want := range map[uint64]time.Duration{
		0: base, 1: base, 2: 10 * time.Second, 3: 20 * time.Second, 5: 80 * time.Second,
		7: 5 * time.Minute, 64: 5 * time.Minute, 1 << 40: 5 * time.Minute,
	} {
		if got := DeliveryBackoff(base, 5*time.Minute, deliveredMsg{n: n}); got != want {
			t.Errorf("delivery %d: %v, want %v", n, got, want)
		}
	}
	if got := DeliveryBackoff(base, 5*time.Minute, nil); got != base {
		t.Errorf("no message: %v, want %v", got, base)
	}
}

func TestLastDelivery(t *testing.T) {
	for _, tc := range []struct {
		n          uint64
		maxDeliver int
		want       bool
	}{{1, 5, false}, {4, 5, false}, {5, 5, true}, {6, 5, true}, {1, 1, true}, {9, 0, false}, {9, -1, false}} {
		if got := LastDelivery(deliveredMsg{n: tc.n}, tc.maxDeliver); got != tc.want {
			t.Errorf("delivery %d of max %d: %v, want %v", tc.n, tc.maxDeliver, got, tc.want)
		}
	}
	if LastDelivery(nil, 5) {
		t.Error("a message without metadata is on its first delivery")
	}
}

// namedConsumer is a jetstream.Consumer whose only working method is
// CachedInfo.
type namedConsumer struct {
	jetstream.Consumer
	name       string
	maxDeliver int
}

func (c namedConsumer) CachedInfo() *jetstream.ConsumerInfo {
	return &jetstream.ConsumerInfo{Name: c.name, Config: jetstream.ConsumerConfig{MaxDeliver: c.maxDeliver}}
}

type fromConsumer struct {
	jetstream.Msg
	consumer string
	n        uint64
}

func (m fromConsumer) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Consumer: m.consumer, NumDelivered: m.n}, nil
}

// TestDeliveredBy: a stage reading two queues finds the consumer that
// delivered a message by name, so the last-delivery check uses that
// consumer's MaxDeliver; without a match, the first non-nil one.
func TestDeliveredBy(t *testing.T) {
	bg := namedConsumer{name: "lister", maxDeliver: 10}
	in := namedConsumer{name: "lister-interactive", maxDeliver: 3}
	m := fromConsumer{consumer: "lister-interactive", n: 3}
	if got := DeliveredBy(m, bg, in); got != in {
		t.Errorf("DeliveredBy = %v, want the interactive consumer", got)
	}
	if !IsLastDelivery(DeliveredBy(m, bg, in), m) {
		t.Error("delivery 3 of the interactive consumer's 3 is its last")
	}
	if got := DeliveredBy(fromConsumer{consumer: "other"}, nil, bg, in); got != bg {
		t.Errorf("no match: %v, want the first non-nil consumer", got)
	}
	if got := DeliveredBy(nil, nil, in); got != in {
		t.Errorf("no message: %v, want the first non-nil consumer", got)
	}
	if DeliveredBy(m) != nil || DeliveredBy(m, nil) != nil {
		t.Error("no consumer: want nil")
	}
}
