// Package lister is riftflow's matchid-lister. For each SyncCommand on
// lol.sync.<platform> (background) or lol.sync.<platform>.interactive it:
//
//  1. claims the account's lock in the sync-locks KV bucket (atomic create
//     with a TTL; a second request for a syncing account is rejected with
//     409 unless it repeats the same request id);
//  2. reads the account's cursor from the cursors bucket;
//  3. pages match-v5 GET /lol/match/v5/matches/by-puuid/{puuid}/ids
//     (startTime/endTime in epoch SECONDS, count ≤ 100, queue and type
//     filters passed through) until it has the run's count of matches not
//     yet in a final state, or Riot's list ends: a short page, or Riot's
//     ~1000-match cap, where the listing stops cleanly without asking for
//     the empty page past it;
//  4. claims those matches in the ledger (adopting unfetched ones an
//     abandoned sync listed but never published) and publishes one
//     FetchCommand per match on lol.match.fetch.<region> with Nats-Msg-Id =
//     match ID;
//  5. advances the cursor only when every listed match was published (a
//     complete listing, or the first latest sync of an account).
//
// A latest sync takes the newest count matches Riot still serves (listed
// from now − MatchRetention at most); a full sync those of the last
// lookback_days days, cut at the same limit. A forced sync (force), in
// either mode, also takes stored matches and has them refetched and
// overwritten; a forced latest sync lists from the newest match, not from
// the cursor.
//
// A request refused with 409 gets a jobs row (status rejected) unless its
// id already has one.
//
// The lock is released by the persister when the sync completes, or
// expires; the retry-sweeper recovers syncs whose lock died.
//
// The two sync queues have their own consumers and workers, so an
// interactive sync is never queued behind background ones; its fetch
// commands go to the interactive fetch queue.
package matchidlister

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/fault"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/syncjob"
	"github.com/riftflow/riftflow/pkg/synclock"
)

// MatchLister is the part of the Riot client the lister uses.
type MatchLister interface {
	MatchIDsByPUUID(ctx context.Context, region riot.Region, puuid string, q riot.MatchIDsQuery) ([]string, error)
}

// Store is the part of pkg/store the lister uses.
type Store interface {
	// BeginSync opens the sync; replaced names the still-running sync of
	// the account it ended (failed), or is "".
	BeginSync(ctx context.Context, s store.SyncStart) (replaced string, err error)
	ClaimMatches(ctx context.Context, requestID, puuid string, ids []string) (store.ClaimResult, error)
	FailSync(ctx context.Context, requestID, puuid, reason string) error
	// MatchStatuses gives the match ledger status of the ids that have a row.
	MatchStatuses(ctx context.Context, ids []string) (map[string]string, error)
	AdoptOrphans(ctx context.Context, requestID string, ids []string) ([]string, error)
	// ForceRefetch reopens final ledger rows for a forced sync.
	ForceRefetch(ctx context.Context, requestID string, ids []string) (int, error)
	RecordJobOnce(ctx context.Context, j store.Job) (bool, error)
	// Ping checks that Postgres answers: the settle policy's probe, which
	// pauses listing while the database is down.
	Ping(ctx context.Context) error
}

// Riot's match list holds about the last 1000 matches of a player
// (developer-relations #517, #957); paging past it returns [].
const riotListCap = 1000

// Cursor is the value in the cursors KV bucket, per PUUID.
type Cursor struct {
	// ListedUntilS is the endTime (epoch SECONDS) of the last listing whose
	// every match was published. The next latest sync starts there, less
	// Overlap, so games still running at that time are not missed.
	ListedUntilS int64 `json:"listed_until_s"`
	// LastFullBackfill is when the last full sync finished listing.
	LastFullBackfill time.Time `json:"last_full_backfill,omitzero"`
}

