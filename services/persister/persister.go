// Package persister is riftflow's only writer of match data. It consumes
// FetchResults from lol.match.fetched.> and lol.match.failed.> in batches,
// turns them into rows (matches, match_participants, match_timelines) and
// fetch-ledger updates (match_fetches), writes each batch in one Postgres
// transaction (binary COPY into staging + INSERT … ON CONFLICT), and acks
// the batch's messages only after the commit. Replaying any message changes
// nothing.
//
// After a commit it publishes progress on lol.progress.<puuid>, renews the
// account's sync lock while the sync makes progress, and releases it when
// the sync completes.
package persister

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"golang.org/x/sync/errgroup"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/fault"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/syncjob"
)

// Store is the part of pkg/store the persister uses.
type Store interface {
	PersistBatch(ctx context.Context, b store.Batch) (store.BatchResult, error)
	// Ping checks that Postgres answers: the settle policy's probe, which
	// pauses consumption during an outage.
	Ping(ctx context.Context) error
}

// Config tunes the persister; Open reads the fields with env tags from the
// environment, New gives zero fields the defaults of their tags
// (config.Defaults) and of their comments.
type Config struct {
	MaxBatch int           `env:"PERSIST_MAX_BATCH" envDefault:"200"`  // messages per transaction
	MaxWait  time.Duration `env:"PERSIST_MAX_WAIT" envDefault:"200ms"` // longest wait to fill a batch
	// SyncLock's LockTTL is what a renewed sync lock lives for.
	config.SyncLock
	// MaxPayloadBytes caps a decompressed payload; larger ones are recorded
	// as permanently unfetchable (default 32 MiB).
	MaxPayloadBytes int64
	// MaxBatchBytes caps the message bytes (gzip payloads) pulled for one
	// batch (default 1.25 MiB, ≈ 10 match + timeline pairs): memory follows
	// bytes, not the message count, and a batch keeps its documents
	// compressed (each is decompressed only while copied). It is
	// raised to MinBatchBytes: a pull smaller than the FETCHED stream's
	// largest message (1 MiB) could never deliver that message.
	MaxBatchBytes int `env:"PERSIST_MAX_BATCH_BYTES" envDefault:"1310720"`
	// DecodeWorkers decode one batch's messages in parallel (default
	// GOMAXPROCS).
	DecodeWorkers int
	// Writers is the number of batches in flight, each with its own
	// transaction (default 2): while one batch is written, the next is
	// decoded.
	Writers int `env:"PERSIST_WRITERS" envDefault:"2"`
}

// Deps are the persister's collaborators.
type Deps struct {
	JS       jetstream.JetStream
	Consumer jetstream.Consumer // "persister" on FETCHED (background fetches)
	// Interactive is "persister-interactive" on FETCHED (the results of
	// interactive fetches), batched by a runner of its own so they are
	// stored while a backfill's results queue; optional.
	Interactive jetstream.Consumer
	Store       Store
	Locks       natsx.Lock        // sync-locks
	Dead        *natsx.DeadLetter // the DEAD stream; nil: rejected messages are only terminated
	// Payloads is the "payloads" object store, for FetchResults whose
	// payload is too large to travel inline (PayloadRef).
	Payloads jetstream.ObjectStore
	app.Base // Subjects, Logger, Tracer, Now
}

// MinBatchBytes is the smallest Config.MaxBatchBytes: the FETCHED stream's
// message limit (1 MiB) plus room for the message headers.
const MinBatchBytes = 1<<20 + 64<<10

// Service is a running persister.
type Service struct {
	cfg Config
	d   Deps

	batchDuration metric.Float64Histogram // riftflow.persist.batch.duration
	batchSize     metric.Int64Histogram   // riftflow.persist.batch.size
	syncDuration  metric.Float64Histogram // riftflow.sync.duration
	// life publishes progress, renews the locks of progressing syncs and
	// releases those of finished ones after each commit.
	life        syncjob.Lifecycle
	nulRepaired metric.Int64Counter // riftflow.persist.nul_repaired
}

