// Package fetcher is riftflow's match-fetcher. It consumes FetchCommands
// from one durable consumer per regional route (lol.match.fetch.<region>),
// calls match-v5 GET /lol/match/v5/matches/{matchId} and then
// .../{matchId}/timeline through the shared rate limiter, and publishes each
// outcome as a FetchResult: the gzip-compressed payload on
// lol.match.fetched.<region>, or the failure on lol.match.failed.<region>.
// The persister writes the rows and the fetch ledger; the fetcher holds no
// database connection.
//
// Retry semantics (design 000 and Riot's retention; the rules are
// pkg/fetchpolicy's, shared with the retry-sweeper):
//   - a temporary failure (5xx, timeout, connection error) is attempt N;
//     attempt N+1 is scheduled after Backoff[N-1] (30 s, 60 s, 120 s, 300 s)
//     as a JetStream message schedule, and the message is acked, so waiting
//     retries hold no MaxAckPending slot;
//   - a 404 for a match that may be fresh (created less than NotFoundFresh
//     ago, or of unknown age) is a failed attempt, and MaxAttempts (5) 404s
//     make the fetch permanently_unfetchable; a 404 for an older match (a
//     timeline, whose match was fetched) is final at once; a 404 for a
//     match listed in a window that reached past retention is
//     outside_retention_window at once;
//   - MaxAttempts failures other than 404 in a row end the in-process
//     retries: the fetch stays temporary_failure, "left to the
//     retry-sweeper", and the sync completes with it pending;
//   - a rate-limit wait (429, or a budget wait longer than the limiter's
//     MaxWait) is rescheduled at Riot's Retry-After and is NOT an attempt;
//   - retention is checked before calling: a match known to be older than
//     730 days, or a timeline of a match older than 365 days, is
//     outside_retention_window without a request;
//   - every schedule is recorded as the fetch's hold in the ledger, and a
//     command for a fetch already final or held by another schedule makes
//     no Riot call (holds.go).
package matchfetcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/fault"
	"github.com/riftflow/riftflow/pkg/fetchpolicy"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/riot"
)

// Matches is the part of the Riot client the fetcher uses: the documents
// as Riot sent them (gzip), checked against the client's bounds but not
// decoded (riot.Client.MatchBody).
type Matches interface {
	MatchBody(ctx context.Context, region riot.Region, matchID string) (riot.Body, error)
	TimelineBody(ctx context.Context, region riot.Region, matchID string) (riot.Body, error)
}

// Riot's retention: match-v5 serves matches for about two years and
// timelines for about one; older IDs may still be listed but answer 404
// (https://github.com/RiotGames/developer-relations/issues/902).
const (
	DefaultMatchRetention    = fetchpolicy.DefaultMatchRetention
	DefaultTimelineRetention = fetchpolicy.DefaultTimelineRetention
)

