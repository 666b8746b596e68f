// Package config parses riftflow's configuration from environment variables
// into one struct per service, validates it at start-up, and prints it with
// secrets masked. Variable names follow the three designs in docs/designs.md (RIOT_API_KEY,
// RIOT_HTTP_TIMEOUT_MS, INGESTION_MAX_MATCHES_PER_RUN, CRON_*) and
// OpenTelemetry (OTEL_*); README.md lists them.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
)

// Secret is a string that never prints: String, GoString, LogValue and
// MarshalText all give "***" (or "" when unset).
type Secret string

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "***"
}

// GoString masks the secret in %#v.
func (s Secret) GoString() string { return s.String() }

// LogValue masks the secret in slog output.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText masks the secret in JSON and text encodings.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Reveal returns the secret's value, for the one place that must send it.
func (s Secret) Reveal() string { return string(s) }

// NATS is how a process reaches NATS.
type NATS struct {
	// URL of the NATS servers, comma-separated. Empty: riftflow up starts an
	// embedded server; a standalone service fails.
	URL          string `env:"NATS_URL"`
	User         string `env:"NATS_USER"`
	Password     Secret `env:"NATS_PASSWORD"`
	Token        Secret `env:"NATS_TOKEN"`
	NKeySeedFile string `env:"NATS_NKEY_SEED_FILE"`
	CredsFile    string `env:"NATS_CREDS_FILE"`
	TLSCA        string `env:"NATS_TLS_CA"`
	TLSCert      string `env:"NATS_TLS_CERT"`
	TLSKey       string `env:"NATS_TLS_KEY"`
	// SubjectPrefix is the first token of every subject (default "lol").
	SubjectPrefix string `env:"SUBJECT_PREFIX" envDefault:"lol"`
	// StreamReplicas is the replica count used by `riftflow streams apply`.
	StreamReplicas int `env:"STREAM_REPLICAS" envDefault:"1"`
}

// Postgres is how a process reaches Postgres.
type Postgres struct {
	// URL is a libpq connection string or URL. It may hold a password, so it
	// is a Secret. Empty: riftflow up starts a throwaway cluster.
	URL Secret `env:"DATABASE_URL"`
	// PoolMaxConns is the most connections a process's pool opens (pgx's
	// default would be max(4, NumCPU), which on a large node multiplies by
	// every replica). pool_max_conns in URL, when present, wins.
	PoolMaxConns int32 `env:"DATABASE_POOL_MAX_CONNS" envDefault:"8"`
}

// Riot configures the Riot API client.
type Riot struct {
	// APIKey goes in the X-Riot-Token header. Empty: riftflow up serves the
	// built-in simulator; a standalone service fails.
	APIKey Secret `env:"RIOT_API_KEY"`
	// BaseURL is a template with {route}, replaced by the platform or
	// regional routing value.
	BaseURL string `env:"RIOT_API_BASE_URL" envDefault:"https://{route}.api.riotgames.com"`
	// TimeoutMS is the per-request timeout in milliseconds.
	TimeoutMS int `env:"RIOT_HTTP_TIMEOUT_MS" envDefault:"10000"`
	// RateLimitMaxWait is the longest a handler waits for rate budget before
	// it reschedules the message instead.
	RateLimitMaxWait time.Duration `env:"RIOT_RATELIMIT_MAX_WAIT" envDefault:"10s"`
	// SharedRateLimit shares the budget through the ratelimit KV bucket.
	SharedRateLimit bool `env:"RIOT_SHARED_RATELIMIT" envDefault:"true"`
	// BackoffStart and BackoffMax shape the exponential pause of a method
	// after a 429 with a service, server or missing X-Rate-Limit-Type
	// (Riot's 429 types: application, method, service; https://developer.riotgames.com/docs/portal#web-apis_rate-limiting): BackoffStart, doubled per consecutive 429
	// up to BackoffMax. Tests shorten them; production keeps 1s and 60s.
	BackoffStart time.Duration `env:"RIOT_BACKOFF_START" envDefault:"1s"`
	BackoffMax   time.Duration `env:"RIOT_BACKOFF_MAX" envDefault:"60s"`
	// BreakerTimeout is how long a routing host's open breaker waits before
	// a half-open probe.
	BreakerTimeout time.Duration `env:"RIOT_BREAKER_TIMEOUT" envDefault:"30s"`
}

// Timeout returns TimeoutMS as a duration.
func (r Riot) Timeout() time.Duration { return time.Duration(r.TimeoutMS) * time.Millisecond }

