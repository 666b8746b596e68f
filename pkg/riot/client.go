package riot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/riftflow/riftflow/pkg/tick"
)

// DefaultBaseURL is Riot's host template; {route} is a platform or region.
const DefaultBaseURL = "https://{route}.api.riotgames.com"

// Defaults applied by New to zero Config fields.
const (
	DefaultTimeout         = 10 * time.Second
	DefaultMaxBodyBytes    = 16 << 20
	DefaultMaxRetries      = 2
	DefaultBreakerTimeout  = 30 * time.Second
	DefaultBreakerFailures = 5
	DefaultServerRetryBase = time.Second
	// RetryAfterMargin is added to a 429's Retry-After (as Riven and Camille do).
	RetryAfterMargin = 500 * time.Millisecond
	// rateLimitBackoffBase is the first wait after a 429 without a usable
	// Retry-After (old Riot rate-limit doc: "back off … e.g., 1 second").
	rateLimitBackoffBase = time.Second
	rateLimitBackoffMax  = time.Minute
	errorBodyMax         = 4 << 10
)

// Config configures a Client. Only APIKey and Limiter are required.
type Config struct {
	// APIKey is sent in the X-Riot-Token header and nowhere else. Required.
	APIKey string
	// BaseURL is a URL template containing {route}, replaced by the routing
	// value ("na1", "europe"). Default DefaultBaseURL. A path prefix works
	// too, e.g. "http://127.0.0.1:8080/{route}" for a local simulator.
	BaseURL string
	// Timeout bounds one HTTP attempt including reading the body
	// (RIOT_HTTP_TIMEOUT_MS). Default 10s.
	Timeout time.Duration
	// Limiter admits every request. Required.
	Limiter Limiter
	// HTTPClient sends requests; default a client with no timeout of its own
	// (Timeout applies per attempt) on NewTransport. Its Transport must not
	// add Accept-Encoding handling of its own; the client decodes gzip
	// itself. Build it on NewTransport (a wrapper may expose it with
	// Unwrap() http.RoundTripper): its connections check each request's
	// grant in their first Write. A bare *http.Transport is used through a
	// clone whose connections do the same (HTTP/1.1, reset on close),
	// those of its own DialTLSContext included; on any other transport the
	// check runs before it is called.
	HTTPClient *http.Client
	// Logger receives the one error log when the key is rejected. Default slog.Default().
	Logger *slog.Logger
	// MaxBodyBytes caps a decoded 2xx body; a larger one is KindDecode. Default 16 MiB.
	MaxBodyBytes int64

	// MaxRetries is how many times a 429 is retried in-process, and only when
	// the Retry-After fits before ctx's deadline. 0 means the default (2);
	// negative disables.
	MaxRetries int
	// ServerRetries is how many times an interactive call (not
	// WithBackground) is retried in-process after a 5xx or a transport
	// error, waiting ServerRetryBase·2ⁿ and only if that fits before ctx's
	// deadline. Default 0: callers own the retry schedule. Background calls
	// are never retried on 5xx.
	ServerRetries int
	// ServerRetryBase is the first backoff of ServerRetries. Default 1s.
	ServerRetryBase time.Duration

	// BreakerTimeout is how long a route's breaker stays open before letting
	// a probe through (half-open). Default 30s.
	BreakerTimeout time.Duration
	// BreakerFailures is the number of consecutive 5xx/transport failures on
	// one route that opens its breaker. Default 5.
	BreakerFailures int
	// BreakerHalfOpenRequests is how many probes a half-open breaker lets
	// through; that many successes close it. Default 1.
	BreakerHalfOpenRequests int

	// OnKeyRejected is called once, from the request's goroutine, when this
	// client proves the key rejected (KeyRejectAfter answers 401 or 403 in
	// a row from a key endpoint; not when RejectKey is called). Optional;
	// used to share the rejection with other processes.
	OnKeyRejected func(status int)
	// OnKeyAccepted is called, from the request's goroutine, when a probe
	// finds a rejected key accepted again (not when AcceptKey is called).
	// Optional; used to clear the shared rejection.
	OnKeyAccepted func()
	// KeyRejectAfter is how many 401 or 403 answers in a row from a key
	// endpoint (account-v1, match-v5, which every key may call; never an
	// answer that came through a redirect) prove the key rejected. Any other
	// answer below 500 from a key endpoint starts the count again; a 401 or
	// 403 from any other endpoint or through a redirect fails only its own
	// call. Default 2.
	KeyRejectAfter int
	// KeyProbeMin and KeyProbeMax bound the back-off between probes of a
	// rejected key: the first key-endpoint call KeyProbeMin after the
	// rejection is sent (outside the limiter, one at a time), and each
	// probe answered 401/403 doubles the wait up to KeyProbeMax. A probe
	// answered otherwise (below 500) accepts the key again. Defaults 1 min
	// and 30 min.
	KeyProbeMin, KeyProbeMax time.Duration
	// Now is the clock for a 429's RetryAt, retry deadlines and KeyRejected
	// times. Default time.Now. (Breakers use the wall clock: gobreaker's own.)
	Now func() time.Time
	// Sleep waits d or until ctx ends (then it returns ctx.Err()); used
	// before in-process retries. Default a timer. Tests replace it.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Client calls the Riot API. It is safe for concurrent use. Every call goes
// through Config.Limiter, then the routing host's circuit breaker, then HTTP.
// Every error it returns is an *Error.
type Client struct {
	apiKey  string
	base    string
	timeout time.Duration
	lim     Limiter
	hc      *http.Client
	log     *slog.Logger
	maxBody int64

	maxRetries    int
	serverRetries int
	serverBase    time.Duration

	brTimeout  time.Duration
	brFailures int
	brHalfOpen int

	onKeyRejected func(int)
	onKeyAccepted func()
	keyAfter      int
	probeMin      time.Duration
	probeMax      time.Duration
	now           func() time.Time
	sleep         func(context.Context, time.Duration) error

	mu       sync.Mutex
	breakers map[string]*routeBreaker
	key      keyState

	tracer  trace.Tracer
	metrics clientMetrics
}

type keyState struct {
	rejected bool
	status   int
	at       time.Time
	streak   int           // 401/403 answers in a row from key endpoints
	probeAt  time.Time     // when the next probe of a rejected key may go
	backoff  time.Duration // the wait before the next probe after this one fails
	probing  bool          // a probe is in flight
}

// Defaults of Config's key rejection fields.
const (
	DefaultKeyRejectAfter = 2
	DefaultKeyProbeMin    = time.Minute
	DefaultKeyProbeMax    = 30 * time.Minute
)

type routeBreaker struct {
	cb       *gobreaker.TwoStepCircuitBreaker[struct{}]
	mu       sync.Mutex
	openedAt time.Time
}

type clientMetrics struct {
	requests    metric.Int64Counter
	duration    metric.Float64Histogram
	keyRejected metric.Int64Counter
	breaker     metric.Int64Counter
	retries     metric.Int64Counter
	expired     metric.Int64Counter
}

// New validates cfg and returns a Client. It fails when APIKey is empty,
// Limiter is nil, or BaseURL is not an http(s) URL template with {route}.
func New(cfg Config) (*Client, error) {
	if strings.TrimSpace(cfg.APIKey) == "" {
		return nil, errors.New("riot: APIKey is required")
	}
	if cfg.Limiter == nil {
		return nil, errors.New("riot: Limiter is required")
	}
	base := cfg.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	base = strings.TrimRight(base, "/")
	if err := validateBaseURL(base); err != nil {
		return nil, err
	}
	c := &Client{
		apiKey:        cfg.APIKey,
		base:          base,
		timeout:       orDefault(cfg.Timeout, DefaultTimeout),
		lim:           cfg.Limiter,
		hc:            cfg.HTTPClient,
		log:           cfg.Logger,
		maxBody:       cfg.MaxBodyBytes,
		maxRetries:    cfg.MaxRetries,
		serverRetries: max(cfg.ServerRetries, 0),
		serverBase:    orDefault(cfg.ServerRetryBase, DefaultServerRetryBase),
		brTimeout:     orDefault(cfg.BreakerTimeout, DefaultBreakerTimeout),
		brFailures:    cfg.BreakerFailures,
		brHalfOpen:    cfg.BreakerHalfOpenRequests,
		onKeyRejected: cfg.OnKeyRejected,
		onKeyAccepted: cfg.OnKeyAccepted,
		keyAfter:      cfg.KeyRejectAfter,
		probeMin:      orDefault(cfg.KeyProbeMin, DefaultKeyProbeMin),
		probeMax:      orDefault(cfg.KeyProbeMax, DefaultKeyProbeMax),
		now:           cfg.Now,
		sleep:         cfg.Sleep,
		breakers:      map[string]*routeBreaker{},
		tracer:        otel.Tracer("riftflow/riot"),
	}
	c.hc = sendingClient(c.hc)
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.maxBody <= 0 {
		c.maxBody = DefaultMaxBodyBytes
	}
	switch {
	case c.maxRetries == 0:
		c.maxRetries = DefaultMaxRetries
	case c.maxRetries < 0:
		c.maxRetries = 0
	}
	if c.brFailures <= 0 {
		c.brFailures = DefaultBreakerFailures
	}
	if c.brHalfOpen <= 0 {
		c.brHalfOpen = 1
	}
	if c.keyAfter <= 0 {
		c.keyAfter = DefaultKeyRejectAfter
	}
	c.probeMax = max(c.probeMax, c.probeMin)
	if c.now == nil {
		c.now = time.Now
	}
	if c.sleep == nil {
		c.sleep = tick.Sleep
	}
	if err := c.initMetrics(); err != nil {
		return nil, fmt.Errorf("riot: metrics: %w", err)
	}
	return c, nil
}

// sendingClient is the copy of hc (nil: one on NewTransport) a Client
// sends with. Its redirects stay on the request's host: Go's client copies
// custom headers, X-Riot-Token included, to every redirect whatever its
// host, so any other is refused and the key never leaves Riot's hosts (a
// CheckRedirect of hc's own is kept). Every request's grant is checked
// immediately before the request goes on the wire (sendGuard; an
// *http.Transport's connections check it in their first Write, guarded).
func sendingClient(hc *http.Client) *http.Client {
	var out http.Client
	if hc != nil {
		out = *hc
	} else {
		out.Transport = NewTransport(0)
	}
	if out.CheckRedirect == nil {
		out.CheckRedirect = sameHostRedirect
	}
	if t, ok := out.Transport.(*http.Transport); ok {
		out.Transport = guarded(t)
	}
	out.Transport = sendGuard{next: out.Transport}
	return &out
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

func validateBaseURL(base string) error {
	if !strings.Contains(base, "{route}") {
		return fmt.Errorf("riot: BaseURL %q has no {route}", base)
	}
	u, err := url.Parse(strings.ReplaceAll(base, "{route}", "na1"))
	if err != nil {
		return fmt.Errorf("riot: BaseURL %q: %w", base, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("riot: BaseURL %q: scheme must be http or https", base)
	}
	if u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("riot: BaseURL %q: want scheme://host[/prefix] without query, fragment or credentials", base)
	}
	return nil
}

func (c *Client) initMetrics() error {
	m := otel.Meter("riftflow/riot")
	var err error
	c.metrics.duration, err = m.Float64Histogram("riot.client.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of one Riot API HTTP attempt, body included."))
	for _, k := range []struct {
		counter    *metric.Int64Counter
		name, desc string
	}{
		{&c.metrics.requests, "riot.client.requests", "Riot API HTTP attempts by route, method and outcome (status code or error kind)."},
		{&c.metrics.keyRejected, "riot.client.key_rejected", "Times the API key was marked rejected (401/403 or RejectKey)."},
		{&c.metrics.breaker, "riot.client.breaker.transitions", "Circuit breaker state changes by route and new state."},
		{&c.metrics.retries, "riot.client.retries", "In-process retries by route, method and error kind."},
		{&c.metrics.expired, "riot.client.grants_expired", "Rate-limit grants found past their send deadline in the transport: returned unsent and retaken."},
	} {
		var e error
		*k.counter, e = m.Int64Counter(k.name, metric.WithDescription(k.desc))
		err = errors.Join(err, e)
	}
	return err
}

// ---- priority ----

type backgroundKey struct{}

// WithBackground returns a context whose Riot calls are background work
// (Call.Background = true): backfills and scheduled syncs that the limiter
// serves after interactive calls, and that the client never retries on 5xx
// in-process. Calls are interactive unless their context went through
// WithBackground.
func WithBackground(ctx context.Context) context.Context {
	return context.WithValue(ctx, backgroundKey{}, true)
}

// IsBackground reports whether ctx was marked by WithBackground.
func IsBackground(ctx context.Context) bool {
	b, _ := ctx.Value(backgroundKey{}).(bool)
	return b
}

// ---- key guard ----

// KeyRejected reports whether the API key is rejected (proven by
// Config.KeyRejectAfter answers 401/403 in a row from key endpoints, or
// RejectKey), with the status and when it happened. While it is, every
// call fails at once with KindKeyRejected and sends nothing, except one
// probe at a time after a back-off (Config.KeyProbeMin, KeyProbeMax).
func (c *Client) KeyRejected() (rejected bool, status int, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.key.rejected, c.key.status, c.key.at
}

// KeyProbeAt is when a rejected key's next probe may be sent (zero when
// the key is not rejected).
func (c *Client) KeyProbeAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.key.rejected {
		return time.Time{}
	}
	return c.key.probeAt
}

