package natsx

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Delivery is m's delivery count (JetStream's NumDelivered, 1 for the
// first delivery); 1 when m has no JetStream metadata.
func Delivery(m jetstream.Msg) uint64 {
	if m == nil {
		return 1
	}
	if md, err := m.Metadata(); err == nil && md.NumDelivered > 1 {
		return md.NumDelivered
	}
	return 1
}

// DeliveryBackoff is base·2^(n−1) for the n-th delivery of m, capped at
// maxDelay: a failing dependency is retried less and less often instead of
// spending the consumer's MaxDeliver in a few seconds.
func DeliveryBackoff(base, maxDelay time.Duration, m jetstream.Msg) time.Duration {
	n := Delivery(m)
	d := base
	for i := uint64(1); i < n && d < maxDelay; i++ {
		d *= 2
	}
	return min(d, maxDelay)
}

// LastDelivery reports whether m is on the last delivery its consumer
// allows (maxDeliver > 0, from ConsumerConfig.MaxDeliver): a nak now would
// end in a MAX_DELIVERIES advisory instead of a redelivery, so the handler
// must settle the message for good and say why.
func LastDelivery(m jetstream.Msg, maxDeliver int) bool {
	return maxDeliver > 0 && Delivery(m) >= uint64(maxDeliver)
}

// IsLastDelivery is LastDelivery with the MaxDeliver of c (from the
// consumer info cached when it was bound); false when c is nil or has no
// cached info.
func IsLastDelivery(c jetstream.Consumer, m jetstream.Msg) bool {
	if c == nil {
		return false
	}
	info := c.CachedInfo()
	return info != nil && LastDelivery(m, info.Config.MaxDeliver)
}

// DeliveredBy returns the one of cons that delivered m (matched by name
// against m's metadata), for a stage reading two queues (interactive and
// background) with one handler; the first non-nil of cons when none
// matches or m has no metadata; nil when every one is nil.
func DeliveredBy(m jetstream.Msg, cons ...jetstream.Consumer) jetstream.Consumer {
	var first jetstream.Consumer
	md, mdErr := (*jetstream.MsgMetadata)(nil), error(jetstream.ErrNotJSMessage)
	if m != nil {
		md, mdErr = m.Metadata()
	}
	for _, c := range cons {
		if c == nil {
			continue
		}
		if first == nil {
			first = c
		}
		if info := c.CachedInfo(); mdErr == nil && info != nil && info.Name == md.Consumer {
			return c
		}
	}
	return first
}