// New checks deps and fills defaults.
func New(cfg Config, d Deps) (*Service, error) {
	if d.JS == nil || d.Consumer == nil || d.Store == nil || d.Locks.KV == nil {
		return nil, errors.New("persister: JS, Consumer, Store and Locks are required")
	}
	config.Defaults(&cfg)
	if cfg.MaxPayloadBytes <= 0 {
		cfg.MaxPayloadBytes = 32 << 20
	}
	if cfg.DecodeWorkers <= 0 {
		cfg.DecodeWorkers = runtime.GOMAXPROCS(0)
	}
	cfg.MaxBatchBytes = max(cfg.MaxBatchBytes, MinBatchBytes)
	if ds, ok := d.Store.(interface{ SetMaxDocumentBytes(int64) }); ok {
		ds.SetMaxDocumentBytes(cfg.MaxPayloadBytes) // timelines it decompresses while copying
	}
	d.Base.Fill("persister")
	s := &Service{cfg: cfg, d: d}
	m := otel.Meter("riftflow/persister")
	s.batchDuration, _ = m.Float64Histogram("riftflow.persist.batch.duration", metric.WithUnit("s"),
		metric.WithDescription("Time of one batch transaction (PersistBatch), by result (ok, error)."))
	s.batchSize, _ = m.Int64Histogram("riftflow.persist.batch.size", metric.WithUnit("{message}"),
		metric.WithDescription("Messages per persisted batch."),
		metric.WithExplicitBucketBoundaries(1, 2, 5, 10, 20, 50, 100, 200, 500))
	s.syncDuration, _ = m.Float64Histogram("riftflow.sync.duration", metric.WithUnit("s"),
		metric.WithDescription("Account sync time from the lister's lock claim to the last stored match, by status (completed, failed)."),
		metric.WithExplicitBucketBoundaries(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600))
	s.nulRepaired, _ = m.Int64Counter("riftflow.persist.nul_repaired", metric.WithUnit("{value}"),
		metric.WithDescription("Text values stored after removing NUL bytes, which Postgres text cannot hold (SQLSTATE 22021)."))
	s.life = syncjob.Lifecycle{JS: d.JS, Subjects: d.Subjects, Locks: d.Locks, Logger: d.Logger, Now: d.Now, LockTTL: cfg.LockTTL,
		Duration: s.syncDuration, By: "persister"}
	return s, nil
}

// Run consumes both queues until ctx ends, then drains. Each queue has
// Config.Writers batch loops sharing its consumer, so one batch is decoded
// while another is written.
func (s *Service) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	run := func(c jetstream.Consumer, name string) {
		for range s.cfg.Writers {
			g.Go(func() error {
				return natsx.ConsumeBatch(ctx, c, s.HandleBatch, natsx.BatchOptions{
					Name: name, MaxBatch: s.cfg.MaxBatch, MaxBytes: s.cfg.MaxBatchBytes, MaxWait: s.cfg.MaxWait,
					Logger: s.d.Logger, Tracer: s.d.Tracer,
					Settle: natsx.SettleOptions{Dead: s.d.Dead, Probe: s.d.Store.Ping},
				})
			})
		}
	}
	run(s.d.Consumer, "persister")
	if s.d.Interactive != nil {
		run(s.d.Interactive, "persister-interactive")
	}
	return g.Wait()
}