// Config tunes the lister; Open reads it from the environment, New gives
// zero fields the defaults of their tags (config.Defaults).
type Config struct {
	// SyncLock's LockTTL is the sync lock's lifetime (SYNC_LOCK_TTL);
	// renewed every LockTTL/3 while the lister lists, then by the persister
	// while the sync has open matches.
	config.SyncLock
	// Overlap is subtracted from the cursor (CURSOR_OVERLAP) so a game that
	// was in progress at the last listing (and so not listed yet) is listed
	// next time. Re-listed matches are skipped as known.
	Overlap time.Duration `env:"CURSOR_OVERLAP" envDefault:"2h"`
	// RetryDelay is the delay before a retryable Riot failure (5xx, timeout,
	// 429) is retried (LISTER_RETRY_DELAY), doubled per delivery of the
	// same SyncCommand (5 s, 10 s, 20 s, … capped at 5 min), or Retry-After
	// when that is later.
	RetryDelay time.Duration `env:"LISTER_RETRY_DELAY" envDefault:"5s"`
	// Concurrency is the number of background syncs listed at once
	// (LISTER_CONCURRENCY).
	Concurrency int `env:"LISTER_CONCURRENCY" envDefault:"4"`
	// InteractiveConcurrency is the number of interactive syncs
	// (lol.sync.<platform>.interactive) listed at once, beside the
	// background ones (LISTER_INTERACTIVE_CONCURRENCY).
	InteractiveConcurrency int `env:"LISTER_INTERACTIVE_CONCURRENCY" envDefault:"2"`
	// MatchIDsCacheTTL is design 002's match-ID cache lifetime
	// (LISTER_MATCH_IDS_CACHE_TTL, at most half of Overlap): a latest sync
	// (not forced) of an account whose match IDs were listed completely
	// less than this long ago reuses that listing, whose every ID is
	// claimed already, and calls Riot for none; games that ended since are
	// listed by the first latest sync after it, whose window reaches
	// Overlap before the cursor. Negative disables it.
	MatchIDsCacheTTL time.Duration `env:"LISTER_MATCH_IDS_CACHE_TTL" envDefault:"5m"`
	// Retention's MatchRetention is how long Riot serves a match
	// (MATCH_RETENTION_DAYS). No listing starts before now −
	// MatchRetention: Riot lists older match IDs but answers 404 for them,
	// so a window that reached past it only bought calls that cannot
	// succeed (and a latest sync, with no start at all, bought five each).
	config.Retention
}

// Deps are the lister's collaborators.
type Deps struct {
	JS       jetstream.JetStream
	Consumer jetstream.Consumer // "matchid-lister" on SYNC (background)
	// Interactive is "matchid-lister-interactive" on SYNC; optional (nil:
	// only the background queue is served).
	Interactive jetstream.Consumer
	Locks       natsx.Lock         // sync-locks bucket
	Cursors     jetstream.KeyValue // cursors bucket
	Riot        MatchLister
	Store       Store
	Dead        *natsx.DeadLetter // the DEAD stream; nil: given-up syncs are only terminated
	// Host is this host's clock, measured against the NATS server's to
	// put a sync's window on the server's clock (nil: app.HostClock).
	Host     func() time.Time
	app.Base // Subjects, Logger, Tracer, Now
}

// Service is a running lister.
type Service struct {
	cfg Config
	d   Deps
}

// New checks deps and fills defaults.
func New(cfg Config, d Deps) (*Service, error) {
	if d.JS == nil || d.Consumer == nil || d.Locks.KV == nil || d.Cursors == nil || d.Riot == nil || d.Store == nil {
		return nil, errors.New("lister: JS, Consumer, Locks, Cursors, Riot and Store are required")
	}
	config.Defaults(&cfg)
	cfg.MatchIDsCacheTTL = min(cfg.MatchIDsCacheTTL, cfg.Overlap/2)
	d.Base.Fill("matchid-lister")
	if d.Host == nil {
		d.Host = app.HostClock
	}
	return &Service{cfg: cfg, d: d}, nil
}

// Run consumes both queues until ctx ends, then drains.
func (s *Service) Run(ctx context.Context) error {
	return app.Consume(ctx, s.Handle, natsx.ConsumeOptions{Logger: s.d.Logger, Tracer: s.d.Tracer,
		Settle: natsx.SettleOptions{Backoff: natsx.Backoff{Base: s.cfg.RetryDelay, Max: maxListRetryDelay}, Dead: s.d.Dead,
			Probe: s.d.Store.Ping}},
		app.Queue{Consumer: s.d.Consumer, Name: "matchid-lister", Concurrency: s.cfg.Concurrency},
		app.Queue{Consumer: s.d.Interactive, Name: "matchid-lister-interactive", Concurrency: s.cfg.InteractiveConcurrency})
}

