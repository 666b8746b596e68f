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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
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
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/synclock"
)

// Store is the part of pkg/store the persister uses.
type Store interface {
	PersistBatch(ctx context.Context, b store.Batch) (store.BatchResult, error)
	// Ping checks that Postgres answers: the settle policy's probe, which
	// pauses consumption during an outage.
	Ping(ctx context.Context) error
}

// Config tunes the persister; FromInfra reads the fields with env tags
// from the environment (the others keep their defaults).
type Config struct {
	MaxBatch int           `env:"PERSIST_MAX_BATCH" envDefault:"200"`  // messages per transaction
	MaxWait  time.Duration `env:"PERSIST_MAX_WAIT" envDefault:"200ms"` // longest wait to fill a batch
	// LockTTL is what a renewed sync lock lives for.
	LockTTL time.Duration `env:"SYNC_LOCK_TTL" envDefault:"5m"`
	// MaxPayloadBytes caps a decompressed payload; larger ones are recorded
	// as permanently unfetchable (default 32 MiB).
	MaxPayloadBytes int64
	// MaxBatchBytes caps the message bytes (gzip payloads) pulled for one
	// batch (default 1.25 MiB, ≈ 10 match + timeline pairs, ≈ 10 MB once
	// decompressed): memory follows bytes, not the message count. It is
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
	nulRepaired   metric.Int64Counter     // riftflow.persist.nul_repaired
}

// New checks deps and fills defaults.
func New(cfg Config, d Deps) (*Service, error) {
	if d.JS == nil || d.Consumer == nil || d.Store == nil || d.Locks.KV == nil {
		return nil, errors.New("persister: JS, Consumer, Store and Locks are required")
	}
	config.Fill(&cfg, Config{MaxBatch: 200, MaxWait: 200 * time.Millisecond, LockTTL: 5 * time.Minute, MaxPayloadBytes: 32 << 20,
		MaxBatchBytes: 1280 << 10, DecodeWorkers: runtime.GOMAXPROCS(0), Writers: 2})
	cfg.MaxBatchBytes = max(cfg.MaxBatchBytes, MinBatchBytes)
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

// item is one decoded message's contribution to a batch.
type item struct {
	batch store.Batch
	bad   error // the message can never be stored: terminate it
	retry error // the message could not be read now (its payload object): retry it
	// buf holds the decompressed document the batch's Raw points into,
	// returned to docPool once the batch is written.
	buf *bytes.Buffer
}

// docPool recycles the buffers documents are decompressed into, so a
// steady stream reuses the same few (bounded by the batches in flight).
var docPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledDoc is the largest buffer kept for reuse; a rare larger one is
// left to the garbage collector.
const maxPooledDoc = 4 << 20

func releaseAll(items []item) {
	for i := range items {
		if b := items[i].buf; b != nil && b.Cap() <= maxPooledDoc {
			b.Reset()
			docPool.Put(b)
		}
		items[i].buf = nil
	}
}

// decodeAll decodes msgs on up to Config.DecodeWorkers goroutines (each
// message independently; the order of items is the order of msgs).
func (s *Service) decodeAll(ctx context.Context, msgs []jetstream.Msg) []item {
	items := make([]item, len(msgs))
	workers := min(s.cfg.DecodeWorkers, len(msgs))
	if workers <= 1 {
		for i, m := range msgs {
			items[i] = s.decode(ctx, m.Data())
		}
		return items
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(msgs) {
					return
				}
				items[i] = s.decode(ctx, msgs[i].Data())
			}
		})
	}
	wg.Wait()
	return items
}