// RejectKey marks the key rejected with the given status (401 or 403) as if
// Riot had answered it, e.g. when another process shared its rejection.
// It does not call Config.OnKeyRejected. Repeated calls keep the first status.
func (c *Client) RejectKey(status int) {
	c.rejectKey(status, false)
}

// AcceptKey clears a rejection (an operator's `riftflow clear-key-rejection`,
// or another process's successful probe, seen through the shared limiter).
// It does not call Config.OnKeyAccepted.
func (c *Client) AcceptKey() { c.acceptKey(false) }

func (c *Client) rejectKey(status int, observed bool) {
	c.mu.Lock()
	if c.key.rejected {
		c.mu.Unlock()
		return
	}
	now := c.now()
	c.key = keyState{rejected: true, status: status, at: now, probeAt: now.Add(c.probeMin), backoff: min(2*c.probeMin, c.probeMax)}
	c.mu.Unlock()

	c.log.Error("riot API key rejected; refusing every call with it but one probe at a time, or until `riftflow clear-key-rejection`",
		"status", status, "observed", observed, "first_probe_in", c.probeMin)
	c.metrics.keyRejected.Add(context.Background(), 1,
		metric.WithAttributes(attribute.Int("status", status), attribute.Bool("observed", observed)))
	if observed && c.onKeyRejected != nil {
		c.onKeyRejected(status)
	}
}

