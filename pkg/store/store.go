// Package store is riftflow's Postgres layer: a pgx/v5 pool traced with
// otelpgx, the schema migrations (module migrations, applied with tern), the
// persister's idempotent bulk upsert (PersistBatch), the fetch ledger of
// design 000 (match_fetches), account sync state (design 001), the job log
// (design 002), league snapshots and weekly reports (docs/designs.md).
//
// Every write is idempotent: replaying a batch or a claim changes nothing.
// Ledger statuses and kinds are the strings of pkg/bus (Outcome, Kind).
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"

	"github.com/riftflow/riftflow/migrations"
)

// ErrNotFound is returned (wrapped) when the account, sync or job asked for
// does not exist, or no longer matches the request (ResetSync).
var ErrNotFound = errors.New("store: not found")

// ErrRequestEnded is BeginSync's error for a request whose job has
// already ended (rejected while it waited, failed when replaced or
// abandoned, or completed): it must not run again.
var ErrRequestEnded = errors.New("store: the request's job has already ended")

// Ledger statuses (match_fetches.status); the same strings as bus.Outcome.
const (
	StatusUnfetched              = "unfetched"
	StatusSuccess                = "success"
	StatusTemporaryFailure       = "temporary_failure"
	StatusPermanentlyUnfetchable = "permanently_unfetchable"
	StatusOutsideRetentionWindow = "outside_retention_window"
)

// Ledger kinds (match_fetches.kind); the same strings as bus.Kind.
const (
	KindMatch    = "match"
	KindTimeline = "timeline"
)

// Store is the Postgres store. It is safe for concurrent use.
//
// Every error a Store method returns carries its fault.Kind (fault.KindOf
// reads it; no classifier is needed): Invalid for rows Postgres refuses
// for their data (SQLSTATE classes 22 and 23, 54000) and for a compressed
// document PersistBatch cannot inflate (corrupt, or over
// SetMaxDocumentBytes), Transient for everything else (the server down,
// busy, read-only or timed out, a refused connection, a closed pool,
// ErrNoAnswer, ErrNotFound, …). The kind wraps the error unchanged: its
// message keeps the SQLSTATE, and errors.Is and errors.As reach the
// *pgconn.PgError, the pgx errors and the store's own sentinel errors.
type Store struct {
	pool   *pgxpool.Pool
	maxDoc int64 // SetMaxDocumentBytes
}

// stagingDDL creates the per-connection staging tables PersistBatch copies
// into. ON COMMIT DELETE ROWS empties them at the end of every transaction
// that touched them, so they never leak rows between batches, and creating
// them once per connection avoids catalog churn per batch.
const stagingDDL = `
CREATE TEMP TABLE IF NOT EXISTS stage_matches (
    seq int, match_id text, platform text, region text, queue_id int, game_mode text,
    game_type text, game_version text, patch text, map_id int, game_creation timestamptz,
    game_start timestamptz, game_end timestamptz, duration_s int, end_of_game_result text,
    participant_count int, raw json, raw_gzip bytea, fetched_at timestamptz) ON COMMIT DELETE ROWS;
ALTER TABLE stage_matches ALTER COLUMN raw SET STORAGE EXTERNAL, ALTER COLUMN raw_gzip SET STORAGE EXTERNAL;
CREATE TEMP TABLE IF NOT EXISTS stage_participants (
    seq int, match_id text, participant_id int, puuid text, riot_id_game_name text,
    riot_id_tagline text, team_id int, champion_id int, champion_name text, champ_level int,
    team_position text, win boolean, kills int, deaths int, assists int, gold_earned int,
    cs int, vision_score int, damage_to_champions int, time_played_s int, placement int,
    individual_position text, role text, lane text, items int[], summoner1_id int, summoner2_id int,
    gold_spent int, total_damage_taken int, damage_to_objectives int, wards_placed int, wards_killed int)
    ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS stage_timelines (
    seq int, match_id text, frame_interval_ms int, frame_count int, raw json, raw_gzip bytea,
    fetched_at timestamptz) ON COMMIT DELETE ROWS;
ALTER TABLE stage_timelines ALTER COLUMN raw SET STORAGE EXTERNAL, ALTER COLUMN raw_gzip SET STORAGE EXTERNAL;
CREATE TEMP TABLE IF NOT EXISTS stage_ledger (
    seq int, match_id text, kind text, status text, attempt int, http_status int,
    error text, game_creation timestamptz, attempted_at timestamptz, request_id text) ON COMMIT DELETE ROWS;
`