// Handle processes one SyncCommand. A sync that still fails on the
// consumer's last delivery (a long Postgres or NATS outage) is not left
// holding its lock until the TTL with its caller waiting: the lock is
// released and the request rejected with code 503 and the reason, and the
// command is dead-lettered so `riftflow retry --dead` can run it again.
// Every other outcome is handle's: Ack, or its error settled by its kind.
func (s *Service) Handle(ctx context.Context, d natsx.Delivery) natsx.Result {
	err := s.handle(ctx, d)
	if err == nil || !fault.KindOf(err).Retryable() || ctx.Err() != nil || !d.Last {
		return natsx.Fail(err)
	}
	var cmd bus.SyncCommand
	if json.Unmarshal(d.Data, &cmd) == nil && cmd.PUUID != "" {
		s.releaseLock(ctx, cmd.PUUID, cmd.RequestID)
	}
	return natsx.Fail(s.reject(ctx, cmd.RequestID, 503,
		fmt.Errorf("sync failed %d times, giving up: %w", d.Num, err), d))
}

// errDropped ends the handling of a command that must never run (its
// request's job has ended): begin has released what it took, and the
// command is acked.
var errDropped = errors.New("sync command dropped")

// handle runs the sync command d carries. Its error settles d by its kind:
// a refused command's is Invalid or Gone (reject), a failure to retry is
// Transient or RateLimited (or a store error, classified by the store).
func (s *Service) handle(ctx context.Context, d natsx.Delivery) error {
	cmd, platform, err := s.decode(ctx, d)
	if err != nil {
		return err
	}
	region := platform.Region()
	log := s.d.Logger.With("request_id", cmd.RequestID, "puuid", cmd.PUUID)
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("riot.puuid", cmd.PUUID),
		attribute.String("riftflow.request_id", cmd.RequestID), attribute.String("riot.region", string(region)))

	if err := s.begin(ctx, cmd, platform, d, log); errors.Is(err, errDropped) {
		return nil
	} else if err != nil {
		return err
	}
	// Listing can take long (many pages, rate-limit waits): the lock lives
	// as long as the listing, renewed on a timer, not until its TTL.
	defer synclock.Heartbeat(ctx, s.d.Locks, cmd.PUUID, cmd.RequestID, s.cfg.LockTTL)()
	w, err := s.window(ctx, cmd, log)
	if err != nil {
		return err
	}
	l, err := s.listNew(ctx, cmd, region, w, d, log)
	if err != nil {
		return err
	}
	claimed, err := s.claimAndPublish(ctx, cmd, w, l.fresh, log)
	if err != nil {
		return err
	}
	// The cursor moves only past a window whose every match was published:
	// a complete listing, or a first latest sync, which took the newest
	// count matches (older ones are a full sync's business).
	if l.complete || (cmd.Mode == bus.ModeLatest && w.cur.ListedUntilS == 0) {
		s.advanceCursor(ctx, cmd, w, log)
	}
	log.InfoContext(ctx, "matches listed", "listed", l.listed, "new", len(l.fresh), "published", len(claimed.Publish),
		"total", claimed.Total, "done", claimed.Done, "window_start_s", w.startS, "window_end_s", w.endS, "complete", l.complete,
		"riot_cap_reached", l.capped, "cached", l.cached)
	s.publishProgress(ctx, cmd, claimed)
	return nil
}

// decode reads the SyncCommand d carries; a malformed one is rejected
// (400).
func (s *Service) decode(ctx context.Context, d natsx.Delivery) (bus.SyncCommand, riot.Platform, error) {
	var cmd bus.SyncCommand
	if err := json.Unmarshal(d.Data, &cmd); err != nil || cmd.PUUID == "" || cmd.RequestID == "" {
		if err == nil {
			err = errors.New("missing puuid or request_id")
		}
		return cmd, "", s.reject(ctx, "", 400, fmt.Errorf("invalid sync command: %w", err), d)
	}
	platform, err := riot.ParsePlatform(cmd.Platform)
	if err != nil {
		return cmd, "", s.reject(ctx, cmd.RequestID, 400, err, d)
	}
	return cmd, platform, nil
}

