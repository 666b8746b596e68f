package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// staleKV answers a Get as a follower of an R3 bucket that has not applied
// the Put yet (direct gets may be served by any replica): key not found.
type staleKV struct{ jetstream.KeyValue }

func (staleKV) Put(context.Context, string, []byte) (uint64, error) { return 7, nil }
func (staleKV) Get(context.Context, string) (jetstream.KeyValueEntry, error) {
	return nil, jetstream.ErrKeyNotFound
}

// TestMeasureClockStaleRead: a read-back that does not see the write yet
// is no sample, not an error (the soak saw services exit at start on a
// fresh 3-node cluster with "ratelimit: server clock: nats: key not found").
func TestMeasureClockStaleRead(t *testing.T) {
	_, ok, err := measureClock(context.Background(), staleKV{}, "k.clock.p", time.Now)
	if err != nil || ok {
		t.Fatalf("measureClock on a stale replica: ok %t err %v, want no sample and no error", ok, err)
	}
}
