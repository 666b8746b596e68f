package lister

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

func TestRetryBackoffDoublesPerDelivery(t *testing.T) {
	base := 5 * time.Second
	for n, want := range map[uint64]time.Duration{
		0: base, 1: base, 2: 10 * time.Second, 3: 20 * time.Second, 5: 80 * time.Second,
		7: 5 * time.Minute, 64: 5 * time.Minute, 1 << 40: 5 * time.Minute,
	} {
		if got := retryBackoff(base, deliveredMsg{n: n}); got != want {
			t.Errorf("delivery %d: %v, want %v", n, got, want)
		}
	}
	if got := retryBackoff(base, nil); got != base {
		t.Errorf("no message: %v, want %v", got, base)
	}
}