func (c *Client) acceptKey(observed bool) {
	c.mu.Lock()
	was := c.key.rejected
	c.key = keyState{}
	c.mu.Unlock()
	if !was {
		return
	}
	c.log.Warn("riot API key accepted again; calls resume", "observed", observed)
	if observed && c.onKeyAccepted != nil {
		c.onKeyAccepted()
	}
}

// keyEndpoint reports whether method's 401/403 answers count as proof of a
// rejected key: account-v1 and match-v5, which every key may call (Riot
// answers 403 to a key not approved for a product's endpoints).
func keyEndpoint(method string) bool {
	return strings.HasPrefix(method, "account-v1.") || strings.HasPrefix(method, "match-v5.")
}

// admit decides whether req may go with the key: yes when it is not
// rejected; as the probe when it is, req calls a key endpoint, no probe is
// in flight and the back-off has passed; else the KindKeyRejected error.
func (c *Client) admit(req request) (probe bool, err *Error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := &c.key
	if !k.rejected {
		return false, nil
	}
	if keyEndpoint(req.method) && !k.probing && !c.now().Before(k.probeAt) {
		k.probing = true
		return true, nil
	}
	return false, &Error{Kind: KindKeyRejected, Op: req.method, Route: req.route, Status: k.status,
		Msg: "API key rejected at " + k.at.UTC().Format(time.RFC3339) + "; call refused until a probe passes (next at " +
			k.probeAt.UTC().Format(time.RFC3339) + ")"}
}