// begin claims the per-account lock (a held one: 409) and opens the sync
// in the job log; errDropped when the request's job has ended.
func (s *Service) begin(ctx context.Context, cmd bus.SyncCommand, platform riot.Platform, d natsx.Delivery, log *slog.Logger) error {
	if holder, err := synclock.Claim(ctx, s.d.Locks, cmd.PUUID, cmd.RequestID, s.cfg.LockTTL, s.d.Now()); err != nil {
		if !errors.Is(err, natsx.ErrLocked) {
			log.WarnContext(ctx, "lock claim failed, will retry", "err", err)
			return fault.Wrap(fault.Transient, fmt.Errorf("claim sync lock: %w", err))
		}
		reason := fmt.Errorf("account %s is already syncing (request %s)", cmd.PUUID, holder)
		syncjob.Record(ctx, s.d.Store, syncjob.Refusal{RequestID: cmd.RequestID, PUUID: cmd.PUUID, RequestedBy: cmd.RequestedBy,
			RequestedAt: cmd.Requested, Mode: string(cmd.Mode), Trigger: cmd.Trigger, Reason: reason, At: s.d.Now(),
			Detail: map[string]any{"force": cmd.Force}}, s.d.Logger)
		return s.reject(ctx, cmd.RequestID, 409, reason, d)
	}

	st := store.SyncStart{
		RequestID: cmd.RequestID, PUUID: cmd.PUUID, GameName: cmd.GameName, TagLine: cmd.TagLine,
		Platform: string(platform), Region: string(platform.Region()), Mode: string(cmd.Mode), Trigger: cmd.Trigger,
		RequestedAt: cmd.Requested, Force: cmd.Force, RequestedBy: cmd.RequestedBy, PlatformFound: cmd.PlatformFound,
		Redelivery: d.Num > 1,
	}
	st.ReplaceReason = fmt.Sprintf("replaced by sync %s of the same account", cmd.RequestID)
	if cmd.Trigger == bus.TriggerRecovery {
		st.ReplaceReason = abandonedReason(cmd.RequestID)
	}
	replaced, err := s.d.Store.BeginSync(ctx, st)
	if errors.Is(err, store.ErrRequestEnded) {
		// Its job ended already (rejected while it waited, replaced or
		// abandoned and resumed by a recovery sync, or completed): its
		// followers heard so; it never runs again.
		log.WarnContext(ctx, "sync command of a request whose job has ended; dropped")
		s.releaseLock(ctx, cmd.PUUID, cmd.RequestID)
		return errDropped
	}
	if err != nil {
		log.WarnContext(ctx, "begin sync failed, will retry", "err", err)
		return fmt.Errorf("begin sync: %w", err)
	}
	if replaced != "" {
		// The account's previous sync lost its lock (an outage longer
		// than the TTL) and this one took the account over: that job was
		// ended as failed; end its progress stream too.
		log.WarnContext(ctx, "sync replaced a running sync of the account", "replaced_request_id", replaced)
		s.life().Fail(ctx, replaced, cmd.PUUID, st.ReplaceReason)
	}
	if cmd.Trigger == bus.TriggerRecovery {
		s.closeAbandoned(ctx, cmd)
	}
	return nil
}

// life is the sync lifecycle (progress events, lock release) on the
// lister's connections.
func (s *Service) life() syncjob.Lifecycle {
	return syncjob.Lifecycle{JS: s.d.JS, Subjects: s.d.Subjects, Locks: s.d.Locks, Logger: s.d.Logger, Now: s.d.Now, By: "matchid-lister"}
}

// listWindow is the time window a sync lists (epoch SECONDS, Riot's
// startTime/endTime) and the cursor it may advance.
type listWindow struct {
	now          time.Time
	startS, endS int64
	cur          Cursor
	curRev       uint64
}

// window reads the account's cursor and computes the window: Lookback days
// back from now, or, for a latest sync, from the cursor less Overlap.
//
// now is on the NATS server's clock: Now moved by the server's offset from
// this host's clock (natsx.ServerOffset, read from the cursors bucket), so
// lister replicas on hosts whose clocks disagree write cursors on one
// clock; a cursor ahead of the truth would start the next latest sync past
// games that ended since, which no sync would list again.
func (s *Service) window(ctx context.Context, cmd bus.SyncCommand, log *slog.Logger) (listWindow, error) {
	cur, curRev, err := s.cursor(ctx, cmd.PUUID)
	if err != nil {
		log.WarnContext(ctx, "cursor read failed, will retry", "err", err)
		return listWindow{}, fault.Wrap(fault.Transient, fmt.Errorf("read cursor: %w", err))
	}
	offset, err := natsx.ServerOffset(ctx, s.d.Cursors, s.d.Host)
	if err != nil {
		log.WarnContext(ctx, "server clock read failed, will retry", "err", err)
		return listWindow{}, fault.Wrap(fault.Transient, fmt.Errorf("read the NATS server's clock: %w", err))
	}
	now := s.d.Now().Add(offset)
	w := listWindow{now: now, endS: now.Unix(), startS: Window(cmd, cur, s.cfg.Overlap, s.cfg.MatchRetention.Duration(), now), cur: cur, curRev: curRev}
	return w, nil
}