// HandleBatch persists msgs in one transaction and settles each message.
//
// Errors are classified by store.KindOf. A Transient one (the database is
// down, read-only, out of disk, or a statement or lock timed out) says
// nothing about the data: every message is retried by the settle policy,
// which also pauses the consumer until Postgres answers again. Only an
// Invalid one (SQLSTATE classes 22 and 23: the rows themselves) starts the
// one-by-one isolation, and only a message that is Invalid on its own is
// recorded as permanently unfetchable.
func (s *Service) HandleBatch(ctx context.Context, msgs []jetstream.Msg) []natsx.Result {
	items := s.decodeAll(ctx, msgs)
	defer releaseAll(items)
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
				results[i] = s.poison(ctx, msgs[i], items[i].bad)
			}
		}
		s.afterCommit(ctx, res.Progress)
		return results
	}
	if store.KindOf(err) != fault.Invalid || len(msgs) == 1 && items[0].bad != nil {
		s.d.Logger.WarnContext(ctx, "persist batch failed, will retry", "messages", len(msgs),
			"kind", store.KindOf(err).String(), "err", err)
		for i := range results {
			switch {
			case items[i].retry != nil:
			case items[i].bad != nil:
				results[i] = s.poison(ctx, msgs[i], items[i].bad)
			default:
				results[i] = natsx.Fail(fault.Wrap(store.KindOf(err), err))
			}
		}
		return results
	}
	// Isolate the message whose rows break the batch: store one by one.
	s.d.Logger.WarnContext(ctx, "persist batch rejected its data; retrying messages one by one", "messages", len(msgs), "err", err)
	var progress []store.SyncProgress
	for i, m := range msgs {
		if items[i].retry != nil {
			continue
		}
		if items[i].bad != nil {
			results[i] = s.poison(ctx, m, items[i].bad)
			continue
		}
		r, err := s.persist(ctx, items[i].batch, 1)
		switch {
		case err == nil:
			progress = append(progress, r.Progress...)
		case store.KindOf(err) == fault.Invalid:
			results[i] = s.poison(ctx, m, err)
		default:
			results[i] = natsx.Fail(fault.Wrap(store.KindOf(err), err))
		}
	}
	s.afterCommit(ctx, progress)
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
func (s *Service) poison(ctx context.Context, m jetstream.Msg, cause error) natsx.Result {
	var r bus.FetchResult
	if json.Unmarshal(m.Data(), &r) == nil && r.MatchID != "" && (r.Kind == bus.KindMatch || r.Kind == bus.KindTimeline) {
		lu := store.LedgerUpdate{MatchID: r.MatchID, Kind: string(r.Kind), Status: string(bus.PermanentlyUnfetchable),
			Attempt: max(r.Attempt, 1), HTTPStatus: r.Status, Error: truncate("unstorable payload: "+cause.Error(), 500),
			AttemptedAt: s.d.Now()}
		lb := store.Batch{Ledger: []store.LedgerUpdate{lu}}
		lb.StripNUL()
		if _, err := s.d.Store.PersistBatch(ctx, lb); err != nil {
			s.d.Logger.ErrorContext(ctx, "could not record an unstorable payload; will retry", "match_id", r.MatchID, "err", err)
			return natsx.Fail(fault.Wrap(store.KindOf(err), err))
		}
	}
	s.d.Logger.ErrorContext(ctx, "unstorable message rejected", "subject", m.Subject(), "match_id", r.MatchID, "err", cause)
	return natsx.Reject(fmt.Errorf("unstorable payload: %w", cause))
}

// afterCommit publishes progress, renews locks of progressing syncs and
// releases those of completed ones.
func (s *Service) afterCommit(ctx context.Context, progress []store.SyncProgress) {
	for _, p := range progress {
		// A finished sync's lock is released before its final event goes
		// out: a client that starts the next sync on that event must not
		// find the account still locked (409).
		if p.Status == "completed" || p.Status == "failed" {
			if v, err := synclock.Get(ctx, s.d.Locks, p.PUUID); err == nil && v.RequestID == p.RequestID && !v.Since.IsZero() {
				s.syncDuration.Record(ctx, s.d.Now().Sub(v.Since).Seconds(), metric.WithAttributes(attribute.String("status", p.Status)))
			}
			synclock.Release(ctx, s.d.Locks, p.PUUID, p.RequestID, s.d.Logger)
			s.d.Logger.InfoContext(ctx, "sync finished", "request_id", p.RequestID, "puuid", p.PUUID, "status", p.Status, "matches", p.Total)
		} else {
			synclock.Renew(ctx, s.d.Locks, p.PUUID, p.RequestID, s.cfg.LockTTL)
		}
		ev := bus.ProgressEvent{RequestID: p.RequestID, PUUID: p.PUUID, Status: p.Status, Progress: p.Progress, Total: p.Total, At: s.d.Now()}
		if _, err := natsx.Publish(ctx, s.d.JS, s.d.Subjects.Progress(p.PUUID), ev); err != nil {
			s.d.Logger.WarnContext(ctx, "publish progress failed", "puuid", p.PUUID, "err", err)
		}
	}
}