// keyAnswer records what Riot answered req (status 0: no answer) for the
// key's proof and probe, and marks the key rejected or accepted when that
// is proven. An answer through a redirect or from another endpoint counts
// for nothing.
func (c *Client) keyAnswer(req request, status int, redirected, probe bool) {
	rejectedAnswer := status == http.StatusUnauthorized || status == http.StatusForbidden
	counts := keyEndpoint(req.method) && !redirected && status > 0 && status < 500
	c.mu.Lock()
	k := &c.key
	if probe {
		k.probing = false
		switch {
		case counts && !rejectedAnswer:
			c.mu.Unlock()
			c.acceptKey(true)
			return
		case counts:
			k.probeAt = c.now().Add(k.backoff)
			k.backoff = min(2*k.backoff, c.probeMax)
		default: // no answer, a 5xx or a redirect: try again after the same wait
			k.probeAt = c.now().Add(k.backoff / 2)
		}
		c.mu.Unlock()
		return
	}
	switch {
	case !counts || k.rejected:
		c.mu.Unlock()
	case !rejectedAnswer:
		k.streak = 0
		c.mu.Unlock()
	default:
		k.streak++
		proven := k.streak >= c.keyAfter
		c.mu.Unlock()
		if proven {
			c.rejectKey(status, true)
		}
	}
}

