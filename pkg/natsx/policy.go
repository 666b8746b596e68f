package natsx

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/fault"
)

// The settle policy: how every consumer of riftflow settles a message from
// its handler's Result. It is the only place that chooses between Ack,
// NakWithDelay and Term.
//
//   - Ack(): done; Msg.Ack.
//   - Fail(err) with a Transient err: NakWithDelay(Backoff.Delay(n)) for the
//     n-th delivery: capped exponential backoff with jitter. While a
//     consumer has a Probe (a health check of its dependency), a Transient
//     failure also pauses the consumer until the probe passes, so a long
//     outage spends no further deliveries.
//   - Fail(err) with a RateLimited err: as Transient, but never before the
//     err's RetryAt (fault.RetryAt), without pausing.
//   - Fail(err) with an Invalid err: the message is copied to the dead-letter
//     stream with the reason, then terminated (Msg.TermWithReason).
//   - Fail(err) with a Gone err: terminated (the handler has recorded the
//     gone resource; nothing is left to retry).
//   - A retryable failure on the consumer's last delivery (MaxDeliver) is
//     dead-lettered and terminated instead of naked, so no message ever
//     disappears into a MAX_DELIVERIES advisory.
//   - A panic in a handler is Fail(Transient) for that message alone.
//
// Dead-lettered messages keep their payload and headers, plus the Dead*
// headers below; `riftflow retry --dead` republishes them to their
// original subject.

// Backoff is the retry schedule of the settle policy.
type Backoff struct {
	// Base is the delay after the first delivery; default 1 s.
	Base time.Duration
	// Max caps the delay; default 5 min.
	Max time.Duration
	// Jitter spreads each delay by ±Jitter·delay (0..1), so that replicas
	// and messages that failed together do not come back together;
	// default 0.2.
	Jitter float64
}

// DefaultBackoff is 1 s, 2 s, 4 s … capped at 5 min, ±20 %. With a
// MaxDeliver of 12 a message survives about 30 minutes of failures.
var DefaultBackoff = Backoff{Base: time.Second, Max: 5 * time.Minute, Jitter: 0.2}

func (b Backoff) withDefaults() Backoff {
	if b.Base <= 0 {
		b.Base = DefaultBackoff.Base
	}
	if b.Max <= 0 {
		b.Max = DefaultBackoff.Max
	}
	if b.Jitter < 0 || b.Jitter > 1 {
		b.Jitter = DefaultBackoff.Jitter
	}
	return b
}

// Delay is the wait before the delivery after the n-th (n ≥ 1):
// Base·2^(n−1), capped at Max, then spread by ±Jitter.
func (b Backoff) Delay(n uint64) time.Duration {
	b = b.withDefaults()
	d := b.Base
	for i := uint64(1); i < n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	if b.Jitter > 0 {
		d = time.Duration(float64(d) * (1 + b.Jitter*(2*rand.Float64()-1)))
	}
	return d
}

// Result is a handler's verdict on one message: Ack, or the error that
// kept it from being done. The runner turns it into exactly one of
// Msg.Ack, Msg.NakWithDelay or Msg.TermWithReason, by the settle policy
// above. The zero Result is Ack.
type Result struct {
	err error
}

// Ack settles the message as done; on a WorkQueue stream it is removed.
func Ack() Result { return Result{} }

// Fail settles the message by err's kind (fault.KindOf): Transient and
// RateLimited are retried, Invalid is dead-lettered, Gone is terminated.
// An unclassified err is Transient. Fail(nil) is Ack.
func Fail(err error) Result { return Result{err: err} }

// Retry is Fail(err) classified Transient.
func Retry(err error) Result { return Fail(fault.Wrap(fault.Transient, err)) }

// RetryAt is Fail(err) classified RateLimited until t: the message comes
// back no earlier than t (a Riot Retry-After, a breaker's reopening).
func RetryAt(err error, t time.Time) Result { return Fail(fault.RetryAt(err, t)) }

// RetryIn is RetryAt(err, now+d) on the runner's clock: for a delay
// computed on another clock (an injected one), which must not be compared
// with the runner's time.
func RetryIn(err error, d time.Duration) Result { return RetryAt(err, time.Now().Add(d)) }

// Reject is Fail(err) classified Invalid: the message is dead-lettered with
// err as the reason and never retried.
func Reject(err error) Result { return Fail(fault.Wrap(fault.Invalid, err)) }

// Rejectf is Reject(fmt.Errorf(format, args...)).
func Rejectf(format string, args ...any) Result { return Reject(fmt.Errorf(format, args...)) }

// Err is the failure the Result carries (nil for Ack).
func (r Result) Err() error { return r.err }

// Kind is the failure's kind (meaningless for Ack).
func (r Result) Kind() fault.Kind { return fault.KindOf(r.err) }