// listing is what listNew found.
type listing struct {
	fresh            []string // match IDs this sync covers (new, or listed earlier but not final)
	listed           int      // IDs Riot listed
	complete, capped bool     // every page was read; Riot's ~1000-ID cap was reached
	cached           bool     // the last listing, younger than MatchIDsCacheTTL, was reused
}

// listNew pages through the account's match IDs in the window, newest
// first, keeping those the ledger has no final outcome for, up to
// cmd.Count.
func (s *Service) listNew(ctx context.Context, cmd bus.SyncCommand, region riot.Region, w listWindow, d natsx.Delivery, log *slog.Logger) (listing, error) {
	ctxRiot := ctx
	if cmd.Priority == bus.Background {
		ctxRiot = riot.WithBackground(ctx)
	}
	var l listing
	if age := w.now.Sub(time.Unix(w.cur.ListedUntilS, 0)); cmd.Mode == bus.ModeLatest && !cmd.Force && w.cur.ListedUntilS > 0 &&
		age >= 0 && age < s.cfg.MatchIDsCacheTTL {
		l.cached = true
		return l, nil
	}
	for start := 0; ; {
		if start >= riotListCap {
			// Riot serves no more than ~1000 IDs: everything it will
			// show was seen; the listing is complete as far as it can be.
			l.complete, l.capped = true, true
			return l, nil
		}
		want := 100
		q := riot.MatchIDsQuery{Start: start, Count: want, StartTime: w.startS, EndTime: w.endS, Queue: cmd.Queue, Type: cmd.Type}
		ids, err := s.d.Riot.MatchIDsByPUUID(ctxRiot, region, cmd.PUUID, q)
		if err != nil {
			return l, s.riotFailure(ctx, cmd, err, d)
		}
		l.listed += len(ids)
		known, err := s.d.Store.MatchStatuses(ctx, ids)
		if err != nil {
			log.WarnContext(ctx, "ledger lookup failed, will retry", "err", err)
			return l, fmt.Errorf("ledger lookup: %w", err)
		}
		for _, id := range ids {
			if _, _, err := riot.ParseMatchID(id); err != nil {
				log.WarnContext(ctx, "Riot listed a malformed match ID; skipped", "match_id", id, "err", err)
				continue
			}
			if st, ok := known[id]; ok && bus.Outcome(st).Final() && !cmd.Force {
				continue // stored, or settled for good, by an earlier sync
			}
			// New, or listed earlier but not final yet (in flight for
			// another sync, or orphaned by a dead one): this sync covers it.
			if len(l.fresh) >= cmd.Count {
				// More matches than this run may take: the cursor stays.
				return l, nil
			}
			l.fresh = append(l.fresh, id)
		}
		if len(ids) < want {
			l.complete = true
			return l, nil
		}
		start += len(ids)
	}
}

