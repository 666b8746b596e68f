package natsx

import (
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Delivery is one delivered message as a handler sees it: its content and
// what JetStream says of this delivery, read once by the runner. A handler
// works on it alone and says how to settle the message through its Result;
// only the runner holds the jetstream.Msg (Ack, Nak, Term, InProgress).
type Delivery struct {
	Subject string
	Header  nats.Header
	Data    []byte
	// Num is the delivery count (JetStream's NumDelivered): 1 for the
	// first delivery, and for a message without JetStream metadata.
	Num uint64
	// Last reports that this is the last delivery the consumer allows
	// (its MaxDeliver): the settle policy dead-letters a retryable failure
	// now instead of retrying it, so a handler that must say why (a
	// rejection, a released lock) settles the message for good itself.
	Last bool
	// Sequence is the message's sequence in its stream; 0 when it has no
	// JetStream metadata.
	Sequence uint64
	// Stored is when the stream stored the message; zero when it has no
	// JetStream metadata.
	Stored time.Time

	progress func() error
}

// NewDelivery is the Delivery of m on a consumer whose MaxDeliver is
// maxDeliver (0 or less: unlimited). The runner builds one per message; a
// test that fetched a message itself hands it to a handler through it.
func NewDelivery(m jetstream.Msg, maxDeliver int) Delivery {
	d := Delivery{Subject: m.Subject(), Header: m.Headers(), Data: m.Data(), Num: 1, progress: m.InProgress}
	if md, err := m.Metadata(); err == nil {
		d.Num = max(md.NumDelivered, 1)
		d.Sequence, d.Stored = md.Sequence.Stream, md.Timestamp
	}
	d.Last = maxDeliver > 0 && d.Num >= uint64(maxDeliver)
	return d
}

// InProgress tells JetStream that the message is still being worked on
// (it resets its AckWait), for a handler that waits between its own tries
// on top of the runner's keep-alives; nil for a Delivery without a
// message.
func (d Delivery) InProgress() error {
	if d.progress == nil {
		return nil
	}
	return d.progress()
}