// Config tunes the fetcher; Open reads it from the environment, New gives
// zero fields the defaults of their tags (config.Defaults) and of their
// comments.
type Config struct {
	// Regions is FETCHER_REGIONS: the regional routes this process serves
	// (a Deployment per region scales them apart); Open binds their
	// consumers.
	Regions []string `env:"FETCHER_REGIONS" envDefault:"americas,asia,europe,sea" envSeparator:","`
	// Backoff is the delay before attempt N+1 after failed attempt N
	// (FETCH_BACKOFF; the last entry repeats; design 000).
	Backoff []time.Duration `env:"FETCH_BACKOFF" envDefault:"30s,60s,120s,300s" envSeparator:","`
	// FetchAttempts' MaxAttempts (FETCH_MAX_ATTEMPTS): that many 404s make
	// a fetch permanently_unfetchable; that many other failures in a row
	// (streak) end the in-process retries and leave it temporary_failure
	// for the retry-sweeper.
	config.FetchAttempts
	// Retention's MatchRetention and TimelineRetention are how long Riot
	// keeps matches (MATCH_RETENTION_DAYS, 2 years) and timelines
	// (TIMELINE_RETENTION_DAYS, 1 year).
	config.Retention
	TimelineRetention config.Days `env:"TIMELINE_RETENTION_DAYS" envDefault:"365"`
	// NotFoundFresh is how young a match must be for a 404 of it to be
	// retried (FETCH_NOT_FOUND_FRESH; fetchpolicy.Policy.FreshFor): a 404
	// for an older one (known from its fetch or the ledger) is final at
	// once.
	NotFoundFresh time.Duration `env:"FETCH_NOT_FOUND_FRESH" envDefault:"6h"`
	// KeyRejectedDelay parks fetches while the API key is rejected
	// (401/403; default 5 min).
	KeyRejectedDelay time.Duration
	// CallTimeout bounds one Riot call including its rate-limit wait and
	// in-process 429 retries (Open: RIOT_RATELIMIT_MAX_WAIT +
	// RIOT_HTTP_TIMEOUT_MS; default 20 s). A wait that would not fit comes
	// back as a rate-limit error and the fetch is rescheduled, so a long
	// Retry-After never holds a consumer slot.
	CallTimeout time.Duration
	// InteractiveConcurrency is the number of interactive fetches in flight
	// per region (FETCHER_INTERACTIVE_CONCURRENCY): they run beside the
	// background ones and the limiter serves them first.
	InteractiveConcurrency int `env:"FETCHER_INTERACTIVE_CONCURRENCY" envDefault:"4"`
	// Concurrency is the number of fetches in flight per region
	// (FETCHER_CONCURRENCY); the rate limiter, not this, sets the request
	// rate.
	Concurrency int `env:"FETCHER_CONCURRENCY" envDefault:"16"`
	// InlinePayloadMax is the largest gzip payload (bytes) published inside
	// its FetchResult (FETCH_INLINE_PAYLOAD_MAX, 512 KiB: half the FETCHED
	// stream's 1 MiB message limit); a larger one goes to the payloads
	// object store and the FetchResult carries its name, so no payload is
	// ever refetched for its size.
	InlinePayloadMax int `env:"FETCH_INLINE_PAYLOAD_MAX" envDefault:"524288"`
	// PublishPatience is how long a fetched payload's result is retried
	// when it cannot be published before the command is given back
	// (default DefaultPublishPatience, publishHeld).
	PublishPatience time.Duration
	// ResultsBacklogMax is the backpressure threshold in bytes
	// (FETCH_RESULTS_BACKLOG_MAX, 64 MiB): while the FETCHED stream
	// (Deps.Results) holds more, the background consumers pull no fetch
	// commands, until it is under half; negative: never held. See backlog.
	ResultsBacklogMax int64 `env:"FETCH_RESULTS_BACKLOG_MAX" envDefault:"67108864"`
}

// PendingReason starts the ledger error of a fetch whose in-process retries
// ended on a 5xx or timeout streak: temporary_failure, left to the
// retry-sweeper (never final).
const PendingReason = fetchpolicy.PendingReason

// DefaultBackoff is design 000's schedule.
var DefaultBackoff = fetchpolicy.DefaultBackoff

// Policy is the fetch policy of c (the rules live in pkg/fetchpolicy).
func (c Config) Policy() fetchpolicy.Policy {
	return fetchpolicy.Policy{Backoff: c.Backoff, MaxAttempts: c.MaxAttempts, MatchRetention: c.MatchRetention.Duration(),
		TimelineRetention: c.TimelineRetention.Duration(), FreshFor: c.NotFoundFresh}.WithDefaults()
}

// Deps are the fetcher's collaborators.
type Deps struct {
	JS jetstream.JetStream
	// Consumers maps a regional route to its durable consumer
	// ("match-fetcher-<region>" on FETCH).
	Consumers map[string]jetstream.Consumer
	// Interactive maps a regional route to its interactive consumer
	// ("match-fetcher-<region>-interactive"); optional.
	Interactive map[string]jetstream.Consumer
	Riot        Matches
	// Dead is the DEAD stream for invalid fetch commands; nil: they are
	// only terminated.
	Dead *natsx.DeadLetter
	// Payloads is the "payloads" object store for payloads over
	// InlinePayloadMax; nil publishes every payload inline.
	Payloads jetstream.ObjectStore
	// Results is the FETCHED stream, watched for backpressure
	// (Config.ResultsBacklogMax); nil: never held.
	Results jetstream.Stream
	// Ledger is the fetch ledger (Postgres), read before each Riot call
	// and told of each schedule (holds.go); nil: neither.
	Ledger   Ledger
	app.Base // Subjects, Logger, Tracer, Now
}

