package matchfetcher

import (
	"context"
	"strconv"
	"time"

	"github.com/maypok86/otter/v2"
	"golang.org/x/sync/singleflight"

	"github.com/riftflow/riftflow/pkg/natsx"
)

// Redelivery of a command this process already holds.
//
// JetStream redelivers a FETCH message whose ack it did not record: the ack
// was lost with a connection, the server restarted before it stored it, or
// AckWait ran out while the handler waited. A redelivery that reaches the
// process that had the first delivery must not call Riot again:
//
//   - while the first delivery is still being handled, the redelivery
//     waits for it and is settled with its outcome (one Riot call);
//   - after the first delivery was handled to the end (its result or
//     schedule published: handle returned nil), the redelivery is acked
//     without a call, for RedeliveryMemory.
//
// A delivery is known by its FETCH stream sequence (natsx.Delivery.Sequence;
// 0, a message without JetStream metadata, is never matched). A sweeper
// re-publish or a new schedule is another message with another sequence and
// runs as usual. A redelivery that reaches another process is not covered
// here: the fetch ledger (holds.go) stops it once the persister has stored
// the first outcome.
const (
	// RedeliveryMemory is how long a handled FETCH sequence is remembered:
	// longer than a NATS outage the pipeline is built to ride out
	// (10 minutes) plus AckWait.
	RedeliveryMemory = time.Hour
	// redeliveryEntries bounds the memory: the oldest are forgotten first.
	redeliveryEntries = 200_000
)

// redeliveries is the per-process record of FETCH sequences in hand.
type redeliveries struct {
	inFlight singleflight.Group
	handled  *otter.Cache[uint64, struct{}]
}

func newRedeliveries() *redeliveries {
	return &redeliveries{handled: otter.Must(&otter.Options[uint64, struct{}]{
		MaximumSize:      redeliveryEntries,
		ExpiryCalculator: otter.ExpiryWriting[uint64, struct{}](RedeliveryMemory),
	})}
}

// do runs handle for d unless d is a redelivery of a sequence handled here:
// joined while in flight (same error), or nil, with why, once handled.
func (r *redeliveries) do(d natsx.Delivery, handle func() error) (why string, err error) {
	if d.Sequence == 0 {
		return "", handle()
	}
	if _, ok := r.handled.GetIfPresent(d.Sequence); ok {
		return "handled by this process already", nil
	}
	ran := false
	_, err, _ = r.inFlight.Do(strconv.FormatUint(d.Sequence, 10), func() (any, error) {
		ran = true
		err := handle()
		if err == nil {
			r.handled.Set(d.Sequence, struct{}{})
		}
		return nil, err
	})
	if !ran {
		why = "joined the delivery in flight in this process"
	}
	return why, err
}

// handleOnce is handle behind the redelivery record (above).
func (s *Service) handleOnce(ctx context.Context, d natsx.Delivery) error {
	why, err := s.redelivered.do(d, func() error { return s.handle(ctx, d) })
	if why != "" {
		s.d.Logger.InfoContext(ctx, "redelivered fetch command: no Riot call", "delivery", d.Num, "stream_seq", d.Sequence, "why", why)
	}
	return err
}