// ---- breaker ----

// errBreakerExcluded and errBreakerFailure tell the breaker how to count an
// attempt; the breaker never sees the caller's errors.
var (
	errBreakerExcluded = errors.New("excluded")
	errBreakerFailure  = errors.New("failure")
)

func (c *Client) breaker(route string) *routeBreaker {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := c.breakers[route]; ok {
		return b
	}
	b := &routeBreaker{}
	failures := uint32(c.brFailures)
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        route,
		MaxRequests: uint32(c.brHalfOpen),
		Timeout:     c.brTimeout,
		ReadyToTrip: func(n gobreaker.Counts) bool { return n.ConsecutiveFailures >= failures },
		IsExcluded:  func(err error) bool { return errors.Is(err, errBreakerExcluded) },
		OnStateChange: func(name string, _, to gobreaker.State) {
			if to == gobreaker.StateOpen {
				b.mu.Lock()
				b.openedAt = time.Now() // gobreaker's own clock
				b.mu.Unlock()
			}
			c.metrics.breaker.Add(context.Background(), 1, metric.WithAttributes(
				attribute.String("route", name), attribute.String("state", to.String())))
		},
	})
	c.breakers[route] = b
	return b
}

// BreakerState returns the state of route's breaker ("closed", "half-open",
// "open"); "closed" for a route never called.
func (c *Client) BreakerState(route string) string {
	c.mu.Lock()
	b, ok := c.breakers[route]
	c.mu.Unlock()
	if !ok {
		return gobreaker.StateClosed.String()
	}
	return b.cb.State().String()
}

