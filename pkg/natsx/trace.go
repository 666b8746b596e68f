package natsx

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of spans made by this package.
const tracerName = "riftflow/natsx"

// HeaderCarrier adapts nats.Header to propagation.TextMapCarrier without
// canonicalising keys: W3C keys stay lowercase ("traceparent"), as other
// NATS clients write them. Do not mix it with propagation.HeaderCarrier,
// which writes "Traceparent" and cannot be read back case-sensitively
// (NATS headers are case-sensitive).
type HeaderCarrier nats.Header

// Get returns the first value of key k (case-sensitive), or "".
func (c HeaderCarrier) Get(k string) string { return nats.Header(c).Get(k) }

// Set replaces the values of key k.
func (c HeaderCarrier) Set(k, v string) { nats.Header(c).Set(k, v) }

// Keys lists the header keys.
func (c HeaderCarrier) Keys() []string {
	ks := make([]string, 0, len(c))
	for k := range c {
		ks = append(ks, k)
	}
	return ks
}

// Inject writes ctx's trace context (and baggage) into h with the global
// propagator. h must be non-nil.
func Inject(ctx context.Context, h nats.Header) {
	otel.GetTextMapPropagator().Inject(ctx, HeaderCarrier(h))
}

// Extract returns ctx carrying the remote span context found in h (if any),
// read with the global propagator.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, HeaderCarrier(h))
}

// Publish JSON-encodes v and publishes it to subject on JetStream through
// PublishMsg (producer span + injected trace context). Errors: encoding
// failures, and whatever js.PublishMsg returns (no stream, timeout,
// wrong last sequence...).
func Publish(ctx context.Context, js jetstream.JetStream, subject string, v any, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("natsx: encode %T for %s: %w", v, subject, err)
	}
	m := nats.NewMsg(subject)
	m.Data = data
	return PublishMsg(ctx, js, m, opts...)
}

// PublishMsg publishes m (data and headers as given) on JetStream inside a
// producer span "send <subject>" with messaging.system=nats,
// messaging.destination.name=subject and, when m carries Nats-Msg-Id,
// messaging.message.id. The span's context is injected into m.Header before
// sending. A duplicate (PubAck.Duplicate) is recorded on the span as the
// attribute nats.duplicate=true; it is not an error.
func PublishMsg(ctx context.Context, js jetstream.JetStream, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	// The span name stays low-cardinality ("send" and then "send <stream>"
	// once the stream is known from the ack); the subject, which carries
	// PUUIDs and match IDs, is the messaging.destination.name attribute.
	ctx, span := otel.Tracer(tracerName).Start(ctx, "send",
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			semconv.MessagingSystemKey.String("nats"),
			semconv.MessagingDestinationName(m.Subject),
			semconv.MessagingOperationName("send"),
			semconv.MessagingOperationTypeSend,
			semconv.MessagingMessageBodySize(len(m.Data)),
		))
	defer span.End()
	Inject(ctx, m.Header)
	ack, err := js.PublishMsg(ctx, m, opts...)
	// WithMsgID sets the header inside PublishMsg, on our m.
	if id := m.Header.Get(jetstream.MsgIDHeader); id != "" {
		span.SetAttributes(semconv.MessagingMessageID(id))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return nil, err
	}
	span.SetName("send " + ack.Stream)
	span.SetAttributes(attribute.String("nats.stream", ack.Stream), attribute.Int64("nats.sequence", int64(ack.Sequence)))
	if ack.Duplicate {
		span.SetAttributes(attribute.Bool("nats.duplicate", true))
	}
	return ack, nil
}
