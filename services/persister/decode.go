package persister

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/store"
)

// item is one decoded message's contribution to a batch.
type item struct {
	batch store.Batch
	bad   error // the message can never be stored: terminate it
	retry error // the message could not be read now (its payload object): retry it
	ref   fetchRef
}

// fetchRef is what the ledger needs of a message that turns out
// unstorable, kept from its one decode (empty when it did not decode).
type fetchRef struct {
	subject string
	matchID string
	kind    bus.Kind
	attempt int
	status  int // HTTP status of the last Riot answer
}

// docPool recycles the buffers documents are decompressed into while they
// are decoded (one per decode worker; no batch keeps one).
var docPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledDoc is the largest buffer kept for reuse; a rare larger one is
// left to the garbage collector.
const maxPooledDoc = 4 << 20

func putDoc(b *bytes.Buffer) {
	if b.Cap() <= maxPooledDoc {
		b.Reset()
		docPool.Put(b)
	}
}

// decodeAll decodes ds on up to Config.DecodeWorkers goroutines (each
// message independently; the order of items is the order of ds). A panic
// while decoding one message is that message's Transient failure (as a
// handler's panic is in natsx): it is logged with its stack and retried,
// and dead-lettered after its last delivery; the rest of the batch and the
// process go on.
func (s *Service) decodeAll(ctx context.Context, ds []natsx.Delivery) []item {
	items := make([]item, len(ds))
	workers := min(s.cfg.DecodeWorkers, len(ds))
	if workers <= 1 {
		for i, d := range ds {
			items[i] = s.decodeSafe(ctx, d)
		}
		return items
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(ds) {
					return
				}
				items[i] = s.decodeSafe(ctx, ds[i])
			}
		})
	}
	wg.Wait()
	return items
}

// decodeHook, when a test sets it (export_test.go), is called with every
// fetch result before it is decoded: a fault injector.
var decodeHook func(bus.FetchResult)

// decodeSafe is decode with a panic turned into item.retry.
func (s *Service) decodeSafe(ctx context.Context, d natsx.Delivery) (it item) {
	defer func() {
		if p := recover(); p != nil {
			s.d.Logger.ErrorContext(ctx, "decode panic", "subject", d.Subject, "panic", p, "stack", string(debug.Stack()))
			it = item{retry: fmt.Errorf("decode panic: %v", p), ref: fetchRef{subject: d.Subject}}
		}
	}()
	return s.decode(ctx, d)
}

// decode turns the FetchResult d carries into rows and one ledger update.
func (s *Service) decode(ctx context.Context, d natsx.Delivery) item {
	r, err := bus.DecodeFetchResult(d.Header, d.Data)
	if err != nil {
		return item{bad: fmt.Errorf("invalid fetch result: %w", err), ref: fetchRef{subject: d.Subject}}
	}
	ref := fetchRef{subject: d.Subject, matchID: r.MatchID, kind: r.Kind, attempt: r.Attempt, status: r.Status}
	if r.PayloadRef != "" {
		if s.d.Payloads == nil {
			return item{retry: fmt.Errorf("payload %s is in the object store, which this persister has not opened", r.PayloadRef), ref: ref}
		}
		gz, err := s.d.Payloads.GetBytes(ctx, r.PayloadRef)
		switch {
		case errors.Is(err, jetstream.ErrObjectNotFound):
			// Expired (kept 7 days) or never written: the fetch must be
			// made again. A temporary failure in the ledger has the
			// retry-sweeper do it.
			r.Outcome, r.Status, r.Error = bus.TemporaryFailure, 0, "payload object "+r.PayloadRef+" not found; to be fetched again"
		case err != nil:
			return item{retry: fmt.Errorf("read payload object %s: %w", r.PayloadRef, err), ref: ref}
		default:
			r.Payload = gz
		}
	}
	it := s.decodeRows(r)
	it.ref = ref
	if n := it.batch.StripNUL(); n > 0 {
		s.nulRepaired.Add(ctx, int64(n))
	}
	return it
}

// decodeRows is decode before the NUL repair.
func (s *Service) decodeRows(r bus.FetchResult) item {
	if decodeHook != nil {
		decodeHook(r)
	}
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
	if r.Kind == bus.KindTimeline && r.Timeline != nil {
		// The fetcher's bounded scan of this very payload (gzip verified,
		// JSON bounds, metadata.matchId present) read the columns; the
		// document is decompressed only while it is copied to Postgres
		// (store.TimelineRow.Compressed), so a batch never holds its
		// timelines decompressed.
		return item{batch: store.Batch{
			Timelines: []store.TimelineRow{{MatchID: r.MatchID, FrameIntervalMs: int(r.Timeline.FrameIntervalMs),
				FrameCount: r.Timeline.FrameCount, Compressed: r.Payload, FetchedAt: lu.AttemptedAt}},
			Ledger: []store.LedgerUpdate{lu}}}
	}
	buf := docPool.Get().(*bytes.Buffer)
	defer putDoc(buf)
	return s.decodeSuccess(r, lu, buf)
}

// decodeSuccess decompresses a success's payload into buf (which nothing
// returned refers to) and decodes a MatchDto into the columns of matches
// and match_participants, or scans a TimelineDto without
// FetchResult.Timeline (riot.DocScan) for its frame interval and count.
// The rows carry the gzip (store.MatchRow.Compressed,
// store.TimelineRow.Compressed): the store decompresses it again while it
// copies the row, so a batch holds rows, not documents.
func (s *Service) decodeSuccess(r bus.FetchResult, lu store.LedgerUpdate, buf *bytes.Buffer) item {
	platform, region, _ := riot.ParseMatchID(r.MatchID)
	if err := riot.Gunzip(buf, r.Payload, s.cfg.MaxPayloadBytes); err != nil {
		return s.unstorable(lu, fmt.Errorf("payload: %w", err))
	}
	raw := buf.Bytes()
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
		mr, parts := MatchRows(r.MatchID, string(platform), string(region), m, nil, fetched)
		mr.Compressed = r.Payload
		b.Matches, b.Participants = []store.MatchRow{mr}, parts
		if !mr.GameCreation.IsZero() {
			lu.GameCreation = mr.GameCreation
		}
	case bus.KindTimeline: // from a fetcher that did not send FetchResult.Timeline
		var sc riot.DocScan
		if _, err := sc.Write(raw); err != nil {
			return s.unstorable(lu, fmt.Errorf("TimelineDto: %w", err))
		}
		sc.Close()
		if sc.MatchID() == "" {
			return s.unstorable(lu, errors.New("TimelineDto: metadata.matchId missing"))
		}
		b.Timelines = []store.TimelineRow{{MatchID: r.MatchID, FrameIntervalMs: int(sc.FrameIntervalMs()),
			FrameCount: sc.FrameCount(), Compressed: r.Payload, FetchedAt: fetched}}
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

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