// decode turns one FetchResult message into rows and one ledger update.
func (s *Service) decode(ctx context.Context, data []byte) item {
	var r bus.FetchResult
	if err := json.Unmarshal(data, &r); err != nil {
		return item{bad: fmt.Errorf("invalid fetch result: %w", err)}
	}
	if r.PayloadRef != "" {
		if s.d.Payloads == nil {
			return item{retry: fmt.Errorf("payload %s is in the object store, which this persister has not opened", r.PayloadRef)}
		}
		gz, err := s.d.Payloads.GetBytes(ctx, r.PayloadRef)
		switch {
		case errors.Is(err, jetstream.ErrObjectNotFound):
			// Expired (kept 7 days) or never written: the fetch must be
			// made again. A temporary failure in the ledger has the
			// retry-sweeper do it.
			r.Outcome, r.Status, r.Error = bus.TemporaryFailure, 0, "payload object "+r.PayloadRef+" not found; to be fetched again"
		case err != nil:
			return item{retry: fmt.Errorf("read payload object %s: %w", r.PayloadRef, err)}
		default:
			r.Payload = gz
		}
	}
	it := s.decodeRows(r)
	if n := it.batch.StripNUL(); n > 0 {
		s.nulRepaired.Add(ctx, int64(n))
	}
	return it
}

// decodeRows is decode before the NUL repair.
func (s *Service) decodeRows(r bus.FetchResult) item {
	if r.MatchID == "" || (r.Kind != bus.KindMatch && r.Kind != bus.KindTimeline) {
		return item{bad: fmt.Errorf("fetch result without match_id or kind")}
	}
	if _, _, err := riot.ParseMatchID(r.MatchID); err != nil && r.Outcome == bus.Success {
		return item{bad: err}
	}
	lu := store.LedgerUpdate{MatchID: r.MatchID, Kind: string(r.Kind), Status: string(r.Outcome), Attempt: r.Attempt,
		HTTPStatus: r.Status, Error: truncate(r.Error, 1000), AttemptedAt: r.AttemptedAt, RequestID: r.RequestID}
	if r.GameCreationMs > 0 {
		lu.GameCreation = time.UnixMilli(r.GameCreationMs).UTC()
	}
	if lu.AttemptedAt.IsZero() {
		lu.AttemptedAt = s.d.Now()
	}
	b := store.Batch{}
	if r.Outcome != bus.Success {
		switch r.Outcome {
		case bus.TemporaryFailure, bus.PermanentlyUnfetchable, bus.OutsideRetentionWindow:
		default:
			return item{bad: fmt.Errorf("unknown outcome %q", r.Outcome)}
		}
		b.Ledger = []store.LedgerUpdate{lu}
		return item{batch: b}
	}
	buf := docPool.Get().(*bytes.Buffer)
	it := s.decodeSuccess(r, lu, buf)
	it.buf = buf
	return it
}

// decodeSuccess decodes a success's payload into buf, once: a MatchDto
// into the columns of matches and match_participants, a TimelineDto only
// scanned (riot.DocScan) for its frame interval and count. The document
// itself is stored as sent (store.MatchRow.Raw).
func (s *Service) decodeSuccess(r bus.FetchResult, lu store.LedgerUpdate, buf *bytes.Buffer) item {
	platform, region, _ := riot.ParseMatchID(r.MatchID)
	if err := riot.Gunzip(buf, r.Payload, s.cfg.MaxPayloadBytes); err != nil {
		return s.unstorable(lu, fmt.Errorf("payload: %w", err))
	}
	raw := buf.Bytes()
	doc, docGz := raw, []byte(nil)
	if !store.JSONStorable(raw) {
		doc, docGz = nil, r.Payload
	}
	fetched := lu.AttemptedAt
	var b store.Batch
	switch r.Kind {
	case bus.KindMatch:
		m, err := riot.DecodeMatch(raw)
		if err != nil {
			return s.unstorable(lu, fmt.Errorf("MatchDto: %w", err))
		}
		if m.Metadata.MatchID != "" && m.Metadata.MatchID != r.MatchID {
			return s.unstorable(lu, fmt.Errorf("payload is match %q, not %q", m.Metadata.MatchID, r.MatchID))
		}
		mr, parts := MatchRows(r.MatchID, string(platform), string(region), m, doc, fetched)
		mr.RawGzip = docGz
		b.Matches, b.Participants = []store.MatchRow{mr}, parts
		if !mr.GameCreation.IsZero() {
			lu.GameCreation = mr.GameCreation
		}
	case bus.KindTimeline:
		var sc riot.DocScan
		if _, err := sc.Write(raw); err != nil {
			return s.unstorable(lu, fmt.Errorf("TimelineDto: %w", err))
		}
		sc.Close()
		if sc.MatchID() == "" {
			return s.unstorable(lu, errors.New("TimelineDto: metadata.matchId missing"))
		}
		b.Timelines = []store.TimelineRow{{MatchID: r.MatchID, FrameIntervalMs: int(sc.FrameIntervalMs()),
			FrameCount: sc.FrameCount(), Raw: doc, RawGzip: docGz, FetchedAt: fetched}}
	}
	b.Ledger = []store.LedgerUpdate{lu}
	return item{batch: b}
}