// Service is a running fetcher.
type Service struct {
	cfg Config
	d   Deps

	attempts    metric.Int64Counter
	ledger      ledgerGate
	policy      fetchpolicy.Policy
	redelivered *redeliveries
}

// New checks deps and fills defaults.
func New(cfg Config, d Deps) (*Service, error) {
	if d.JS == nil || len(d.Consumers) == 0 || d.Riot == nil {
		return nil, errors.New("fetcher: JS, Consumers and Riot are required")
	}
	config.Defaults(&cfg)
	config.Fill(&cfg, Config{PublishPatience: DefaultPublishPatience, KeyRejectedDelay: 5 * time.Minute, CallTimeout: 20 * time.Second})
	d.Base.Fill("match-fetcher")
	s := &Service{cfg: cfg, d: d, policy: cfg.Policy(), redelivered: newRedeliveries()}
	s.attempts, _ = otel.Meter("riftflow/match-fetcher").Int64Counter("riftflow.fetch.outcomes",
		metric.WithDescription("Fetch outcomes by kind and outcome (success, temporary_failure, permanently_unfetchable, outside_retention_window, rescheduled)"))
	return s, nil
}

// Run consumes every region's consumer until ctx ends, then drains.
// The background consumers are held while the FETCHED stream is over
// Config.ResultsBacklogMax (backlog); the interactive ones never are.
func (s *Service) Run(ctx context.Context) error {
	var background, interactive []app.Queue
	for region, c := range s.d.Consumers {
		background = append(background, app.Queue{Consumer: c, Name: "match-fetcher-" + region, Concurrency: s.cfg.Concurrency})
	}
	for region, c := range s.d.Interactive {
		interactive = append(interactive, app.Queue{Consumer: c, Name: "match-fetcher-" + region + "-interactive",
			Concurrency: s.cfg.InteractiveConcurrency})
	}
	opts := natsx.ConsumeOptions{Logger: s.d.Logger, Tracer: s.d.Tracer,
		InProgressEvery: 5 * time.Second, Settle: natsx.SettleOptions{Dead: s.d.Dead}}
	g, ctx := errgroup.WithContext(ctx)
	bg := ctx
	if s.d.Results != nil && s.cfg.ResultsBacklogMax > 0 {
		b := &backlog{stream: s.d.Results, max: uint64(s.cfg.ResultsBacklogMax)}
		stop := make(chan struct{})
		go func() {
			b.run(ctx, func(full bool, n uint64) {
				if full {
					s.d.Logger.Info("fetch results wait to be stored; background fetches held", "fetched_bytes", n, "max", s.cfg.ResultsBacklogMax)
				} else {
					s.d.Logger.Info("fetch results drained; background fetches resumed", "fetched_bytes", n)
				}
			})
			close(stop)
		}()
		defer func() { <-stop }()
		bg = natsx.WithHold(ctx, b.Full)
	}
	g.Go(func() error { return app.Consume(bg, s.Handle, opts, background...) })
	g.Go(func() error { return app.Consume(ctx, s.Handle, opts, interactive...) })
	return g.Wait()
}

// Handle processes one FetchCommand: Ack, or the error handle returned,
// settled by its kind.
func (s *Service) Handle(ctx context.Context, d natsx.Delivery) natsx.Result {
	return natsx.Fail(s.handleOnce(ctx, d))
}