// String is "ack" or "<kind>: <error>".
func (r Result) String() string {
	if r.err == nil {
		return "ack"
	}
	return r.Kind().String() + ": " + r.err.Error()
}

// Headers of a dead-lettered message (besides the original ones).
const (
	// deadHeaderPrefix starts every header below.
	deadHeaderPrefix     = "Riftflow-Dead-"
	DeadSubjectHeader    = "Riftflow-Dead-Subject"    // the subject it was published on
	DeadStreamHeader     = "Riftflow-Dead-Stream"     // the stream it came from
	DeadConsumerHeader   = "Riftflow-Dead-Consumer"   // the consumer that gave up on it
	DeadSequenceHeader   = "Riftflow-Dead-Sequence"   // its stream sequence there
	DeadDeliveriesHeader = "Riftflow-Dead-Deliveries" // its delivery count when it was given up
	DeadKindHeader       = "Riftflow-Dead-Kind"       // fault kind: invalid, transient, rate_limited
	DeadReasonHeader     = "Riftflow-Dead-Reason"     // why it was given up
	DeadAtHeader         = "Riftflow-Dead-At"         // RFC 3339 time it was given up (the consumer's clock)
)

// DeadLetter publishes messages that will not be retried to the dead-letter
// stream, on Prefix + "." + <stream name> (e.g. "lol.dead.FETCHED").
type DeadLetter struct {
	JS     jetstream.JetStream
	Prefix string // e.g. "lol.dead"
}

// DeadInfo describes a message being dead-lettered.
type DeadInfo struct {
	Subject    string
	Header     nats.Header
	Data       []byte
	Stream     string
	Consumer   string
	Sequence   uint64
	Deliveries uint64
	Kind       fault.Kind
	Reason     string
}

// Publish stores one dead letter, with Nats-Msg-Id "<stream>.<sequence>" so
// that a retried publish is stored once. Original headers are kept, except
// Nats-Msg-Id and message-schedule headers.
func (d *DeadLetter) Publish(ctx context.Context, in DeadInfo) error {
	if d == nil || d.JS == nil {
		return fmt.Errorf("natsx: no dead-letter stream configured")
	}
	h := nats.Header{}
	for k, v := range in.Header {
		switch k {
		case jetstream.MsgIDHeader, "Nats-Schedule", "Nats-Schedule-Target", "Nats-Schedule-TTL", "Nats-TTL":
			continue
		}
		h[k] = append([]string(nil), v...)
	}
	h.Set(DeadSubjectHeader, in.Subject)
	h.Set(DeadStreamHeader, in.Stream)
	h.Set(DeadConsumerHeader, in.Consumer)
	h.Set(DeadSequenceHeader, strconv.FormatUint(in.Sequence, 10))
	h.Set(DeadDeliveriesHeader, strconv.FormatUint(in.Deliveries, 10))
	h.Set(DeadKindHeader, in.Kind.String())
	h.Set(DeadReasonHeader, truncate(in.Reason, 1000))
	h.Set(DeadAtHeader, time.Now().UTC().Format(time.RFC3339Nano))
	stream := in.Stream
	if stream == "" {
		stream = "UNKNOWN"
	}
	msg := &nats.Msg{Subject: d.Prefix + "." + stream, Header: h, Data: in.Data}
	_, err := d.JS.PublishMsg(ctx, msg, jetstream.WithMsgID(stream+"."+strconv.FormatUint(in.Sequence, 10)))
	if err != nil {
		return fmt.Errorf("natsx: dead-letter %s: %w", in.Subject, err)
	}
	return nil
}

// settlement is what the policy decided for one message.
type settlement struct {
	action resultKind
	delay  time.Duration
	reason string
	dead   bool // copy to the dead-letter stream before terminating
	pause  bool // a Transient failure: probe the dependency before pulling more
}

// decide applies the settle policy to res for a message on its delivered-th
// delivery, with the consumer's maxDeliver (0 or less: unlimited).
func decide(res Result, delivered uint64, maxDeliver int, b Backoff, now time.Time) settlement {
	if res.err == nil {
		return settlement{action: kindAck}
	}
	kind := fault.KindOf(res.err)
	reason := res.err.Error()
	switch kind {
	case fault.Invalid:
		return settlement{action: kindTerm, reason: reason, dead: true}
	case fault.Gone:
		return settlement{action: kindTerm, reason: reason}
	}
	if maxDeliver > 0 && delivered >= uint64(maxDeliver) {
		return settlement{action: kindTerm, dead: true,
			reason: fmt.Sprintf("gave up after %d deliveries: %s", delivered, reason)}
	}
	d := b.Delay(max(delivered, 1))
	if at := fault.RetryAtOf(res.err); !at.IsZero() {
		d = max(d, at.Sub(now))
	}
	return settlement{action: kindNak, delay: d, reason: reason, pause: kind == fault.Transient}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