// claimAndPublish claims the matches in the ledger for this sync and
// publishes one fetch command per match it must fetch.
func (s *Service) claimAndPublish(ctx context.Context, cmd bus.SyncCommand, w listWindow, fresh []string, log *slog.Logger) (store.ClaimResult, error) {
	if cmd.Force {
		n, err := s.d.Store.ForceRefetch(ctx, cmd.RequestID, fresh)
		if err != nil {
			log.WarnContext(ctx, "force refetch failed, will retry", "err", err)
			return store.ClaimResult{}, fmt.Errorf("force refetch: %w", err)
		}
		log.InfoContext(ctx, "force: refetching and overwriting stored matches", "forced", n, "listed", len(fresh))
	}
	if adopted, err := s.d.Store.AdoptOrphans(ctx, cmd.RequestID, fresh); err != nil {
		log.WarnContext(ctx, "adopt orphans failed, will retry", "err", err)
		return store.ClaimResult{}, fmt.Errorf("adopt orphans: %w", err)
	} else if len(adopted) > 0 {
		log.InfoContext(ctx, "adopted matches an abandoned sync never published", "count", len(adopted))
	}
	res, err := s.d.Store.ClaimMatches(ctx, cmd.RequestID, cmd.PUUID, fresh)
	if err != nil {
		log.WarnContext(ctx, "claim matches failed, will retry", "err", err)
		return res, fmt.Errorf("claim matches: %w", err)
	}
	for _, id := range res.Publish {
		_, r, _ := riot.ParseMatchID(id)
		fc := bus.FetchCommand{MatchID: id, Kind: bus.KindMatch, Region: string(r), Attempt: 1,
			ListedAfterS: w.startS, RequestID: cmd.RequestID, PUUID: cmd.PUUID, Priority: cmd.Priority, Force: cmd.Force}
		if _, err := natsx.Publish(ctx, s.d.JS, s.d.Subjects.FetchFor(string(r), fc.Priority), fc, jetstream.WithMsgID(bus.FetchMsgID(fc))); err != nil {
			// The ledger rows stay unfetched and listed by this request: a
			// redelivery re-publishes them; the sweeper is the safety net.
			log.WarnContext(ctx, "publish fetch failed, will retry", "match_id", id, "err", err)
			return res, fault.Wrap(fault.Transient, fmt.Errorf("publish fetch command: %w", err))
		}
	}
	return res, nil
}

// advanceCursor moves the cursor past a window whose every match was
// published.
func (s *Service) advanceCursor(ctx context.Context, cmd bus.SyncCommand, w listWindow, log *slog.Logger) {
	next := w.cur
	next.ListedUntilS = w.endS
	if cmd.Mode == bus.ModeFull {
		next.LastFullBackfill = w.now
	}
	if err := s.saveCursor(ctx, cmd.PUUID, next, w.curRev); err != nil {
		log.WarnContext(ctx, "cursor not advanced", "err", err)
	}
}

// publishProgress announces the sync's progress; a sync with nothing left
// to fetch is completed here (syncjob.Lifecycle.Advance releases its lock
// first).
func (s *Service) publishProgress(ctx context.Context, cmd bus.SyncCommand, res store.ClaimResult) {
	p := syncjob.Progress{RequestID: cmd.RequestID, PUUID: cmd.PUUID, Status: syncjob.Syncing, Progress: res.Done, Total: res.Total}
	if res.Completed {
		p.Status = syncjob.Completed
	}
	s.life().Advance(ctx, []syncjob.Progress{p})
}

// Window is the match-list startTime (epoch SECONDS) of a sync: a full
// sync reaches back cmd.Lookback days; a latest sync lists the newest
// matches, from the cursor (less overlap) when the account has one. A
// forced latest sync ignores the cursor: it takes the newest count
// matches, stored ones included, and refetches them. No window starts
// before now − retention (retention > 0), the oldest match Riot still
// serves: "the newest N" of an account without a cursor is the newest N of
// those, and a lookback past it is cut there. Riot honours startTime, so
// an expired match is never listed and never called for.
func Window(cmd bus.SyncCommand, cur Cursor, overlap, retention time.Duration, now time.Time) int64 {
	var start int64
	switch {
	case cmd.Mode != bus.ModeLatest:
		start = now.Add(-time.Duration(cmd.Lookback) * 24 * time.Hour).Unix()
	case cur.ListedUntilS > 0 && !cmd.Force:
		start = max(cur.ListedUntilS-int64(overlap/time.Second), 0)
	}
	if retention > 0 {
		start = max(start, now.Add(-retention).Unix())
	}
	return start
}

