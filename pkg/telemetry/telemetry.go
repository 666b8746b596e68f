package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// Config configures [Setup].
type Config struct {
	// ServiceName is the service.name resource attribute. Required unless
	// OTEL_SERVICE_NAME is set; OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// override it, as the OpenTelemetry specification asks.
	ServiceName string
	// ServiceVersion is the service.version resource attribute. Optional;
	// empty means the stamped [Version].
	ServiceVersion string
	// Logger receives errors reported by the OpenTelemetry SDK (failed
	// exports, for instance). Optional; nil means slog.Default().
	Logger *slog.Logger
}

// Telemetry owns the providers installed by [Setup]. Call
// [Telemetry.Shutdown] before the process exits to flush buffered spans.
type Telemetry struct {
	res       *resource.Resource
	exporter  sdktrace.SpanExporter // nil when no endpoint is configured
	tp        *sdktrace.TracerProvider
	mp        *sdkmetric.MeterProvider
	registry  *prometheus.Registry
	mainName  string
	mu        sync.Mutex
	providers map[string]*sdktrace.TracerProvider
}

// Setup builds the tracing and metrics providers, installs them and the
// W3C propagator as the OpenTelemetry globals, and returns their owner.
//
// Spans are exported with OTLP/HTTP (otlptracehttp, which reads the
// standard OTEL_EXPORTER_OTLP_* variables) when an endpoint is configured
// through OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// and OTEL_TRACES_EXPORTER is not "none". Otherwise spans are created but not
// exported. Sampling follows OTEL_TRACES_SAMPLER, by default parent-based
// always-on.
func Setup(ctx context.Context, cfg Config) (*Telemetry, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	if cfg.ServiceVersion == "" {
		cfg.ServiceVersion = Version
	}
	base, err := resource.Merge(resource.Default(), resource.NewSchemaless(serviceAttrs(cfg.ServiceName, cfg.ServiceVersion)...))
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	res, err := resource.Merge(base, resource.Environment())
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource from env: %w", err)
	}
	mainName := cfg.ServiceName
	if v, ok := res.Set().Value(semconv.ServiceNameKey); ok {
		mainName = v.AsString()
	}

	t := &Telemetry{res: res, mainName: mainName, providers: map[string]*sdktrace.TracerProvider{}}

	if ExportEnabled() {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("telemetry: otlp exporter: %w", err)
		}
		t.exporter = exp
	}
	t.tp = t.newTracerProvider(res)

	t.registry = prometheus.NewRegistry()
	if err := t.registry.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("telemetry: go collector: %w", err)
	}
	if err := t.registry.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("telemetry: process collector: %w", err)
	}
	if err := t.registry.Register(newBuildInfoCollector(mainName)); err != nil {
		return nil, fmt.Errorf("telemetry: build info: %w", err)
	}
	reader, err := otelprom.New(otelprom.WithRegisterer(t.registry))
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	opts := []sdkmetric.Option{sdkmetric.WithReader(reader), sdkmetric.WithResource(res)}
	for _, v := range durationViews() {
		opts = append(opts, sdkmetric.WithView(v))
	}
	t.mp = sdkmetric.NewMeterProvider(opts...)

	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("opentelemetry", "err", err)
	}))
	otel.SetTracerProvider(inheritingProvider{t: t})
	otel.SetMeterProvider(t.mp)
	otel.SetTextMapPropagator(Propagator())
	return t, nil
}