// handle runs the FetchCommand d carries. Its error settles d by its kind:
// an undecodable command's is Invalid; a failure to publish or schedule is
// Transient, or RateLimited until the schedule's time.
func (s *Service) handle(ctx context.Context, d natsx.Delivery) error {
	var cmd bus.FetchCommand
	if err := json.Unmarshal(d.Data, &cmd); err != nil || cmd.MatchID == "" {
		if err == nil {
			err = errors.New("no match_id")
		}
		s.d.Logger.ErrorContext(ctx, "undecodable fetch command terminated", "err", err)
		return fault.Wrapf(fault.Invalid, "invalid fetch command: %v", err)
	}
	if cmd.Attempt < 1 {
		cmd.Attempt = 1
	}
	if cmd.Kind == "" {
		cmd.Kind = bus.KindMatch
	}
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(attribute.String("riot.match_id", cmd.MatchID), attribute.String("riftflow.kind", string(cmd.Kind)),
		attribute.Int("riftflow.attempt", cmd.Attempt), attribute.String("riot.puuid", cmd.PUUID))

	_, region, err := riot.ParseMatchID(cmd.MatchID)
	if err != nil || (cmd.Kind != bus.KindMatch && cmd.Kind != bus.KindTimeline) {
		if err == nil {
			err = fmt.Errorf("unknown kind %q", cmd.Kind)
		}
		return s.finish(ctx, d, cmd, bus.PermanentlyUnfetchable, 0, err.Error(), riot.Body{})
	}
	cmd.Region = string(region)
	span.SetAttributes(attribute.String("riot.region", cmd.Region))
	now := s.d.Now()

	// Retention, before any request.
	if expired, reason := s.policy.Expired(cmd.Kind, cmd.GameCreationMs, now); expired {
		return s.finish(ctx, d, cmd, bus.OutsideRetentionWindow, 0, reason, riot.Body{})
	}

	// The ledger, before any request: a fetch already final, or held by
	// another command's schedule, costs no Riot call (holds.go).
	if why := s.notNeeded(ctx, cmd); why != "" {
		s.attempts.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", string(cmd.Kind)), attribute.String("outcome", "not_needed")))
		s.d.Logger.InfoContext(ctx, "fetch command not needed, no Riot call", "match_id", cmd.MatchID, "kind", cmd.Kind,
			"attempt", cmd.Attempt, "why", why)
		return nil
	}

	rctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	if cmd.Priority == bus.Background {
		rctx = riot.WithBackground(rctx)
	}
	// The body goes on as Riot sent it (gzip): the persister decodes it,
	// once. Only the match's creation time is read here, for the
	// timeline's retention check.
	var body riot.Body
	switch cmd.Kind {
	case bus.KindMatch:
		body, err = s.d.Riot.MatchBody(rctx, region, cmd.MatchID)
	case bus.KindTimeline:
		body, err = s.d.Riot.TimelineBody(rctx, region, cmd.MatchID)
		body.GameCreationMs = 0
	}
	if err != nil {
		return s.failure(ctx, d, cmd, err)
	}
	if body.GameCreationMs > 0 {
		cmd.GameCreationMs = body.GameCreationMs
	}
	if err := s.publishHeld(ctx, d, func() error { return s.publishResult(ctx, d, cmd, bus.Success, 200, "", body) }); err != nil {
		return fault.Wrap(fault.Transient, err)
	}
	if cmd.Kind == bus.KindMatch {
		return s.nextTimeline(ctx, d, cmd)
	}
	return nil
}

// nextTimeline queues the timeline fetch of a fetched match, or records it
// outside retention without a request.
func (s *Service) nextTimeline(ctx context.Context, d natsx.Delivery, cmd bus.FetchCommand) error {
	tl := cmd
	tl.Kind, tl.Attempt, tl.NotFound, tl.NotFoundAt, tl.Hold, tl.PrevHold = bus.KindTimeline, 1, 0, 0, "", ""
	if expired, reason := s.policy.Expired(bus.KindTimeline, tl.GameCreationMs, s.d.Now()); expired {
		return s.finish(ctx, d, tl, bus.OutsideRetentionWindow, 0, reason, riot.Body{})
	}
	if err := s.publishHeld(ctx, d, func() error {
		_, err := natsx.Publish(ctx, s.d.JS, s.d.Subjects.FetchFor(tl.Region, tl.Priority), tl, jetstream.WithMsgID(bus.FetchMsgID(tl)))
		return err
	}); err != nil {
		s.d.Logger.WarnContext(ctx, "queue timeline failed, will retry the match", "match_id", cmd.MatchID, "err", err)
		return fault.Wrap(fault.Transient, fmt.Errorf("queue timeline: %w", err))
	}
	return nil
}

