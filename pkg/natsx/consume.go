package natsx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
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

// ackDouble acks m; while the runner shuts down (stopping closed) it
// waits for the server's confirmation (DoubleAck, up to 5 s) so that no
// ack is still in a client buffer when Consume returns and the caller
// closes the connection.
func ackDouble(m jetstream.Msg, stopping <-chan struct{}) error {
	select {
	case <-stopping:
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return m.DoubleAck(ctx)
	default:
		return m.Ack()
	}
}

// Handler processes one delivered message and says how to settle it: the
// runner hands it the message as a Delivery and settles the message from
// the Result alone. ctx carries the consumer span and is cancelled when
// the runner's drain budget runs out.
type Handler func(ctx context.Context, d Delivery) Result

// BatchHandler processes a batch and returns one Result per message, in
// the same order. A result slice of the wrong length naks the whole batch.
type BatchHandler func(ctx context.Context, ds []Delivery) []Result

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
	// InProgress (resets AckWait). Default, and at most, AckWait/3 from
	// the consumer's cached info (10 s if unknown). Negative disables it.
	InProgressEvery time.Duration
	// DrainTimeout bounds how long in-flight handlers may run after ctx is
	// cancelled; then their ctx is cancelled too. Default
	// DefaultDrainTimeout.
	DrainTimeout time.Duration
	// FetchWait is how long one pull request waits for messages; it also
	// bounds how late the runner notices ctx cancellation. Default 5 s.
	FetchWait time.Duration
	// Settle configures the settle policy (see policy.go).
	Settle SettleOptions
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Tracer; default otel.Tracer("riftflow/natsx").
	Tracer trace.Tracer
}

// BatchOptions tunes ConsumeBatch.
type BatchOptions struct {
	// MaxBatch is the most messages handed to one handler call; default 100.
	MaxBatch int
	// MaxBytes, when > 0, also caps the message bytes of one batch
	// (JetStream's max_bytes on the pull); a batch always holds at least
	// one message.
	MaxBytes int
	// MaxWait is how long the runner waits to fill a batch; default 1 s.
	MaxWait time.Duration
	// Name, InProgressEvery, DrainTimeout, Settle, Logger and Tracer
	// are as in ConsumeOptions.
	Name            string
	InProgressEvery time.Duration
	DrainTimeout    time.Duration
	Settle          SettleOptions
	Logger          *slog.Logger
	Tracer          trace.Tracer
}

// SettleOptions configures the settle policy of one consumer.
type SettleOptions struct {
	// Backoff is the retry schedule of Transient and RateLimited failures;
	// zero fields take DefaultBackoff's.
	Backoff Backoff
	// Dead receives Invalid messages and messages that ran out of
	// deliveries. Nil: they are terminated with their reason and logged;
	// the MAX_DELIVERIES/MSG_TERMINATED advisories remain their only trace.
	Dead *DeadLetter
	// Probe checks the consumer's dependency (e.g. a Postgres ping). After
	// a Transient failure the runner pulls nothing more until Probe returns
	// nil, probing every ProbeEvery doubling to 30 s, so an outage of any
	// length costs each message at most one delivery. Nil: no pause (the
	// backoff alone spaces the retries).
	Probe func(ctx context.Context) error
	// ProbeEvery is the first wait between probes; default 1 s.
	ProbeEvery time.Duration
	// MaxDeliver overrides the consumer's MaxDeliver (from its cached
	// info); 0 keeps it.
	MaxDeliver int
}

// runner holds what Consume and ConsumeBatch share.
type runner struct {
	cons       jetstream.Consumer
	name       string
	stream     string
	consumer   string
	inProgress time.Duration
	drain      time.Duration
	settle     SettleOptions
	maxDeliver int
	log        *slog.Logger
	tracer     trace.Tracer

	processed  metric.Int64Counter
	duration   metric.Float64Histogram
	deliveries metric.Int64Histogram
	// redelivered counts deliveries after the first (the retry rate).
	redelivered metric.Int64Counter
	attrs       attribute.Set
	stopping    <-chan struct{} // closed when the runner's ctx is done
	// unhealthy is set by a Transient failure when the runner has a probe:
	// the next pull waits until the probe passes.
	unhealthy atomic.Bool
	paused    metric.Float64Counter
}