// ExportEnabled reports whether the environment asks for spans to be
// exported: an OTLP endpoint is set and OTEL_TRACES_EXPORTER is not "none".
func ExportEnabled() bool {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")), "none") {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Propagator returns the propagator riftflow uses on HTTP and NATS headers:
// W3C TraceContext and W3C Baggage.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

func serviceAttrs(name, version string) []attribute.KeyValue {
	var attrs []attribute.KeyValue
	if name != "" {
		attrs = append(attrs, semconv.ServiceName(name))
	}
	if version != "" {
		attrs = append(attrs, semconv.ServiceVersion(version))
	}
	return attrs
}

func (t *Telemetry) newTracerProvider(res *resource.Resource) *sdktrace.TracerProvider {
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if t.exporter != nil {
		opts = append(opts, sdktrace.WithBatcher(sharedExporter{t.exporter}))
	}
	return sdktrace.NewTracerProvider(opts...)
}

// TracerProvider returns a provider whose resource carries serviceName as
// service.name and which exports through the same exporter as the global
// provider. Use it when several services share one process, so each shows up
// as its own service in the trace back-end. Calls with the same name return
// the same provider; the name given to [Setup] returns the global one.
// Providers are shut down by [Telemetry.Shutdown].
func (t *Telemetry) TracerProvider(serviceName string) trace.TracerProvider {
	if serviceName == "" || serviceName == t.mainName {
		return t.tp
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if tp, ok := t.providers[serviceName]; ok {
		return tp
	}
	res, err := resource.Merge(t.res, resource.NewSchemaless(semconv.ServiceName(serviceName)))
	if err != nil {
		// Merging a schemaless resource cannot conflict; keep the shared
		// resource rather than fail if that ever changes.
		otel.Handle(fmt.Errorf("telemetry: resource for %s: %w", serviceName, err))
		res = t.res
	}
	tp := t.newTracerProvider(res)
	t.providers[serviceName] = tp
	return tp
}

// MeterProvider returns the global MeterProvider installed by [Setup].
func (t *Telemetry) MeterProvider() metric.MeterProvider { return t.mp }

// Registry returns the Prometheus registry behind the MeterProvider, which
// also holds the Go runtime and process collectors. Services may register
// their own collectors on it; [Ops] serves it on /metrics.
func (t *Telemetry) Registry() *prometheus.Registry { return t.registry }

// NewOps returns an [Ops] server serving this Telemetry's registry.
func (t *Telemetry) NewOps() *Ops { return NewOps(t.registry) }

// ForceFlush exports every span that has ended so far, from the global
// provider and every per-service provider, and returns once the exporter
// has sent them (or ctx is done). Tests call it before reading what an
// OTLP receiver got; the ops of a running service never need it.
func (t *Telemetry) ForceFlush(ctx context.Context) error {
	var errs []error
	for _, tp := range t.allProviders() {
		if err := tp.ForceFlush(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("telemetry: flush: %w", err)
	}
	return nil
}

func (t *Telemetry) allProviders() []*sdktrace.TracerProvider {
	t.mu.Lock()
	defer t.mu.Unlock()
	tps := make([]*sdktrace.TracerProvider, 0, len(t.providers)+1)
	for _, tp := range t.providers {
		tps = append(tps, tp)
	}
	return append(tps, t.tp)
}

// owns reports whether tp is one of t's per-service providers.
func (t *Telemetry) owns(tp *sdktrace.TracerProvider) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.providers {
		if p == tp {
			return true
		}
	}
	return false
}

// inheritingProvider is the global TracerProvider installed by [Setup].
// A span started through it under a local parent span that a per-service
// provider ([Telemetry.TracerProvider]) created is created by that same
// provider, so it carries the parent's service.name. Without it, spans made
// by shared libraries through the global provider (the NATS producer spans
// of natsx, the Riot client's spans, otelpgx's Postgres spans) would all be
// attributed to the process ("riftflow") when the five services share one
// process, instead of to the service doing the work. In a standalone
// service there are no per-service providers and every span goes to the
// global one, as usual.
type inheritingProvider struct {
	embedded.TracerProvider
	t *Telemetry
}

var _ trace.TracerProvider = inheritingProvider{}

func (p inheritingProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return inheritingTracer{t: p.t, name: name, opts: opts, main: p.t.tp.Tracer(name, opts...)}
}

type inheritingTracer struct {
	embedded.Tracer
	t    *Telemetry
	name string
	opts []trace.TracerOption
	main trace.Tracer
}

func (tr inheritingTracer) Start(ctx context.Context, spanName string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if parent := trace.SpanFromContext(ctx); parent.SpanContext().IsValid() {
		if tp, ok := parent.TracerProvider().(*sdktrace.TracerProvider); ok && tp != tr.t.tp && tr.t.owns(tp) {
			return tp.Tracer(tr.name, tr.opts...).Start(ctx, spanName, opts...)
		}
	}
	return tr.main.Start(ctx, spanName, opts...)
}

// Shutdown flushes and stops every tracer provider, the exporter and the
// meter provider. It returns once buffered spans were exported or ctx is
// done. The Telemetry must not be used afterwards.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for _, tp := range t.allProviders() {
		if err := tp.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if t.exporter != nil {
		if err := t.exporter.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := t.mp.Shutdown(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("telemetry: shutdown: %w", err)
	}
	return nil
}

// sharedExporter lets several tracer providers' batch processors use one
// exporter: a provider's Shutdown flushes its spans but leaves the exporter
// open for the others. [Telemetry.Shutdown] closes the exporter itself last.
type sharedExporter struct{ sdktrace.SpanExporter }

func (sharedExporter) Shutdown(context.Context) error { return nil }

// Bucket boundaries, in seconds, for the latency histograms that declare
// none themselves. The SDK's default boundaries (0, 5, 10, 25, ... 10000)
// suit milliseconds: in seconds every observation would land in le=5.
var (
	// LatencyBuckets fit sub-second work (a handler, a Riot call, a batch
	// transaction): the OpenTelemetry HTTP and messaging semantic
	// conventions' recommended boundaries, extended to 30 s.
	LatencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30}
	// WaitBuckets fit rate-limiter waits, which run from nothing to the
	// length of a Riot window (120 s).
	WaitBuckets = []float64{0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}
)

// durationHistograms names every histogram in seconds whose instrument does
// not set its own boundaries, with the boundaries it gets.
var durationHistograms = map[string][]float64{
	"riftflow.message.process.duration": LatencyBuckets,
	"riftflow.persist.batch.duration":   LatencyBuckets,
	"riot.client.duration":              LatencyBuckets,
	"http.server.request.duration":      LatencyBuckets,
	"riftflow.ratelimit.wait":           WaitBuckets,
}

func durationViews() []sdkmetric.View {
	views := make([]sdkmetric.View, 0, len(durationHistograms))
	for name, b := range durationHistograms {
		views = append(views, sdkmetric.NewView(sdkmetric.Instrument{Name: name, Kind: sdkmetric.InstrumentKindHistogram},
			sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: b}}))
	}
	return views
}