// unstorable records a success whose payload cannot be stored as
// permanently_unfetchable with the reason (a poison payload from Riot).
func (s *Service) unstorable(lu store.LedgerUpdate, err error) item {
	lu.Status = string(bus.PermanentlyUnfetchable)
	lu.Error = truncate("invalid payload from Riot: "+err.Error(), 1000)
	return item{batch: store.Batch{Ledger: []store.LedgerUpdate{lu}}}
}

// MatchRows maps a MatchDto to its matches row and participant rows; raw
// is the document as Riot sent it (MatchRow.Raw). Timestamps come from
// epoch milliseconds; duration follows Riot's 11.20 rule
// (riot.Match.DurationSeconds).
func MatchRows(matchID, platform, region string, m *riot.Match, raw []byte, fetched time.Time) (store.MatchRow, []store.ParticipantRow) {
	in := m.Info
	mr := store.MatchRow{
		MatchID: matchID, Platform: platform, Region: region, QueueID: int(in.QueueID), GameMode: in.GameMode,
		GameType: in.GameType, GameVersion: in.GameVersion, Patch: in.Patch(), MapID: int(in.MapID),
		GameCreation: msTime(int64(in.GameCreation)), GameStart: msTime(int64(in.GameStartTimestamp)),
		GameEnd: msTime(int64(in.GameEndTimestamp)), DurationS: int(in.DurationSeconds()),
		EndOfGameResult: in.EndOfGameResult, ParticipantCount: len(in.Participants), Raw: raw, FetchedAt: fetched,
	}
	parts := make([]store.ParticipantRow, 0, len(in.Participants))
	for i, p := range in.Participants {
		id := int(p.ParticipantID)
		if id == 0 {
			id = i + 1
		}
		parts = append(parts, store.ParticipantRow{
			MatchID: matchID, ParticipantID: id, PUUID: p.PUUID, RiotIDGameName: p.RiotIDGameName,
			RiotIDTagline: p.RiotIDTagline, TeamID: int(p.TeamID), ChampionID: int(p.ChampionID),
			ChampionName: p.ChampionName, ChampLevel: int(p.ChampLevel), TeamPosition: p.TeamPosition, Win: p.Win,
			Kills: int(p.Kills), Deaths: int(p.Deaths), Assists: int(p.Assists), GoldEarned: int(p.GoldEarned),
			CS: int(p.TotalMinionsKilled + p.NeutralMinionsKilled), VisionScore: int(p.VisionScore),
			DamageToChampions: int(p.TotalDamageDealtToChampions), TimePlayedS: int(p.TimePlayed), Placement: int(p.Placement),
			IndividualPosition: p.IndividualPosition, Role: p.Role, Lane: p.Lane,
			Items:       []int32{int32(p.Item0), int32(p.Item1), int32(p.Item2), int32(p.Item3), int32(p.Item4), int32(p.Item5), int32(p.Item6)},
			Summoner1ID: int(p.Summoner1ID), Summoner2ID: int(p.Summoner2ID), GoldSpent: int(p.GoldSpent),
			TotalDamageTaken: int(p.TotalDamageTaken), DamageToObjectives: int(p.DamageDealtToObjectives),
			WardsPlaced: int(p.WardsPlaced), WardsKilled: int(p.WardsKilled),
		})
	}
	return mr, parts
}

func msTime(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

func appendBatch(a, b store.Batch) store.Batch {
	a.Matches = append(a.Matches, b.Matches...)
	a.Participants = append(a.Participants, b.Participants...)
	a.Timelines = append(a.Timelines, b.Timelines...)
	a.Ledger = append(a.Ledger, b.Ledger...)
	return a
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
