package matchfetcher

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/riot"
)

// matchCalls is Riot serving getMatch: each call waits for gate (when set)
// and counts.
type matchCalls struct {
	calls atomic.Int32
	gate  chan struct{}
}

func (r *matchCalls) MatchBody(ctx context.Context, _ riot.Region, id string) (riot.Body, error) {
	r.calls.Add(1)
	if r.gate != nil {
		select {
		case <-r.gate:
		case <-ctx.Done():
			return riot.Body{}, ctx.Err()
		}
	}
	return riot.Body{Gzip: []byte{0x1f, 0x8b}, Size: 2, MatchID: id, GameCreationMs: now.Add(-time.Hour).UnixMilli()}, nil
}

func (r *matchCalls) TimelineBody(context.Context, riot.Region, string) (riot.Body, error) {
	return riot.Body{}, errors.New("getTimeline not expected")
}

// lockedJS is recordingJS safe for concurrent handlers; failing makes
// every publish fail.
type lockedJS struct {
	jetstream.JetStream
	mu      sync.Mutex
	results int
	failing bool
}

func (j *lockedJS) PublishMsg(_ context.Context, m *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.failing {
		return nil, errors.New("nats: no responders")
	}
	if strings.Contains(m.Subject, ".fetched.") {
		j.results++
	}
	return &jetstream.PubAck{Stream: "TEST"}, nil
}