// HandleBatch persists msgs in one transaction and settles each message.
//
// The store returns its errors classified (fault.KindOf). A Transient one
// (the database is down, read-only, out of disk, or a statement or lock
// timed out) says nothing about the data: every message is retried by the
// settle policy, which also pauses the consumer until Postgres answers
// again. Only an Invalid one (SQLSTATE classes 22 and 23: the rows
// themselves) starts the one-by-one isolation, and only a message that is
// Invalid on its own is recorded as permanently unfetchable.
func (s *Service) HandleBatch(ctx context.Context, msgs []natsx.Delivery) []natsx.Result {
	items := s.decodeAll(ctx, msgs)
	var all store.Batch
	results := make([]natsx.Result, len(msgs))
	for i := range msgs {
		switch {
		case items[i].retry != nil:
			results[i] = natsx.Retry(items[i].retry)
		case items[i].bad == nil:
			all = appendBatch(all, items[i].batch)
		}
	}
	res, err := s.persist(ctx, all, len(msgs))
	if err == nil {
		for i := range results {
			if items[i].bad != nil {
				results[i] = s.poison(ctx, items[i].ref, items[i].bad)
			}
		}
		s.life.Advance(ctx, res.Progress)
		return results
	}
	if fault.KindOf(err) != fault.Invalid || len(msgs) == 1 && items[0].bad != nil {
		s.d.Logger.WarnContext(ctx, "persist batch failed, will retry", "messages", len(msgs),
			"kind", fault.KindOf(err).String(), "err", err)
		for i := range results {
			switch {
			case items[i].retry != nil:
			case items[i].bad != nil:
				results[i] = s.poison(ctx, items[i].ref, items[i].bad)
			default:
				results[i] = natsx.Fail(err)
			}
		}
		return results
	}
	// Isolate the message whose rows break the batch: store one by one.
	s.d.Logger.WarnContext(ctx, "persist batch rejected its data; retrying messages one by one", "messages", len(msgs), "err", err)
	var progress []store.SyncProgress
	for i := range msgs {
		if items[i].retry != nil {
			continue
		}
		if items[i].bad != nil {
			results[i] = s.poison(ctx, items[i].ref, items[i].bad)
			continue
		}
		r, err := s.persist(ctx, items[i].batch, 1)
		switch {
		case err == nil:
			progress = append(progress, r.Progress...)
		case fault.KindOf(err) == fault.Invalid:
			results[i] = s.poison(ctx, items[i].ref, err)
		default:
			results[i] = natsx.Fail(err)
		}
	}
	s.life.Advance(ctx, progress)
	return results
}

// persist writes b and records the batch metrics.
func (s *Service) persist(ctx context.Context, b store.Batch, msgs int) (store.BatchResult, error) {
	start := time.Now()
	res, err := s.d.Store.PersistBatch(ctx, b)
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	s.batchDuration.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(attribute.String("result", outcome)))
	s.batchSize.Record(ctx, int64(msgs))
	return res, err
}

// poison records a message whose data can never be stored in the ledger
// (when it names a match) and rejects it: the settle policy copies it, with
// the reason, to the dead-letter stream. When the ledger write itself fails
// the message is retried instead, so nothing is dropped unrecorded.
func (s *Service) poison(ctx context.Context, ref fetchRef, cause error) natsx.Result {
	if ref.matchID != "" && (ref.kind == bus.KindMatch || ref.kind == bus.KindTimeline) {
		lu := store.LedgerUpdate{MatchID: ref.matchID, Kind: string(ref.kind), Status: string(bus.PermanentlyUnfetchable),
			Attempt: max(ref.attempt, 1), HTTPStatus: ref.status, Error: truncate("unstorable payload: "+cause.Error(), 500),
			AttemptedAt: s.d.Now()}
		lb := store.Batch{Ledger: []store.LedgerUpdate{lu}}
		lb.StripNUL()
		if _, err := s.d.Store.PersistBatch(ctx, lb); err != nil {
			s.d.Logger.ErrorContext(ctx, "could not record an unstorable payload; will retry", "match_id", ref.matchID, "err", err)
			return natsx.Fail(err)
		}
	}
	s.d.Logger.ErrorContext(ctx, "unstorable message rejected", "subject", ref.subject, "match_id", ref.matchID, "err", cause)
	return natsx.Reject(fmt.Errorf("unstorable payload: %w", cause))
}

func appendBatch(a, b store.Batch) store.Batch {
	a.Matches = append(a.Matches, b.Matches...)
	a.Participants = append(a.Participants, b.Participants...)
	a.Timelines = append(a.Timelines, b.Timelines...)
	a.Ledger = append(a.Ledger, b.Ledger...)
	return a
}