// Ops configures the process's ops HTTP server and shutdown.
type Ops struct {
	// HTTPAddr serves /healthz, /readyz, /metrics (and the HTTP API in riftflow up).
	HTTPAddr string `env:"HTTP_ADDR" envDefault:":8080"`
	// ShutdownTimeout bounds the drain on SIGTERM; keep it below the pod's
	// terminationGracePeriodSeconds.
	ShutdownTimeout time.Duration `env:"SHUTDOWN_TIMEOUT" envDefault:"25s"`
	LogLevel        string        `env:"LOG_LEVEL" envDefault:"info"`
	LogFormat       string        `env:"LOG_FORMAT" envDefault:"text"`
	ServiceName     string        `env:"OTEL_SERVICE_NAME"`
}

// Ingestion holds the defaults applied to ingest requests (design 002).
type Ingestion struct {
	// MaxMatchesPerRun bounds the match IDs listed by one sync.
	MaxMatchesPerRun int `env:"INGESTION_MAX_MATCHES_PER_RUN" envDefault:"20"`
	// LookbackDays is how far back a full backfill reaches.
	LookbackDays int `env:"INGESTION_LOOKBACK_DAYS" envDefault:"30"`
}

// Parse fills v (a pointer to a struct built from the types above) from the
// environment and returns every problem at once.
func Parse(v any) error {
	if err := env.Parse(v); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// Validate checks the common sections inside v and reports every problem.
func Validate(v any) error {
	var errs []error
	walk(reflect.ValueOf(v), func(x any) {
		switch c := x.(type) {
		case Riot:
			if !strings.Contains(c.BaseURL, "{route}") {
				errs = append(errs, fmt.Errorf("RIOT_API_BASE_URL %q must contain {route}", c.BaseURL))
			}
			if c.TimeoutMS <= 0 {
				errs = append(errs, fmt.Errorf("RIOT_HTTP_TIMEOUT_MS must be > 0"))
			}
			if c.BackoffStart <= 0 || c.BackoffMax < c.BackoffStart {
				errs = append(errs, fmt.Errorf("RIOT_BACKOFF_START (%v) must be > 0 and <= RIOT_BACKOFF_MAX (%v)", c.BackoffStart, c.BackoffMax))
			}
			if c.BreakerTimeout <= 0 {
				errs = append(errs, fmt.Errorf("RIOT_BREAKER_TIMEOUT must be > 0"))
			}
		case Ingestion:
			if c.MaxMatchesPerRun < 1 || c.MaxMatchesPerRun > 1000 {
				errs = append(errs, fmt.Errorf("INGESTION_MAX_MATCHES_PER_RUN %d out of range 1..1000", c.MaxMatchesPerRun))
			}
			if c.LookbackDays < 1 || c.LookbackDays > 730 {
				errs = append(errs, fmt.Errorf("INGESTION_LOOKBACK_DAYS %d out of range 1..730", c.LookbackDays))
			}
		case Postgres:
			if c.PoolMaxConns < 1 {
				errs = append(errs, fmt.Errorf("DATABASE_POOL_MAX_CONNS must be >= 1, got %d", c.PoolMaxConns))
			}
		case Ops:
			if c.ShutdownTimeout <= 0 {
				errs = append(errs, fmt.Errorf("SHUTDOWN_TIMEOUT must be > 0"))
			}
		}
	})
	return errors.Join(errs...)
}

func walk(v reflect.Value, f func(any)) {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return
	}
	if v.CanInterface() {
		f(v.Interface())
	}
	for i := 0; i < v.NumField(); i++ {
		if v.Type().Field(i).IsExported() {
			walk(v.Field(i), f)
		}
	}
}

// Log writes the configuration at info level, secrets masked.
func Log(log *slog.Logger, name string, v any) {
	log.Info("config", "service", name, "values", fmt.Sprintf("%+v", v))
}

// Days is a whole number of days, read from an integer variable
// (MATCH_RETENTION_DAYS=730).
type Days int

// Duration is d as a time.Duration of 24-hour days.
func (d Days) Duration() time.Duration { return time.Duration(d) * 24 * time.Hour }

// The sections below are variables read by more than one stage: each
// stage's Config embeds the section, so the default is written once.

// SyncLock is read by the lister, the persister and the retry-sweeper.
type SyncLock struct {
	// LockTTL is SYNC_LOCK_TTL, the sync lock's lifetime between renewals.
	LockTTL time.Duration `env:"SYNC_LOCK_TTL" envDefault:"5m"`
}

// FetchAttempts is read by the match-fetcher and the retry-sweeper.
type FetchAttempts struct {
	// MaxAttempts is FETCH_MAX_ATTEMPTS: that many 404s make a fetch
	// permanently_unfetchable; that many other failures in a row end its
	// in-process retries.
	MaxAttempts int `env:"FETCH_MAX_ATTEMPTS" envDefault:"5"`
}

// Retention is read by the matchid-lister and the match-fetcher.
type Retention struct {
	// MatchRetention is MATCH_RETENTION_DAYS: how long Riot serves a match
	// (match-v5 answers 404 for older ones).
	MatchRetention Days `env:"MATCH_RETENTION_DAYS" envDefault:"730"`
}
