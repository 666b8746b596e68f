// Package resolver is riftflow's first stage. It consumes IngestRequests
// from lol.ingest.request (interactive) and lol.ingest.request.background,
// validates them, resolves a Riot ID to a PUUID through account-v1 (cached
// in the riot-ids KV bucket for a day), and publishes one SyncCommand on
// lol.sync.<platform> (or lol.sync.<platform>.interactive).
//
// The two ingest queues have their own consumers and workers, so a user's
// request is never queued behind scheduled ones; background lookups also
// yield to interactive ones in the Riot rate limiter.
//
// A request that can never succeed (bad JSON, unknown platform, a Riot ID
// without '#', an unknown player), or whose account lookup still fails on
// the consumer's last delivery, is terminated with a reason published on
// lol.ingest.rejected; nothing else waits for it.
package resolver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/syncjob"
)

// Accounts is the part of the Riot client the resolver uses
// (account-v1 GET /riot/account/v1/accounts/by-riot-id/{gameName}/{tagLine},
// GET /riot/account/v1/accounts/by-puuid/{puuid} and, for a request
// without a platform, GET /riot/account/v1/region/by-game/lol/by-puuid/{puuid}).
type Accounts interface {
	AccountByRiotID(ctx context.Context, region riot.Region, id riot.RiotID) (riot.Account, error)
	AccountByPUUID(ctx context.Context, region riot.Region, puuid string) (riot.Account, error)
	ActiveRegion(ctx context.Context, region riot.Region, puuid string) (riot.Platform, error)
}

// Config tunes the resolver; Open reads it from the environment, New
// gives zero fields the defaults of their tags (config.Defaults).
type Config struct {
	// Ingestion's MaxMatchesPerRun and LookbackDays fill requests that
	// leave count and lookback_days at 0 (INGESTION_MAX_MATCHES_PER_RUN,
	// INGESTION_LOOKBACK_DAYS).
	config.Ingestion
	// RetryDelay is the delay before a retryable Riot failure is first
	// retried (the message is nak'ed; JetStream redelivers it), doubled per
	// delivery up to 5 min, and never shorter than a Retry-After. On the
	// consumer's last delivery the request is rejected with code 503 and
	// the reason (RESOLVER_RETRY_DELAY, default 5s).
	RetryDelay time.Duration `env:"RESOLVER_RETRY_DELAY" envDefault:"5s"`
	// AccountRegion is the account-v1 routing value (americas, asia or
	// europe; each knows every account) used for a request without a
	// platform, to resolve its Riot ID and find its player's active
	// platform (RESOLVER_ACCOUNT_REGION, default americas).
	AccountRegion riot.Region `env:"RESOLVER_ACCOUNT_REGION" envDefault:"americas"`
	// Concurrency is the number of interactive requests handled at once
	// (RESOLVER_CONCURRENCY).
	Concurrency int `env:"RESOLVER_CONCURRENCY" envDefault:"8"`
	// BackgroundConcurrency is the number of background requests
	// (lol.ingest.request.background) handled at once, beside the
	// interactive ones (RESOLVER_BACKGROUND_CONCURRENCY, default 2).
	BackgroundConcurrency int `env:"RESOLVER_BACKGROUND_CONCURRENCY" envDefault:"2"`
}

// Deps are the resolver's collaborators.
type Deps struct {
	JS       jetstream.JetStream
	Consumer jetstream.Consumer // the durable "resolver" consumer on INGEST (interactive)
	// Background is "resolver-background" on INGEST; optional (nil: only
	// the interactive queue is served).
	Background jetstream.Consumer
	RiotIDs    jetstream.KeyValue // the riot-ids bucket (TTL 1 day)
	Riot       Accounts
	Dead       *natsx.DeadLetter // the DEAD stream; nil: given-up requests are only terminated
	app.Base                     // Subjects, Logger, Tracer, Now
}

// Service is a running resolver.
type Service struct {
	cfg Config
	d   Deps
}

// New checks deps and fills defaults.
func New(cfg Config, d Deps) (*Service, error) {
	if d.JS == nil || d.Consumer == nil || d.RiotIDs == nil || d.Riot == nil {
		return nil, errors.New("resolver: JS, Consumer, RiotIDs and Riot are required")
	}
	config.Defaults(&cfg)
	switch cfg.AccountRegion {
	case riot.Americas, riot.Asia, riot.Europe:
	default:
		return nil, fmt.Errorf("resolver: RESOLVER_ACCOUNT_REGION %q: want americas, asia or europe", cfg.AccountRegion)
	}
	d.Base.Fill("resolver")
	return &Service{cfg: cfg, d: d}, nil
}

// Run consumes both queues until ctx ends, then drains in-flight requests.
func (s *Service) Run(ctx context.Context) error {
	return app.Consume(ctx, s.Handle, natsx.ConsumeOptions{Logger: s.d.Logger, Tracer: s.d.Tracer,
		Settle: natsx.SettleOptions{Backoff: natsx.Backoff{Base: s.cfg.RetryDelay, Max: maxRetryDelay}, Dead: s.d.Dead}},
		app.Queue{Consumer: s.d.Consumer, Name: "resolver", Concurrency: s.cfg.Concurrency},
		app.Queue{Consumer: s.d.Background, Name: "resolver-background", Concurrency: s.cfg.BackgroundConcurrency})
}

// maxRetryDelay caps the per-delivery backoff of a failed account lookup:
// RetryDelay, doubled per delivery, up to 5 min.
const maxRetryDelay = 5 * time.Minute

// reject refuses the request d carries with code and reason, and returns
// the error that settles d (syncjob.Reject).
func (s *Service) reject(ctx context.Context, d natsx.Delivery, requestID string, code int, reason error) error {
	return syncjob.Reject(ctx, s.d.JS, s.d.Subjects, s.d.Logger, d, requestID, code, reason, s.d.Now())
}
