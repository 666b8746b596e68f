package matchfetcher

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BacklogPoll is how often the fetcher reads the FETCHED stream's size for
// its backpressure.
const BacklogPoll = 500 * time.Millisecond

// backlog is the fetcher's backpressure: results the persister has not
// stored yet wait in the FETCHED stream, and when they pass max bytes the
// background consumers pull no more fetch commands until they are back
// under half of it. Without it a fetcher faster than the persister (a
// backfill with a key of high limits, a dead-letter replay) would fill the
// stream without bound: gigabytes on the NATS server's disk, and NATS CPU
// spent writing them out and reading them back, while Riot's budget is
// spent on data that only waits. Interactive fetches are never held: they
// are few, and a user waits for them.
type backlog struct {
	stream jetstream.Stream
	max    uint64
	full   atomic.Bool
}

// Full reports whether the background consumers are held.
func (b *backlog) Full() bool { return b.full.Load() }

// run polls the stream every BacklogPoll until ctx ends. A failed read
// keeps the last state: the consumers' own pulls fail while NATS is away.
func (b *backlog) run(ctx context.Context, onChange func(full bool, bytes uint64)) {
	t := time.NewTicker(BacklogPoll)
	defer t.Stop()
	for {
		if info, err := b.stream.Info(ctx); err == nil {
			n := info.State.Bytes
			was := b.full.Load()
			now := was
			switch {
			case n >= b.max:
				now = true
			case n <= b.max/2:
				now = false
			}
			if now != was {
				b.full.Store(now)
				onChange(now, n)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
