package natsx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// resultKind is how a message is settled.
type resultKind uint8

const (
	kindAck resultKind = iota
	kindNak
	kindTerm
)

func (k resultKind) String() string {
	switch k {
	case kindAck:
		return "ack"
	case kindNak:
		return "nak"
	default:
		return "term"
	}
}

// Result is a handler's verdict on one message. The runner turns it into
// exactly one of Msg.Ack, Msg.NakWithDelay or Msg.TermWithReason. The zero
// Result is Ack.
type Result struct {
	kind   resultKind
	delay  time.Duration
	reason string
}

// Ack settles the message as done; on a WorkQueue stream it is removed.
func Ack() Result { return Result{kind: kindAck} }

// NakDelay asks for redelivery after d (0 = immediately). The message keeps
// its MaxAckPending slot while it waits, so for long waits (Riot 429 for
// minutes) ack and re-publish through Schedule instead. Each redelivery
// counts against the consumer's MaxDeliver.
func NakDelay(d time.Duration) Result { return Result{kind: kindNak, delay: d} }

// Term stops redelivery for good. The server emits a MSG_TERMINATED
// advisory carrying reason; on a WorkQueue stream the message is deleted, so
// copy anything you need elsewhere before returning Term.
func Term(reason string) Result { return Result{kind: kindTerm, reason: reason} }

// String is "ack", "nak(<delay>)" or "term(<reason>)".
func (r Result) String() string {
	switch r.kind {
	case kindNak:
		return fmt.Sprintf("nak(%s)", r.delay)
	case kindTerm:
		return fmt.Sprintf("term(%s)", r.reason)
	}
	return "ack"
}

// settle applies r to m. While the runner shuts down (stopping closed),
// an Ack waits for the server's confirmation (DoubleAck, up to 5 s) so that
// no ack is still in a client buffer when Consume returns and the caller
// closes the connection.
func (r Result) settle(m jetstream.Msg, stopping <-chan struct{}) error {
	switch r.kind {
	case kindNak:
		return m.NakWithDelay(r.delay)
	case kindTerm:
		return m.TermWithReason(r.reason)
	}
	select {
	case <-stopping:
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return m.DoubleAck(ctx)
	default:
		return m.Ack()
	}
}

// Handler processes one message and says how to settle it. It must not call
// Ack, Nak, Term or InProgress itself. ctx carries the consumer span and
// is cancelled when the runner's drain budget runs out.
type Handler func(ctx context.Context, m jetstream.Msg) Result

// BatchHandler processes a batch and returns one Result per message, in
// the same order. A result slice of the wrong length naks the whole batch.
type BatchHandler func(ctx context.Context, msgs []jetstream.Msg) []Result

// DefaultDrainTimeout is the default drain budget on shutdown: 15 s. A
// runner notices cancellation within FetchWait (5 s) and gives up one
// second after the budget, so it returns within about 21 s: below the
// default SHUTDOWN_TIMEOUT (25 s), itself below the pods'
// terminationGracePeriodSeconds (35 s), so a drained service exits 0
// before it is killed.
const DefaultDrainTimeout = 15 * time.Second

// ConsumeOptions tunes Consume. Zero values take the defaults given.
type ConsumeOptions struct {
	// Name labels logs and metrics; default the consumer's name.
	Name string
	// Concurrency is the number of handlers running at once; default 1.
	// The runner never pulls more messages than it has idle handlers, so
	// no message waits in a client buffer with its AckWait running.
	Concurrency int
	// InProgressEvery is how often a running handler's message gets
	// InProgress (resets AckWait). Default AckWait/3 from the consumer's
	// cached info (10 s if unknown). Negative disables it.
	InProgressEvery time.Duration
	// DrainTimeout bounds how long in-flight handlers may run after ctx is
	// cancelled; then their ctx is cancelled too. Default
	// DefaultDrainTimeout.
	DrainTimeout time.Duration
	// FetchWait is how long one pull request waits for messages; it also
	// bounds how late the runner notices ctx cancellation. Default 5 s.
	FetchWait time.Duration
	// PanicDelay is the NakDelay used when a handler panics; default 10 s.
	PanicDelay time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Tracer; default otel.Tracer("riftflow/natsx").
	Tracer trace.Tracer
}