// failure turns a Riot error into a retry, a reschedule or a final outcome.
func (s *Service) failure(ctx context.Context, d natsx.Delivery, cmd bus.FetchCommand, err error) error {
	var re *riot.Error
	if !errors.As(err, &re) {
		if ctx.Err() != nil {
			return fault.Wrap(fault.Transient, err) // shutting down: redelivered later, same attempt
		}
		re = &riot.Error{Kind: riot.KindTransport, Err: err}
	}
	now := s.d.Now()
	switch re.Kind {
	case riot.KindRateLimited, riot.KindBreakerOpen:
		at := re.RetryAt
		if at.Before(now.Add(time.Second)) {
			at = now.Add(time.Second)
		}
		return s.reschedule(ctx, cmd, at, "rate limited", waitID(d, cmd))
	case riot.KindKeyRejected:
		s.d.Logger.ErrorContext(ctx, "Riot API key rejected; fetch parked", "match_id", cmd.MatchID, "status", re.Status)
		return s.reschedule(ctx, cmd, now.Add(s.cfg.KeyRejectedDelay), "key rejected", waitID(d, cmd))
	case riot.KindNotFound:
		return s.failedAttempt(ctx, d, cmd, re)
	case riot.KindServer, riot.KindTransport:
		if ctx.Err() != nil {
			return fault.Wrap(fault.Transient, err)
		}
		return s.failedAttempt(ctx, d, cmd, re)
	default: // 400, decode (poison payload), unknown: permanent
		return s.finish(ctx, d, cmd, bus.PermanentlyUnfetchable, re.Status, re.Error(), riot.Body{})
	}
}

// failedAttempt records attempt N as failed and schedules N+1, or ends the
// fetch, as fetchpolicy.Policy.Decide says: final (permanently_unfetchable,
// outside_retention_window), pending (temporary_failure for the
// retry-sweeper), or retried. The schedule of attempt N+1 has the message
// id "retry/<match>/<kind>/a<N+1>/s<seq>" (seq: the stream sequence of the
// message being handled), so a redelivery of attempt N (crash after
// scheduling, before the ack) cannot start a second, parallel retry chain
// within the FETCH stream's duplicate window, while a new command for the
// same attempt (the retry-sweeper's) starts its own.
func (s *Service) failedAttempt(ctx context.Context, d natsx.Delivery, cmd bus.FetchCommand, re *riot.Error) error {
	dec := s.policy.Decide(cmd, re, s.d.Now())
	switch dec.Action {
	case fetchpolicy.Final, fetchpolicy.Pending:
		return s.finish(ctx, d, dec.Cmd, dec.Outcome, re.Status, dec.Reason, riot.Body{})
	}
	if err := s.publishResult(ctx, d, dec.Cmd, bus.TemporaryFailure, re.Status, dec.Reason, riot.Body{}); err != nil {
		return fault.Wrap(fault.Transient, err)
	}
	next := dec.Cmd
	next.Attempt++
	id := ""
	if tag := deliveryTag(d); tag != "" {
		id = fmt.Sprintf("retry/%s/%s/a%d/%s", next.MatchID, next.Kind, next.Attempt, tag) + next.DedupSuffix()
	}
	return s.reschedule(ctx, next, dec.RetryAt, "retry", id)
}

// NextAttemptAt is fetchpolicy.Policy.NextAttemptAt of c.
func (c Config) NextAttemptAt(attempt int, re *riot.Error, now time.Time) time.Time {
	return c.Policy().NextAttemptAt(attempt, re, now)
}