// riotFailure is the error that settles a sync whose match list failed
// with err: a retryable failure or a rejected key is retried, or, on the
// consumer's last delivery, fails the sync and rejects it (503); anything
// else fails the sync and rejects it (502).
func (s *Service) riotFailure(ctx context.Context, cmd bus.SyncCommand, err error, d natsx.Delivery) error {
	var re *riot.Error
	code := 502
	switch {
	case ctx.Err() != nil:
		return fault.Wrap(fault.Transient, err) // shutting down: redelivered, same sync
	case errors.As(err, &re) && (re.Retryable() || re.Kind == riot.KindKeyRejected) && d.Last:
		// A nak now would end in a MAX_DELIVERIES advisory, the sync would
		// stay "syncing" with its lock held and `ingest --wait` would hang:
		// fail the sync with the reason instead, so the caller hears it.
		code = 503
		err = fmt.Errorf("match list failed %d times, giving up: %w", d.Num, err)
	case errors.As(err, &re) && re.Retryable():
		// The settle policy backs off per delivery from RetryDelay; never
		// sooner than a Retry-After (on the runner's clock).
		s.d.Logger.WarnContext(ctx, "match list failed, will retry", "request_id", cmd.RequestID, "err", err)
		return fault.RetryAt(err, time.Now().Add(re.RetryDelay(s.d.Now(), 0)))
	case errors.As(err, &re) && re.Kind == riot.KindKeyRejected:
		s.d.Logger.ErrorContext(ctx, "Riot API key rejected; sync parked", "request_id", cmd.RequestID)
		return fault.RetryAt(err, time.Now().Add(time.Minute))
	}
	reason := fmt.Sprintf("match list: %v", err)
	if ferr := s.d.Store.FailSync(ctx, cmd.RequestID, cmd.PUUID, reason); ferr != nil {
		return fmt.Errorf("record failed sync: %w", ferr)
	}
	s.releaseLock(ctx, cmd.PUUID, cmd.RequestID)
	s.life().Fail(ctx, cmd.RequestID, cmd.PUUID, reason)
	return s.reject(ctx, cmd.RequestID, code, errors.New(reason), d)
}

// closeAbandoned marks, in the job log, the sync a recovery command
// replaces as failed (the retry-sweeper names recovery requests
// "recover-<old id>", or "<old id>r" when the old one was a recovery too).
// The account itself already belongs to the new request.
func (s *Service) closeAbandoned(ctx context.Context, cmd bus.SyncCommand) {
	olds := []string{strings.TrimPrefix(cmd.RequestID, "recover-")}
	if strings.HasPrefix(cmd.RequestID, "recover-recover-") {
		olds = append(olds, strings.TrimSuffix(cmd.RequestID, "r"))
	}
	for _, old := range olds {
		if old == cmd.RequestID || old == "" {
			continue
		}
		reason := abandonedReason(cmd.RequestID)
		if err := s.d.Store.FailSync(ctx, old, cmd.PUUID, reason); err != nil {
			s.d.Logger.WarnContext(ctx, "job log: abandoned sync not closed", "request_id", old, "err", err)
		}
	}
}

// abandonedReason is the error of a sync's job that crash recovery
// replaced with requestID.
func abandonedReason(requestID string) string {
	return fmt.Sprintf("abandoned: no live lock and no progress; resumed by %s", requestID)
}

// releaseLock deletes the account's lock if requestID still holds it.
func (s *Service) releaseLock(ctx context.Context, puuid, requestID string) {
	synclock.Release(ctx, s.d.Locks, puuid, requestID, s.d.Logger)
}

func (s *Service) cursor(ctx context.Context, puuid string) (Cursor, uint64, error) {
	e, err := s.d.Cursors.Get(ctx, puuid)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Cursor{}, 0, nil
	}
	if err != nil {
		return Cursor{}, 0, err
	}
	var c Cursor
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		s.d.Logger.WarnContext(ctx, "unreadable cursor ignored", "puuid", puuid, "err", err)
		return Cursor{}, e.Revision(), nil
	}
	return c, e.Revision(), nil
}

func (s *Service) saveCursor(ctx context.Context, puuid string, c Cursor, rev uint64) error {
	b, _ := json.Marshal(c)
	var err error
	if rev == 0 {
		_, err = s.d.Cursors.Create(ctx, puuid, b)
	} else {
		_, err = s.d.Cursors.Update(ctx, puuid, b, rev)
	}
	return err
}

// reject refuses the request of the command d carries with code and
// reason, and returns the error that settles d (syncjob.Reject).
func (s *Service) reject(ctx context.Context, requestID string, code int, reason error, d natsx.Delivery) error {
	return syncjob.Reject(ctx, s.d.JS, s.d.Subjects, s.d.Logger, d, requestID, code, reason, s.d.Now())
}

// maxListRetryDelay caps the settle policy's per-delivery backoff of a
// failed match list: RetryDelay, doubled per delivery, up to 5 min.
const maxListRetryDelay = 5 * time.Minute