// BatchOptions tunes ConsumeBatch.
type BatchOptions struct {
	// MaxBatch is the most messages handed to one handler call; default 100.
	MaxBatch int
	// MaxWait is how long the runner waits to fill a batch; default 1 s.
	MaxWait time.Duration
	// Name, InProgressEvery, DrainTimeout, PanicDelay, Logger and Tracer
	// are as in ConsumeOptions.
	Name            string
	InProgressEvery time.Duration
	DrainTimeout    time.Duration
	PanicDelay      time.Duration
	Logger          *slog.Logger
	Tracer          trace.Tracer
}

// runner holds what Consume and ConsumeBatch share.
type runner struct {
	cons       jetstream.Consumer
	name       string
	stream     string
	consumer   string
	inProgress time.Duration
	drain      time.Duration
	panicDelay time.Duration
	log        *slog.Logger
	tracer     trace.Tracer

	processed  metric.Int64Counter
	duration   metric.Float64Histogram
	deliveries metric.Int64Histogram
	// redelivered counts deliveries after the first (the retry rate).
	redelivered metric.Int64Counter
	attrs       attribute.Set
	stopping    <-chan struct{} // closed when the runner's ctx is done
}

func newRunner(cons jetstream.Consumer, name string, inProgress, drain, panicDelay time.Duration, log *slog.Logger, tr trace.Tracer) *runner {
	r := &runner{cons: cons, name: name, inProgress: inProgress, drain: drain, panicDelay: panicDelay, log: log, tracer: tr}
	if info := cons.CachedInfo(); info != nil {
		r.stream, r.consumer = info.Stream, info.Name
		if r.inProgress == 0 {
			r.inProgress = info.Config.AckWait / 3
		}
	}
	if r.inProgress == 0 {
		r.inProgress = 10 * time.Second
	}
	if r.name == "" {
		r.name = r.consumer
	}
	if r.drain <= 0 {
		r.drain = DefaultDrainTimeout
	}
	if r.panicDelay <= 0 {
		r.panicDelay = 10 * time.Second
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	r.log = r.log.With("consumer", r.name, "stream", r.stream)
	if r.tracer == nil {
		r.tracer = otel.Tracer(tracerName)
	}
	m := otel.Meter(tracerName)
	r.processed, _ = m.Int64Counter("riftflow.messages.processed",
		metric.WithDescription("Messages settled by the consumer runner, by result (ack, nak, term)."), metric.WithUnit("{message}"))
	r.duration, _ = m.Float64Histogram("riftflow.message.process.duration",
		metric.WithDescription("Handler time per message (per batch for batch consumers)."), metric.WithUnit("s"))
	r.deliveries, _ = m.Int64Histogram("riftflow.message.deliveries",
		metric.WithDescription("Delivery count of each message when handled (1 = first delivery)."), metric.WithUnit("{delivery}"))
	r.redelivered, _ = m.Int64Counter("riftflow.messages.redelivered",
		metric.WithDescription("Messages handled again after an earlier delivery (nak, AckWait expiry or crash): the stage's retry rate."), metric.WithUnit("{message}"))
	r.attrs = attribute.NewSet(attribute.String("consumer", r.name), attribute.String("stream", r.stream))
	return r
}

// recordDelivery records a message's delivery count, and counts it as a
// redelivery (a retry of the stage) when it is not the first.
func (r *runner) recordDelivery(ctx context.Context, delivered uint64) {
	r.deliveries.Record(ctx, int64(delivered), metric.WithAttributeSet(r.attrs))
	if delivered > 1 {
		r.redelivered.Add(ctx, 1, metric.WithAttributeSet(r.attrs))
	}
}

// keepAlive calls InProgress on msgs every r.inProgress until stop is
// closed.
func (r *runner) keepAlive(msgs []jetstream.Msg, stop <-chan struct{}) {
	if r.inProgress < 0 {
		return
	}
	t := time.NewTicker(r.inProgress)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			for _, m := range msgs {
				if err := m.InProgress(); err != nil {
					r.log.Warn("in progress failed", "subject", m.Subject(), "err", err)
				}
			}
		}
	}
}