// waitID is the schedule message id of a rate-limit or key wait: the same
// attempt waits again, so the id names the delivery being rescheduled
// (deliveryTag), and its redeliveries schedule once.
func waitID(d natsx.Delivery, cmd bus.FetchCommand) string {
	return bus.FetchWaitMsgID(cmd, deliveryTag(d))
}

// deliveryTag names the FETCH message being handled: "s<stream sequence>",
// or "" when d has no JetStream metadata. Redeliveries of one message share
// it; every other command for the same fetch has its own (the original, a
// fired retry schedule, the retry-sweeper's re-publish). The fetcher's
// message ids end with it, so the duplicate windows of FETCH and FETCHED
// swallow exactly the repeats of one delivery's work, never the work of a
// later command for the same attempt: a ledger that lost its last commits
// (a Postgres crash or failover after the persister acked) is caught up by
// the sweeper's re-publish instead of being dropped for 2–10 minutes.
func deliveryTag(d natsx.Delivery) string {
	if d.Sequence == 0 {
		return ""
	}
	return fmt.Sprintf("s%d", d.Sequence)
}

// Expired is fetchpolicy.Policy.Expired of c.
func (c Config) Expired(kind bus.Kind, gameCreationMs int64, now time.Time) (bool, string) {
	return c.Policy().Expired(kind, gameCreationMs, now)
}

// NotFoundExpired is fetchpolicy.Policy.NotFoundExpired of c.
func (c Config) NotFoundExpired(cmd bus.FetchCommand, now time.Time) bool {
	return c.Policy().NotFoundExpired(cmd, now)
}

// NotFoundGrace is fetchpolicy.NotFoundGrace.
const NotFoundGrace = fetchpolicy.NotFoundGrace

// BackoffAfter is fetchpolicy.Policy.BackoffAfter of c.
func (c Config) BackoffAfter(n int) time.Duration {
	return fetchpolicy.Policy{Backoff: c.Backoff}.BackoffAfter(n)
}

// reschedule publishes cmd as a JetStream message schedule firing at at
// onto lol.match.fetch.<region>; nil then acks the current message. id,
// when not "", is the schedule's Nats-Msg-Id: a duplicate means the same
// schedule already exists, and the message is acked all the same.
// Scheduled messages carry the trace context. A schedule that fails is
// RateLimited until its time.
func (s *Service) reschedule(ctx context.Context, cmd bus.FetchCommand, at time.Time, why, id string) error {
	cmd.PrevHold, cmd.Hold = cmd.Hold, nuid.Next()
	data, _ := json.Marshal(cmd)
	msg := nats.NewMsg(s.d.Subjects.FetchRetry(cmd.Region, bus.FetchRetryToken(cmd)))
	msg.Data = data
	if id != "" {
		msg.Header.Set(jetstream.MsgIDHeader, id)
	}
	natsx.Inject(ctx, msg.Header)
	// at is on the services' clock (s.d.Now); the NATS server fires
	// schedules on its own. Schedule by the delay, so a jump of one clock
	// does not move retries by hours (chaos suite, clock jump).
	serverAt := time.Now().Add(at.Sub(s.d.Now()))
	if err := natsx.Schedule(ctx, s.d.JS, msg, serverAt, msg.Subject, s.d.Subjects.FetchFor(cmd.Region, cmd.Priority)); err != nil {
		if errors.Is(err, natsx.ErrScheduleDuplicate) {
			s.d.Logger.InfoContext(ctx, "fetch already rescheduled (redelivery)", "match_id", cmd.MatchID, "kind", cmd.Kind, "attempt", cmd.Attempt, "id", id)
			return nil
		}
		s.d.Logger.WarnContext(ctx, "schedule failed; nak instead", "match_id", cmd.MatchID, "err", err)
		return fault.RetryAt(fmt.Errorf("schedule %s: %w", why, err), serverAt)
	}
	// After the schedule exists, never before: a hold whose schedule
	// failed would turn away every other command for the fetch.
	s.hold(ctx, cmd, at)
	s.attempts.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", string(cmd.Kind)), attribute.String("outcome", "rescheduled"), attribute.String("why", why)))
	s.d.Logger.InfoContext(ctx, "fetch rescheduled", "match_id", cmd.MatchID, "kind", cmd.Kind, "attempt", cmd.Attempt, "at", at.UTC().Format(time.RFC3339), "why", why)
	return nil
}

