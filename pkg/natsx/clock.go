package natsx

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Server-clock readings. A time the NATS server stamped (a stored
// message's Time, a KV entry's Created) is on the server's clock; this
// host's clock may be off from it by any amount, so the two are never
// compared directly: a stamped time becomes an age on the server's clock
// (StoredAge), or the host's clock is moved by its measured offset from the
// server's (ServerOffset), as the Riot rate limiter does (pkg/ratelimit).
// Both read the server's time from a stream info it gathered
// (jetstream.StreamInfo.TimeStamp), which needs only read access to the
// stream's info.

// StoredAge is the age, on the NATS server's clock, of a message the server
// stored at stored, as of when it gathered info (the info of the stream
// holding the message, read before or after the message): info.TimeStamp
// minus stored, at least 0. Without a TimeStamp (a server older than 2.10)
// it falls back to this host's clock.
func StoredAge(info *jetstream.StreamInfo, stored time.Time) time.Duration {
	now := time.Now()
	if info != nil && !info.TimeStamp.IsZero() {
		now = info.TimeStamp
	}
	return max(now.Sub(stored), 0)
}

// ServerOffset measures how far the NATS server's clock is ahead of host
// (negative: behind) from one status read of kv's bucket: the server's
// stamp on the stream info minus the middle of the round trip on host. Its
// error is at most half the round trip. host nil means time.Now. Errors
// are the status read's (bound to ctx), or ErrNoServerTime when the server
// stamps no time.
func ServerOffset(ctx context.Context, kv jetstream.KeyValue, host func() time.Time) (time.Duration, error) {
	if host == nil {
		host = time.Now
	}
	t1 := host()
	st, err := kv.Status(ctx)
	t2 := host()
	if err != nil {
		return 0, err
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil || bs.StreamInfo().TimeStamp.IsZero() {
		return 0, ErrNoServerTime
	}
	return bs.StreamInfo().TimeStamp.Sub(t1.Add(t2.Sub(t1) / 2)), nil
}

// ErrNoServerTime is ServerOffset's error when the server's stream info
// carries no time stamp (nats-server older than 2.10).
var ErrNoServerTime = errors.New("natsx: the NATS server stamps no time on stream info")