func newRunner(cons jetstream.Consumer, name string, inProgress, drain time.Duration, settle SettleOptions, log *slog.Logger, tr trace.Tracer) *runner {
	r := &runner{cons: cons, name: name, inProgress: inProgress, drain: drain, settle: settle, log: log, tracer: tr}
	r.settle.Backoff = settle.Backoff.withDefaults()
	if r.settle.ProbeEvery <= 0 {
		r.settle.ProbeEvery = time.Second
	}
	r.maxDeliver = settle.MaxDeliver
	if info := cons.CachedInfo(); info != nil {
		r.stream, r.consumer = info.Stream, info.Name
		if r.maxDeliver == 0 {
			r.maxDeliver = info.Config.MaxDeliver
		}
		if third := info.Config.AckWait / 3; third > 0 && (r.inProgress == 0 || r.inProgress > third) {
			// At most a third of AckWait: two keep-alives may be late (a
			// starved process, a slow server) before the message is
			// redelivered to another worker while this one still works.
			r.inProgress = third
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
	r.paused, _ = m.Float64Counter("riftflow.consumer.paused",
		metric.WithDescription("Time a consumer pulled nothing because its dependency's probe failed after a transient error."), metric.WithUnit("s"))
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
		semconv.MessagingOperationName("process"),
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

// delivery is m's Delivery on the runner's consumer.
func (r *runner) delivery(m jetstream.Msg) Delivery { return NewDelivery(m, r.maxDeliver) }

// finish settles m, delivered as d, with res by the settle policy, records
// metrics and span status. It is the only place where a message is acked,
// naked or terminated.
func (r *runner) finish(span trace.Span, m jetstream.Msg, d Delivery, res Result) {
	st := decide(res, d.Num, r.maxDeliver, r.settle.Backoff, time.Now())
	if res.err != nil {
		span.RecordError(res.err)
		span.SetAttributes(attribute.String("error.type", res.Kind().String()))
	}
	if st.dead {
		err := r.settle.Dead.Publish(context.Background(), DeadInfo{Subject: d.Subject, Header: d.Header, Data: d.Data,
			Stream: r.stream, Consumer: r.consumer, Sequence: d.Sequence, Deliveries: d.Num, Kind: res.Kind(), Reason: st.reason})
		if err != nil && r.settle.Dead != nil {
			// Keep the message: the next delivery dead-letters it again, or
			// the MAX_DELIVERIES advisory hands it to the retry-sweeper.
			r.log.Error("dead-letter failed; message kept for redelivery", "subject", d.Subject, "err", err)
			st = settlement{action: kindNak, delay: r.settle.Backoff.Delay(1), reason: st.reason}
		} else {
			r.log.Warn("message given up", "subject", d.Subject, "kind", res.Kind().String(), "deliveries", d.Num,
				"reason", st.reason, "dead_lettered", err == nil)
		}
	}
	if st.pause && r.settle.Probe != nil {
		r.unhealthy.Store(true)
	}
	var err error
	switch st.action {
	case kindAck:
		err = ackDouble(m, r.stopping)
	case kindNak:
		err = m.NakWithDelay(st.delay)
	case kindTerm:
		span.SetStatus(codes.Error, "terminated: "+st.reason)
		err = m.TermWithReason(truncate(st.reason, 250))
	}
	span.SetAttributes(attribute.String("nats.result", st.action.String()))
	if err != nil {
		r.log.Error("settle failed", "subject", d.Subject, "result", st.action.String(), "err", err)
		span.RecordError(err)
	}
	r.processed.Add(context.Background(), 1, metric.WithAttributeSet(r.attrs),
		metric.WithAttributes(attribute.String("result", st.action.String())))
}

// awaitHealthy blocks, after a Transient failure, until the settle probe
// passes or ctx ends; it returns at once when the runner is healthy.
func (r *runner) awaitHealthy(ctx context.Context) {
	if r.settle.Probe == nil || !r.unhealthy.Load() {
		return
	}
	start := time.Now()
	wait := r.settle.ProbeEvery
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := r.settle.Probe(pctx)
		cancel()
		if err == nil {
			break
		}
		r.log.Warn("dependency unhealthy; consumer paused", "err", err, "paused_for", time.Since(start).Round(time.Second))
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
	r.unhealthy.Store(false)
	if d := time.Since(start); d > r.settle.ProbeEvery {
		r.paused.Add(context.Background(), d.Seconds(), metric.WithAttributeSet(r.attrs))
		r.log.Info("dependency healthy again; consumer resumed", "paused_for", d.Round(time.Millisecond))
	}
}

// call runs h, turning a panic into a Transient failure of d alone.
func (r *runner) call(ctx context.Context, d Delivery, h Handler) (res Result) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("handler panic", "subject", d.Subject, "panic", p, "stack", string(debug.Stack()))
			res = Retry(fmt.Errorf("handler panic: %v", p))
		}
	}()
	return h(ctx, d)
}