// MaxConns caps the pool at n connections (DATABASE_POOL_MAX_CONNS) unless
// the URL sets pool_max_conns itself; n < 1 keeps pgx's default
// (max(4, NumCPU)).
func MaxConns(n int32) Option {
	return func(o *openOptions) { o.maxConns = n }
}

// Open connects a pool to url (a postgres:// URL or DSN; pool_* parameters
// are honoured) with the otelpgx tracer (global OTel provider), and checks
// the connection. Every connection waits at most the call timeout
// (DefaultCallTimeout, WithCallTimeout) for Postgres. It does not migrate:
// call Migrate first.
func Open(ctx context.Context, url string, opts ...Option) (*Store, error) {
	s, err := Dial(url, opts...)
	if err != nil {
		return nil, err
	}
	if err := s.Ping(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Dial is Open without the check: the pool connects on first use, so a
// caller that can work without Postgres (the match-fetcher's ledger
// check) starts while Postgres is down.
func Dial(url string, opts ...Option) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("store: parse url: %w", err)
	}
	applyTimeouts(cfg.ConnConfig)
	o := openOptions{callTimeout: callTimeout(&cfg.ConnConfig.Config)}
	for _, opt := range opts {
		opt(&o)
	}
	if o.maxConns >= 1 && !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = o.maxConns
	}
	withCallTimeout(&cfg.ConnConfig.Config, o.callTimeout)
	cfg.ConnConfig.Tracer = otelpgx.NewTracer()
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, stagingDDL)
		return err
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("store: open pool: %w", err)
	}
	if err := otelpgx.RecordStats(pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: pool stats: %w", err)
	}
	return &Store{pool: pool}, nil
}

// Default timeouts, applied by Open unless the URL sets them: a stuck
// server, a held lock or an abandoned transaction ends in an error that
// a Store method returns as Transient, instead of a handler blocked forever.
const (
	DefaultConnectTimeout   = 10 * time.Second
	DefaultStatementTimeout = "30s" // statement_timeout
	DefaultLockTimeout      = "10s" // lock_timeout
	DefaultIdleInTxnTimeout = "60s" // idle_in_transaction_session_timeout
)

// applyTimeouts sets the default connect timeout and session timeouts on cc
// where the URL did not set them (connect_timeout=…, statement_timeout=…).
func applyTimeouts(cc *pgx.ConnConfig) {
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = DefaultConnectTimeout
	}
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	for k, v := range map[string]string{
		"statement_timeout":                   DefaultStatementTimeout,
		"lock_timeout":                        DefaultLockTimeout,
		"idle_in_transaction_session_timeout": DefaultIdleInTxnTimeout,
	} {
		if _, ok := cc.RuntimeParams[k]; !ok {
			cc.RuntimeParams[k] = v
		}
	}
}

// Close closes the pool, waiting for connections in use to be released.
func (s *Store) Close() { s.pool.Close() }

// Ping checks that Postgres answers.
func (s *Store) Ping(ctx context.Context) (err error) {
	defer classified(&err)
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("store: ping: %w", err)
	}
	return nil
}

// queryRows runs sql with args and scans every row with scan. Errors are
// wrapped "store: <what>: ...".
func queryRows[T any](ctx context.Context, s *Store, what string, scan pgx.RowToFunc[T], sql string, args ...any) ([]T, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", what, err)
	}
	out, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", what, err)
	}
	return out, nil
}

// Migrate applies the embedded migrations (module migrations) to the
// database at url with tern, recording the version in public.schema_version.
// tern holds a Postgres advisory lock while migrating, so concurrent callers
// are safe; a migrated database is left unchanged.
func Migrate(ctx context.Context, url string, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("store: migrate: connect: %w", err)
	}
	defer conn.Close(context.Background())
	m, err := migrate.NewMigrator(ctx, conn, "public.schema_version")
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	if err := m.LoadMigrations(migrations.FS); err != nil {
		return fmt.Errorf("store: migrate: load: %w", err)
	}
	m.OnStart = func(seq int32, name, direction, _ string) {
		logger.Info("migrating", "sequence", seq, "name", name, "direction", direction)
	}
	if err := m.Migrate(ctx); err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	return convertRawDocuments(ctx, conn, logger)
}