// msgAttrs returns span attributes for m and its delivery count.
func (r *runner) msgAttrs(m jetstream.Msg) ([]attribute.KeyValue, uint64) {
	a := []attribute.KeyValue{
		semconv.MessagingSystemKey.String("nats"),
		semconv.MessagingDestinationName(m.Subject()),
		semconv.MessagingConsumerGroupName(r.consumer),
		semconv.MessagingOperationTypeProcess,
		attribute.String("nats.stream", r.stream),
	}
	if id := m.Headers().Get(jetstream.MsgIDHeader); id != "" {
		a = append(a, semconv.MessagingMessageID(id))
	}
	var delivered uint64
	if md, err := m.Metadata(); err == nil {
		delivered = md.NumDelivered
		a = append(a, attribute.Int64("nats.delivery_count", int64(md.NumDelivered)),
			attribute.Int64("nats.stream_sequence", int64(md.Sequence.Stream)))
	}
	return a, delivered
}

// finish settles m with res, records metrics and span status.
func (r *runner) finish(span trace.Span, m jetstream.Msg, res Result) {
	span.SetAttributes(attribute.String("nats.result", res.String()))
	if res.kind == kindTerm {
		span.SetStatus(codes.Error, "terminated: "+res.reason)
	}
	if err := res.settle(m, r.stopping); err != nil {
		r.log.Error("settle failed", "subject", m.Subject(), "result", res.String(), "err", err)
		span.RecordError(err)
	}
	r.processed.Add(context.Background(), 1, metric.WithAttributeSet(r.attrs),
		metric.WithAttributes(attribute.String("result", res.kind.String())))
}

// call runs h, turning a panic into NakDelay(panicDelay).
func (r *runner) call(ctx context.Context, m jetstream.Msg, h Handler) (res Result) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("handler panic", "subject", m.Subject(), "panic", p, "stack", string(debug.Stack()))
			trace.SpanFromContext(ctx).RecordError(fmt.Errorf("panic: %v", p))
			res = NakDelay(r.panicDelay)
		}
	}()
	return h(ctx, m)
}

// handleOne runs h on m inside a consumer span and settles m exactly once.
func (r *runner) handleOne(ctx context.Context, m jetstream.Msg, h Handler) {
	attrs, delivered := r.msgAttrs(m)
	ctx = Extract(ctx, m.Headers())
	ctx, span := r.tracer.Start(ctx, "process "+m.Subject(), trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	defer span.End()
	r.recordDelivery(ctx, delivered)

	stop := make(chan struct{})
	go r.keepAlive([]jetstream.Msg{m}, stop)
	start := time.Now()
	res := r.call(ctx, m, h)
	close(stop)
	r.duration.Record(ctx, time.Since(start).Seconds(), metric.WithAttributeSet(r.attrs))
	r.finish(span, m, res)
}

// drainContext returns a context for handlers that outlives ctx by the
// drain budget: it is cancelled r.drain after ctx is done, or by cancel.
func (r *runner) drainContext(ctx context.Context) (context.Context, context.CancelFunc) {
	r.stopping = ctx.Done()
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		select {
		case <-hctx.Done():
			return
		case <-ctx.Done():
		}
		t := time.NewTimer(r.drain)
		defer t.Stop()
		select {
		case <-hctx.Done():
		case <-t.C:
			cancel()
		}
	}()
	return hctx, cancel
}