// handleOne runs h on m inside a consumer span and settles m exactly once.
func (r *runner) handleOne(ctx context.Context, m jetstream.Msg, h Handler) {
	attrs, delivered := r.msgAttrs(m)
	ctx = Extract(ctx, m.Headers())
	ctx, span := r.tracer.Start(ctx, "process "+r.stream, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	defer span.End()
	r.recordDelivery(ctx, delivered)

	stop := make(chan struct{})
	go r.keepAlive([]jetstream.Msg{m}, stop)
	r.awaitHold(ctx) // a pull that was open when the switch went on
	start := time.Now()
	d := r.delivery(m)
	res := r.call(ctx, d, h)
	close(stop)
	r.duration.Record(ctx, time.Since(start).Seconds(), metric.WithAttributeSet(r.attrs))
	r.finish(span, m, d, res)
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
// h's Result. A panic in h is logged and becomes a Transient failure
// (Retry), settled by the policy like any other.
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
	r := newRunner(cons, opts.Name, opts.InProgressEvery, opts.DrainTimeout, opts.Settle, opts.Logger, opts.Tracer)
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
		r.awaitHealthy(ctx)
		r.awaitHold(ctx)
		if ctx.Err() != nil {
			for ; free > 0; free-- {
				slots <- struct{}{}
			}
			break loop
		}
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
// InProgress while h runs. A panic in h reruns the batch one message at
// a time, so that only the message that panics fails (Transient); a
// result slice of the wrong length fails the whole batch (Transient).
// Shutdown behaves as in
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
	r := newRunner(cons, opts.Name, opts.InProgressEvery, opts.DrainTimeout, opts.Settle, opts.Logger, opts.Tracer)
	hctx, cancel := r.drainContext(ctx)
	defer cancel()
	for ctx.Err() == nil {
		r.awaitHealthy(ctx)
		r.awaitHold(ctx)
		if ctx.Err() != nil {
			break
		}
		fopts := []jetstream.FetchOpt{jetstream.FetchMaxWait(maxWait)} // server-side expiry, see Consume
		if opts.MaxBytes > 0 {
			fopts = append(fopts, jetstream.FetchMaxBytes(opts.MaxBytes))
		}
		batch, err := cons.Fetch(maxBatch, fopts...)
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

// callBatch runs h on ds, turning a panic into an error.
func (r *runner) callBatch(ctx context.Context, ds []Delivery, h BatchHandler) (res []Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("batch handler panic", "msgs", len(ds), "panic", p, "stack", string(debug.Stack()))
			res, err = nil, fmt.Errorf("handler panic: %v", p)
		}
	}()
	return h(ctx, ds), nil
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
		_, ms := r.tracer.Start(Extract(ctx, m.Headers()), "process "+r.stream,
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
			semconv.MessagingOperationName("process"),
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingBatchMessageCount(len(msgs)),
			attribute.String("nats.stream", r.stream),
		))
	for _, ms := range msgSpans[1:] {
		ms.AddLink(trace.Link{SpanContext: span.SpanContext()})
	}

	stop := make(chan struct{})
	go r.keepAlive(msgs, stop)
	r.awaitHold(ctx)
	start := time.Now()
	ds := make([]Delivery, len(msgs))
	for i, m := range msgs {
		ds[i] = r.delivery(m)
	}
	results, perr := r.callBatch(ctx, ds, h)
	if perr != nil && len(msgs) > 1 {
		// Isolate the message that panics: run the handler on each message
		// alone, so only that one is retried (the handlers are idempotent).
		span.RecordError(perr)
		r.log.Error("batch handler panic; handling the batch one message at a time", "msgs", len(msgs), "err", perr)
		results = make([]Result, len(msgs))
		for i := range msgs {
			one, err := r.callBatch(ctx, ds[i:i+1], h)
			if err != nil {
				one = []Result{Retry(err)}
			}
			if len(one) != 1 {
				one = []Result{Retry(fmt.Errorf("batch handler returned %d results for 1 message", len(one)))}
			}
			results[i] = one[0]
		}
	}
	close(stop)
	r.duration.Record(ctx, time.Since(start).Seconds(), metric.WithAttributeSet(r.attrs))
	if len(results) != len(msgs) {
		err := fmt.Errorf("batch handler returned %d results for %d messages", len(results), len(msgs))
		if perr != nil {
			err = perr
		}
		r.log.Error("batch handler failed; retrying the batch", "err", err)
		results = make([]Result, len(msgs))
		for i := range results {
			results[i] = Retry(err)
		}
	}
	for i, m := range msgs {
		r.finish(msgSpans[i], m, ds[i], results[i])
	}
	// Children end before their parent.
	span.End()
	for _, ms := range msgSpans {
		ms.End()
	}
}