// finish publishes a final FetchResult; nil (Ack) on success, a Transient
// failure otherwise (the same attempt is made again, and the persister's
// ledger rules make the repeat harmless).
func (s *Service) finish(ctx context.Context, d natsx.Delivery, cmd bus.FetchCommand, o bus.Outcome, status int, reason string, body riot.Body) error {
	return fault.Wrap(fault.Transient, s.publishResult(ctx, d, cmd, o, status, reason, body))
}

// publishResult publishes a FetchResult with Nats-Msg-Id
// "<match>/<kind>/a<attempt>/<outcome>/s<seq>" (deliveryTag of d), so a
// redelivery of the same command with the same outcome dedupes, while a
// redelivered attempt that now has another outcome (a 503, then a 200 on
// redelivery) or another command for the same attempt (the sweeper's) is
// not swallowed: the ledger rules then keep the better one (a success
// always applies), and the persister's upserts store a match once.
func (s *Service) publishResult(ctx context.Context, d natsx.Delivery, cmd bus.FetchCommand, o bus.Outcome, status int, reason string, body riot.Body) error {
	gz := body.Gzip
	res := bus.FetchResult{MatchID: cmd.MatchID, Kind: cmd.Kind, Region: cmd.Region, Outcome: o, Attempt: cmd.Attempt,
		Status: status, Error: reason, Payload: gz, GameCreationMs: cmd.GameCreationMs, AttemptedAt: s.d.Now(),
		RequestID: cmd.RequestID, PUUID: cmd.PUUID}
	if o == bus.Success && cmd.Kind == bus.KindTimeline && body.Scanned {
		res.Timeline = &bus.TimelineMeta{FrameIntervalMs: body.FrameIntervalMs, FrameCount: body.FrameCount}
	}
	if len(gz) > s.cfg.InlinePayloadMax && s.d.Payloads != nil {
		name := fmt.Sprintf("%s/%s/a%d", cmd.MatchID, cmd.Kind, cmd.Attempt)
		if _, err := s.d.Payloads.PutBytes(ctx, name, gz); err != nil {
			s.d.Logger.WarnContext(ctx, "store large payload failed, will retry", "match_id", cmd.MatchID, "bytes", len(gz), "err", err)
			return fmt.Errorf("store %d-byte payload in the object store: %w", len(gz), err)
		}
		res.Payload, res.PayloadRef = nil, name
	}
	// Results keep their fetch's priority: the persister reads the
	// interactive ones from a queue of their own.
	subj := s.d.Subjects.FailedFor(cmd.Region, cmd.Priority)
	if o == bus.Success {
		subj = s.d.Subjects.FetchedFor(cmd.Region, cmd.Priority)
	}
	if cmd.Region == "" {
		subj = s.d.Subjects.FailedFor("unknown", cmd.Priority)
	}
	id := bus.FetchResultMsgID(cmd, o, deliveryTag(d))
	data, hdr, err := bus.EncodeFetchResult(res)
	if err != nil {
		return fmt.Errorf("encode fetch result: %w", err)
	}
	msg := nats.NewMsg(subj)
	msg.Data = data
	for k, v := range hdr {
		msg.Header[k] = []string{v}
	}
	if _, err := natsx.PublishMsg(ctx, s.d.JS, msg, jetstream.WithMsgID(id)); err != nil {
		s.d.Logger.WarnContext(ctx, "publish fetch result failed, will retry", "match_id", cmd.MatchID, "err", err)
		return err
	}
	s.attempts.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", string(cmd.Kind)), attribute.String("outcome", string(o))))
	if o != bus.Success {
		s.d.Logger.InfoContext(ctx, "fetch outcome", "match_id", cmd.MatchID, "kind", cmd.Kind, "attempt", cmd.Attempt, "outcome", o, "reason", reason)
	}
	return nil
}