// breakerOutcome maps a call's result to what the breaker should count:
// 5xx and transport failures trip it; success, 404, 429, other 4xx, decode
// errors and the caller's own cancellation do not.
func breakerOutcome(err *Error, callerDone bool) error {
	switch {
	case err == nil:
		return nil
	case callerDone:
		return errBreakerExcluded
	case err.Kind == KindServer || err.Kind == KindTransport:
		return errBreakerFailure
	case err.Kind == KindRateLimited:
		return errBreakerExcluded
	}
	return nil
}

// ---- request ----

// request describes one endpoint call. path holds escaped segments.
type request struct {
	route    string
	method   string // method ID, e.g. "match-v5.getMatch"
	template string // path template for traces, e.g. "/lol/match/v5/matches/{matchId}"
	path     string
	query    url.Values
	// scan, when set, asks for the 2xx body as Riot sent it, gzip
	// (readKeptBody): the decompressed document is only scanned into it.
	scan *DocScan
}

// get performs req with limiting, breaking, retries and tracing, returning
// the decoded 2xx body.
func (c *Client) get(ctx context.Context, req request) (body []byte, err error) {
	bg := IsBackground(ctx)
	ctx, span := c.tracer.Start(ctx, "riot "+req.method, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("riot.route", req.route),
			attribute.String("riot.method", req.method),
			attribute.String("url.template", req.template),
			attribute.Bool("riot.background", bg),
		))
	var (
		status  int
		waited  time.Duration
		retries int
	)
	defer func() {
		span.SetAttributes(
			attribute.Int("http.response.status_code", status),
			attribute.Int64("riot.ratelimit.wait_ms", waited.Milliseconds()),
			attribute.Int("riot.retries", retries),
		)
		if err != nil {
			var re *Error
			if errors.As(err, &re) {
				span.SetAttributes(attribute.String("riot.error.kind", re.Kind.String()))
			}
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()

	rlBackoff := rateLimitBackoffBase
	for attempt := 0; ; attempt++ {
		var w time.Duration
		body, status, w, err = c.attempt(ctx, req, bg, rlBackoff)
		waited += w
		if err == nil {
			return body, nil
		}
		e := err.(*Error)
		var wait time.Duration
		switch {
		case e.Kind == KindRateLimited && e.Status == http.StatusTooManyRequests && retries < c.maxRetries:
			// Only Riot's 429s: a limiter refusal means "reschedule", not "wait here".
			wait = max(e.RetryAt.Sub(c.now()), 0)
			rlBackoff = min(2*rlBackoff, rateLimitBackoffMax)
		case (e.Kind == KindServer || e.Kind == KindTransport) && !bg && ctx.Err() == nil &&
			retries < c.serverRetries:
			wait = e.RetryDelay(c.now(), c.serverBase<<retries)
		default:
			return nil, err
		}
		if d, ok := ctx.Deadline(); ok && c.now().Add(wait).After(d) {
			return nil, err
		}
		if serr := c.sleep(ctx, wait); serr != nil {
			return nil, err
		}
		waited += wait
		retries++
		c.metrics.retries.Add(ctx, 1, metric.WithAttributes(attribute.String("route", req.route),
			attribute.String("method", req.method), attribute.String("kind", e.Kind.String())))
	}
}

// attempt makes one request: key check, breaker, limiter, HTTP. It returns
// the 2xx body, the HTTP status (0 if none), the time spent in the limiter
// and an *Error. rlBackoff is the wait used for a 429 without Retry-After.
func (c *Client) attempt(ctx context.Context, req request, bg bool, rlBackoff time.Duration) ([]byte, int, time.Duration, error) {
	probe, kerr := c.admit(req)
	if kerr != nil {
		return nil, 0, 0, kerr
	}
	if probe {
		return c.probe(ctx, req, rlBackoff)
	}
	br := c.breaker(req.route)
	done, berr := br.cb.Allow()
	if berr != nil {
		br.mu.Lock()
		retryAt := br.openedAt.Add(c.brTimeout)
		br.mu.Unlock()
		if errors.Is(berr, gobreaker.ErrTooManyRequests) || retryAt.Before(c.now()) {
			// Half-open with its probe in flight: try again shortly.
			retryAt = c.now().Add(min(c.brTimeout, time.Second))
		}
		return nil, 0, 0, &Error{Kind: KindBreakerOpen, Op: req.method, Route: req.route,
			RetryAt: retryAt, Msg: "circuit breaker " + br.cb.State().String(), Err: berr}
	}

	start := c.now()
	var (
		body       []byte
		status     int
		h          http.Header
		redirected bool
		rerr       *Error
	)
	for {
		permit, err := c.lim.Acquire(ctx, Call{Route: req.route, Method: req.method, Background: bg})
		if err != nil {
			done(errBreakerExcluded)
			return nil, 0, c.now().Sub(start), c.limiterError(req, err)
		}
		// The key may have been rejected while this call waited.
		if _, kerr := c.admit(request{method: "", route: req.route}); kerr != nil {
			kerr.Op = req.method
			permit.Cancel()
			done(errBreakerExcluded)
			return nil, 0, c.now().Sub(start), kerr
		}
		body, status, h, redirected, rerr = c.roundTrip(withPermit(ctx, permit), req)
		if rerr != nil && errors.Is(rerr, ErrGrantExpired) {
			// Not sent: the grant's deadline passed before the request
			// reached the wire, and Send returned the permit. Take a new
			// one, in a later window.
			c.metrics.expired.Add(ctx, 1, metric.WithAttributes(attribute.String("route", req.route),
				attribute.String("method", req.method)))
			continue
		}
		// When headers arrived but the body failed (truncated gzip), Riot did
		// answer and count the call: the limiter gets that status and headers.
		permit.Done(status, h)
		break
	}
	waited := c.now().Sub(start)
	callerDone := rerr != nil && ctx.Err() != nil
	if rerr == nil && (status < 200 || status > 299) {
		rerr = c.statusError(req, status, h, body, rlBackoff)
	}
	done(breakerOutcome(rerr, callerDone))
	outcome := strconv.Itoa(status)
	if rerr != nil && status == 0 {
		outcome = rerr.Kind.String()
	}
	c.metrics.requests.Add(ctx, 1, metric.WithAttributes(attribute.String("route", req.route),
		attribute.String("method", req.method), attribute.String("outcome", outcome)))
	c.keyAnswer(req, status, redirected, false)
	if rerr != nil {
		return nil, status, waited, rerr
	}
	return body, status, waited, nil
}

// limiterError is Acquire's error as an *Error naming req. A key rejection
// another process proved (the shared limiter) starts this process's own
// probe schedule.
func (c *Client) limiterError(req request, err error) *Error {
	var re *Error
	if errors.As(err, &re) {
		if re.Op == "" {
			re.Op = req.method
		}
		if re.Route == "" {
			re.Route = req.route
		}
		if re.Kind == KindKeyRejected {
			c.rejectKey(re.Status, false)
		}
		return re
	}
	return &Error{Kind: KindTransport, Op: req.method, Route: req.route,
		Msg: "waiting for rate limiter", Err: err}
}

// probe sends req as the probe of a rejected key (admit): straight to
// Riot, outside the breaker and the limiter (nothing else is sent with the
// key meanwhile, and a probe goes at most once per back-off per process),
// and lets keyAnswer judge the answer.
func (c *Client) probe(ctx context.Context, req request, rlBackoff time.Duration) ([]byte, int, time.Duration, error) {
	body, status, h, redirected, rerr := c.roundTrip(ctx, req)
	if rerr == nil && (status < 200 || status > 299) {
		rerr = c.statusError(req, status, h, body, rlBackoff)
	}
	c.metrics.requests.Add(ctx, 1, metric.WithAttributes(attribute.String("route", req.route),
		attribute.String("method", req.method), attribute.String("outcome", "probe "+strconv.Itoa(status))))
	c.keyAnswer(req, status, redirected, true)
	if rerr != nil {
		return nil, status, 0, rerr
	}
	return body, status, 0, nil
}

// roundTrip sends the GET and reads the body (decoded from gzip, capped).
// A non-nil *Error is a transport or size failure; the status and headers
// are those of the response if one arrived, and redirected says it came
// from a (same-host) redirect's target rather than the URL asked for.
func (c *Client) roundTrip(ctx context.Context, req request) ([]byte, int, http.Header, bool, *Error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	u := strings.ReplaceAll(c.base, "{route}", req.route) + req.path
	if len(req.query) > 0 {
		u += "?" + req.query.Encode()
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, nil, false, &Error{Kind: KindBadRequest, Op: req.method, Route: req.route,
			Msg: "building request", Err: err}
	}
	hr.Header.Set("X-Riot-Token", c.apiKey)
	hr.Header.Set("Accept", "application/json")
	hr.Header.Set("Accept-Encoding", "gzip")

	t0 := time.Now()
	resp, err := c.hc.Do(hr)
	if err != nil {
		return nil, 0, nil, false, c.transportError(ctx, req, 0, err)
	}
	defer resp.Body.Close()
	redirected := resp.Request != nil && resp.Request.URL.String() != hr.URL.String()
	limit := c.maxBody
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		limit = errorBodyMax
	}
	var body []byte
	var rerr error
	if req.scan != nil && resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		body, rerr = readKeptBody(resp, limit, req.scan)
	} else {
		body, rerr = readBody(resp, limit)
	}
	c.metrics.duration.Record(ctx, time.Since(t0).Seconds(), metric.WithAttributes(
		attribute.String("route", req.route), attribute.String("method", req.method)))
	if rerr != nil {
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			// An error body is informational only: classify by status.
			return nil, resp.StatusCode, resp.Header, redirected, nil
		}
		if errors.Is(rerr, errBodyTooLarge) || errors.Is(rerr, ErrJSONBounds) {
			return nil, resp.StatusCode, resp.Header, redirected, &Error{Kind: KindDecode, Op: req.method,
				Route: req.route, Status: resp.StatusCode, Err: rerr}
		}
		return nil, resp.StatusCode, resp.Header, redirected, c.transportError(ctx, req, resp.StatusCode, rerr)
	}
	return body, resp.StatusCode, resp.Header, redirected, nil
}

