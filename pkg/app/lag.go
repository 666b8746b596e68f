package app

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// lagPollInterval is the shortest time between two ConsumerInfo requests
// for one consumer: /metrics scrapes closer together reuse the last answer.
const lagPollInterval = 2 * time.Second

// lagTimeout bounds the ConsumerInfo requests of one scrape.
const lagTimeout = 2 * time.Second

// consumerLag publishes the queue length of every consumer this process
// binds, as observable gauges read at scrape time (design 002):
//
//	riftflow.consumer.pending       messages not yet delivered (num_pending)
//	riftflow.consumer.ack_pending   delivered, not yet acknowledged (num_ack_pending)
//	riftflow.consumer.redelivered   delivered more than once, not yet acknowledged (num_redelivered)
//
// each with the attributes consumer and stream. These are the numbers KEDA
// scales on (lagThreshold against num_pending + num_ack_pending).
type consumerLag struct {
	mu   sync.Mutex
	cons []*lagEntry
	now  func() time.Time
	reg  metric.Registration
}

type lagEntry struct {
	c     jetstream.Consumer
	attrs attribute.Set
	at    time.Time
	info  *jetstream.ConsumerInfo
}

func newConsumerLag(mp metric.MeterProvider) (*consumerLag, error) {
	l := &consumerLag{now: time.Now}
	m := mp.Meter("riftflow/app")
	pending, err := m.Int64ObservableGauge("riftflow.consumer.pending",
		metric.WithDescription("Messages in the consumer's stream not yet delivered to it (ConsumerInfo.NumPending)."), metric.WithUnit("{message}"))
	if err != nil {
		return nil, err
	}
	ackPending, err := m.Int64ObservableGauge("riftflow.consumer.ack_pending",
		metric.WithDescription("Messages delivered to the consumer and not yet acknowledged (ConsumerInfo.NumAckPending)."), metric.WithUnit("{message}"))
	if err != nil {
		return nil, err
	}
	redelivered, err := m.Int64ObservableGauge("riftflow.consumer.redelivered",
		metric.WithDescription("Unacknowledged messages delivered more than once (ConsumerInfo.NumRedelivered)."), metric.WithUnit("{message}"))
	if err != nil {
		return nil, err
	}
	l.reg, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		for _, e := range l.snapshot(ctx) {
			if e.info == nil {
				continue
			}
			o.ObserveInt64(pending, int64(e.info.NumPending), metric.WithAttributeSet(e.attrs))
			o.ObserveInt64(ackPending, int64(e.info.NumAckPending), metric.WithAttributeSet(e.attrs))
			o.ObserveInt64(redelivered, int64(e.info.NumRedelivered), metric.WithAttributeSet(e.attrs))
		}
		return nil
	}, pending, ackPending, redelivered)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// add starts observing c (once per stream/consumer pair).
func (l *consumerLag) add(c jetstream.Consumer, stream, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.cons {
		if v, _ := e.attrs.Value("consumer"); v.AsString() == name {
			if s, _ := e.attrs.Value("stream"); s.AsString() == stream {
				return
			}
		}
	}
	l.cons = append(l.cons, &lagEntry{c: c, attrs: attribute.NewSet(attribute.String("consumer", name), attribute.String("stream", stream))})
}

// snapshot refreshes the consumer infos older than lagPollInterval and
// returns the entries. A consumer whose info cannot be read (NATS down) is
// reported with its last known numbers, or not at all.
func (l *consumerLag) snapshot(ctx context.Context) []lagEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, lagTimeout)
	defer cancel()
	now := l.now()
	out := make([]lagEntry, 0, len(l.cons))
	for _, e := range l.cons {
		if e.info == nil || now.Sub(e.at) >= lagPollInterval {
			if info, err := e.c.Info(ctx); err == nil {
				e.info, e.at = info, now
			}
		}
		out = append(out, *e)
	}
	return out
}

func (l *consumerLag) close() {
	if l != nil && l.reg != nil {
		_ = l.reg.Unregister()
	}
}