// wait waits for wg; if ctx ended, it waits at most the drain budget plus
// a grace second and reports handlers that did not return.
func (r *runner) wait(wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(r.drain + time.Second)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		r.log.Error("drain timeout: handlers still running", "drain_timeout", r.drain)
		return fmt.Errorf("natsx: consumer %s: handlers still running %s after shutdown", r.name, r.drain)
	}
}

// isFetchStop reports fetch errors after which the runner should stop.
func isFetchStop(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConnectionClosed) ||
		errors.Is(err, jetstream.ErrConsumerNotFound)
}

// Consume pulls messages from cons and runs h on each, up to Concurrency at
// a time, until ctx is cancelled. Per message it extracts the trace context
// from the headers, starts a consumer span (subject, stream, consumer,
// delivery count, stream sequence, message id), calls InProgress every
// InProgressEvery while h runs, then settles the message exactly once from
// h's Result. A panic in h is logged and becomes NakDelay(PanicDelay).
//
// On ctx cancellation Consume stops pulling (a pull already waiting ends
// within FetchWait; messages it still delivers are handled, not dropped),
// lets in-flight handlers finish, and returns nil. Handlers get a context
// that is cancelled DrainTimeout after ctx; if they still have not
// returned one second later, Consume returns an error. Consume also
// returns an error when the consumer is deleted or the connection closed.
// Transient pull errors (timeouts, leader changes) are logged and retried.
func Consume(ctx context.Context, cons jetstream.Consumer, h Handler, opts ConsumeOptions) error {
	n := max(opts.Concurrency, 1)
	fetchWait := opts.FetchWait
	if fetchWait <= 0 {
		fetchWait = 5 * time.Second
	}
	r := newRunner(cons, opts.Name, opts.InProgressEvery, opts.DrainTimeout, opts.PanicDelay, opts.Logger, opts.Tracer)
	hctx, cancel := r.drainContext(ctx)
	defer cancel()

	slots := make(chan struct{}, n)
	for range n {
		slots <- struct{}{}
	}
	var wg sync.WaitGroup
	var runErr error
loop:
	for {
		// Take one idle slot (blocking), then every other idle one.
		select {
		case <-ctx.Done():
			break loop
		case <-slots:
		}
		if ctx.Err() != nil {
			// select picks at random when both are ready: without this
			// check a cancelled runner would start another pull half the
			// time, and a drain took several FetchWaits.
			slots <- struct{}{}
			break loop
		}
		free := 1
	more:
		for free < n {
			select {
			case <-slots:
				free++
			default:
				break more
			}
		}
		// The pull's expiry is server-side (FetchMaxWait): the server ends
		// it with a timeout status, which closes the batch. A client-side
		// context deadline alone left pulls open past it (seen as a
		// match-fetcher that did not drain).
		batch, err := cons.Fetch(free, jetstream.FetchMaxWait(fetchWait))
		if err == nil {
			for m := range batch.Messages() {
				free--
				wg.Add(1)
				go func() {
					defer func() { slots <- struct{}{}; wg.Done() }()
					r.handleOne(hctx, m, h)
				}()
			}
			err = batch.Error()
		}
		for ; free > 0; free-- {
			slots <- struct{}{}
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
			if isFetchStop(err) {
				runErr = fmt.Errorf("natsx: consumer %s: %w", r.name, err)
				break loop
			}
			r.log.Warn("fetch failed", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	return errors.Join(runErr, r.wait(&wg))
}

// ConsumeBatch pulls up to MaxBatch messages (waiting up to MaxWait to
// fill a batch), runs h on the batch and settles each message exactly once
// with the corresponding Result. Each message gets a consumer span in its
// own trace; one batch span, a child of the first message's span linked
// to all of them, covers the handler (see handleBatch). All messages get
// InProgress while h runs. A panic in h, or a result slice of the wrong
// length, naks the whole batch with PanicDelay. Shutdown behaves as in
// Consume (one batch in flight at a time).
func ConsumeBatch(ctx context.Context, cons jetstream.Consumer, h BatchHandler, opts BatchOptions) error {
	maxBatch := opts.MaxBatch
	if maxBatch <= 0 {
		maxBatch = 100
	}
	maxWait := opts.MaxWait
	if maxWait <= 0 {
		maxWait = time.Second
	}
	r := newRunner(cons, opts.Name, opts.InProgressEvery, opts.DrainTimeout, opts.PanicDelay, opts.Logger, opts.Tracer)
	hctx, cancel := r.drainContext(ctx)
	defer cancel()
	for ctx.Err() == nil {
		batch, err := cons.Fetch(maxBatch, jetstream.FetchMaxWait(maxWait)) // server-side expiry, see Consume
		var msgs []jetstream.Msg
		if err == nil {
			for m := range batch.Messages() {
				msgs = append(msgs, m)
			}
			err = batch.Error()
		}
		if len(msgs) > 0 {
			r.handleBatch(hctx, msgs, h)
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
			if isFetchStop(err) {
				return fmt.Errorf("natsx: consumer %s: %w", r.name, err)
			}
			r.log.Warn("fetch failed", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	return nil
}

// handleBatch runs h on msgs and settles every message.
//
// Spans: every message gets its own consumer span "process <subject>",
// a child of the context extracted from its headers, so each request's
// trace shows its message being stored (with delivery count and result).
// The batch span "process batch <name>", under which the handler's work
// (the Postgres transaction) is recorded, is a child of the first
// message's span and links to every message's span; each message's span
// links back to the batch span. So the first message's trace holds the
// whole write, and any other trace reaches it through one link.
func (r *runner) handleBatch(ctx context.Context, msgs []jetstream.Msg, h BatchHandler) {
	msgSpans := make([]trace.Span, len(msgs))
	links := make([]trace.Link, 0, len(msgs))
	for i, m := range msgs {
		attrs, delivered := r.msgAttrs(m)
		attrs = append(attrs, semconv.MessagingBatchMessageCount(len(msgs)))
		_, ms := r.tracer.Start(Extract(ctx, m.Headers()), "process "+m.Subject(),
			trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
		msgSpans[i] = ms
		links = append(links, trace.Link{SpanContext: ms.SpanContext()})
		r.recordDelivery(ctx, delivered)
	}
	ctx, span := r.tracer.Start(trace.ContextWithSpan(ctx, msgSpans[0]), "process batch "+r.name, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(links...),
		trace.WithAttributes(
			semconv.MessagingSystemKey.String("nats"),
			semconv.MessagingConsumerGroupName(r.consumer),
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingBatchMessageCount(len(msgs)),
			attribute.String("nats.stream", r.stream),
		))
	for _, ms := range msgSpans[1:] {
		ms.AddLink(trace.Link{SpanContext: span.SpanContext()})
	}

	stop := make(chan struct{})
	go r.keepAlive(msgs, stop)
	start := time.Now()
	results := func() (res []Result) {
		defer func() {
			if p := recover(); p != nil {
				r.log.Error("batch handler panic", "panic", p, "stack", string(debug.Stack()))
				span.RecordError(fmt.Errorf("panic: %v", p))
				res = nil
			}
		}()
		return h(ctx, msgs)
	}()
	close(stop)
	r.duration.Record(ctx, time.Since(start).Seconds(), metric.WithAttributeSet(r.attrs))
	if len(results) != len(msgs) {
		r.log.Error("batch handler returned wrong number of results; naking batch", "msgs", len(msgs), "results", len(results))
		results = make([]Result, len(msgs))
		for i := range results {
			results[i] = NakDelay(r.panicDelay)
		}
	}
	for i, m := range msgs {
		r.finish(msgSpans[i], m, results[i])
	}
	// Children end before their parent.
	span.End()
	for _, ms := range msgSpans {
		ms.End()
	}
}