var errBodyTooLarge = errors.New("response body exceeds the size limit")

// readBody reads at most limit decoded bytes, gunzipping when the server
// says Content-Encoding: gzip.
func readBody(resp *http.Response, limit int64) ([]byte, error) {
	var r io.Reader = resp.Body
	if strings.EqualFold(strings.TrimSpace(resp.Header.Get("Content-Encoding")), "gzip") {
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("gzip: %w", err)
		}
		defer zr.Close()
		r = zr
	}
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w (%d bytes)", errBodyTooLarge, limit)
	}
	return b, nil
}

// ErrCrossHostRedirect is returned (wrapped, as a KindTransport Error) when
// Riot's answer redirects to another host: the client refuses to follow it,
// so the API key is sent to no host but the one the request was made to.
var ErrCrossHostRedirect = errors.New("refused a redirect to another host (the API key is only sent to the configured API host)")

// sameHostRedirect is the client's http.Client.CheckRedirect: at most 5
// redirects, all on the first request's scheme and host.
func sameHostRedirect(req *http.Request, via []*http.Request) error {
	first := via[0].URL
	if req.URL.Host != first.Host || req.URL.Scheme != first.Scheme {
		return fmt.Errorf("%w: %s to %s://%s", ErrCrossHostRedirect, first.Host, req.URL.Scheme, req.URL.Host)
	}
	if len(via) >= 5 {
		return errors.New("stopped after 5 redirects")
	}
	return nil
}
