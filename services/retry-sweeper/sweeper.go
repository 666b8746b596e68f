// Package sweeper is riftflow's retry-sweeper: the safety net, not the main
// retry path (the match-fetcher schedules its own retries). Every Interval
// (hourly by default, design 000's RetryFailedMatchesJob) one replica:
//
//   - re-publishes fetches in temporary_failure, or still unfetched, whose
//     last attempt and hold (a message schedule the fetch waits in, which
//     the match-fetcher records in the ledger) ended more than StaleAfter
//     (10 min) ago, oldest first, at most MaxPerRun (100) per sweep, read
//     in pages of BatchSize (100)
//     (a pending fetch, whose in-process retries ended on a 5xx or timeout
//     streak, waits StaleAfter·2^k after its k-th sweep retry, at most
//     RetryMax: it is retried for as long as Riot fails, never made final),
//     with Nats-Msg-Id "<match>/<kind>/sweep/a<N>" so replicas and repeats
//     dedupe; but not while their command may still be queued: a row is
//     only re-published when the region's queue in the FETCH work-queue
//     stream holds no message published before the row's last attempt
//     (or last write, when later) + QueueSlack (a long backlog is not
//     fetched twice), and nor while a
//     FetchResult of its fetch waits in the FETCHED work queue (the
//     fetch is done and only its ledger write is late: the persister cut
//     off from NATS or failing on a full disk);
//   - completes syncs that wait only for pending fetches ("completed with
//     N matches pending", store.SettlePending);
//   - resets accounts stuck in syncing with no live lock and no progress
//     for StuckAfter (10 min) to pending, and queues their sync again; a
//     sync whose region still has fetch commands or retry schedules queued
//     from before its last progress is slow, not stuck, and is left alone.
//
// Between sweeps, every LockTTL/3, it renews the PUUID lock of every
// healthy running sync (listed matches not all done, and progress within
// StuckAfter or work still queued for it), so a lock lives as long as the
// sync's work, not until its next finished match.
//
// Every ExpireEvery it ends visibly (a rejected job, a Rejection) the
// requests that wait in INGEST or SYNC so long that the
// stream's max_age would soon drop them in silence (Expire).
//
// It also consumes the ADVISORIES stream and turns JetStream MAX_DELIVERIES
// and MSG_TERMINATED advisories for fetch messages into ledger entries, so
// nothing ends silently, and reads lol.ingest.rejected on EVENTS
// (consumer retry-sweeper-rejections, HandleRejection) so a refused
// request's pending job ends rejected, and lol.ingest.queued.> (consumer
// retry-sweeper-queued, HandleQueued, whatever the pause switch says) so
// every request INGEST stores is a pending job from then on. A tick runs on exactly one replica:
// the replicas race to create the tick's key in the cron-locks KV bucket.
package retrysweeper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/fault"
	"github.com/riftflow/riftflow/pkg/fetchpolicy"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/syncjob"
	"github.com/riftflow/riftflow/pkg/synclock"
	"github.com/riftflow/riftflow/streams"
)

// Store is the part of pkg/store the sweeper uses.
type Store interface {
	// DueRetriesAfter's now is the sweeper's clock (Deps.Now) at the call:
	// olderThan and the rows' Since and Written are on it, as are the
	// queue floors they are checked against (queueFloor).
	DueRetriesAfter(ctx context.Context, now, olderThan time.Time, after *store.DueFetch, limit int) ([]store.DueFetch, error)
	MarkPermanent(ctx context.Context, matchID, kind, reason string, attempt int) (store.BatchResult, error)
	PersistBatch(ctx context.Context, b store.Batch) (store.BatchResult, error)
	SettlePending(ctx context.Context, minFailures int) (store.BatchResult, error)
	// RunningSyncs' and StuckSyncs' now is the sweeper's clock at the
	// call: the syncs' times (LastProgress, LastProgressAt, SyncStartedAt)
	// and noProgressSince are on it, as are the queue floors they are
	// checked against (healthy).
	RunningSyncs(ctx context.Context, now time.Time) ([]store.RunningSync, error)
	StuckSyncs(ctx context.Context, now, noProgressSince time.Time) ([]store.Account, error)
	ResetSync(ctx context.Context, puuid, requestID string) error
	Hold(ctx context.Context, matchID, kind string, d time.Duration, by string) error
	Ping(ctx context.Context) error
	// RejectQueued ends a refused request's pending job (HandleRejection).
	RejectQueued(ctx context.Context, requestID, reason string, code int) (bool, error)
	// QueueSync records a request INGEST stored as pending (HandleQueued).
	QueueSync(ctx context.Context, r store.SyncRequest) (bool, error)
	// CapFailedJobs keeps the newest failed jobs rows of each type (Sweep).
	CapFailedJobs(ctx context.Context, keep int) (int64, error)
	EndWaitingJob(ctx context.Context, j store.Job) (bool, error)
}

// Config tunes the sweeper; Open reads it from the environment
// variables its tags name.
type Config struct {
	Interval   time.Duration `env:"SWEEP_INTERVAL" envDefault:"1h"`
	StaleAfter time.Duration `env:"SWEEP_STALE_AFTER" envDefault:"10m"`
	// QueueSlack bounds how long after a row's last attempt its command
	// (or scheduled retry) can have been published: keep it above the
	// fetcher's longest FETCH_BACKOFF delay. Default 10m.
	QueueSlack time.Duration `env:"SWEEP_QUEUE_SLACK" envDefault:"10m"`
	StuckAfter time.Duration `env:"SYNC_STUCK_AFTER" envDefault:"10m"`
	// SyncLock's LockTTL is the sync lock's lifetime (SYNC_LOCK_TTL):
	// healthy running syncs' locks are renewed every LockTTL/3.
	config.SyncLock
	BatchSize int `env:"SWEEP_BATCH" envDefault:"100"`
	// MaxPerRun is the most fetches one sweep re-publishes (seed 000's
	// cap): the oldest due first; the rest wait for the next sweep.
	MaxPerRun int `env:"SWEEP_MAX_PER_RUN" envDefault:"100"`
	// FetchAttempts' MaxAttempts is the fetcher's FETCH_MAX_ATTEMPTS: a due
	// row with that many 404s becomes permanently_unfetchable instead of
	// being re-published; a row with that many other failures is pending
	// (see RetryMax) and no longer holds its sync open.
	config.FetchAttempts
	// RetryMax caps the wait between sweep retries of a pending fetch
	// (StaleAfter doubling per failed sweep retry). Default 6h.
	RetryMax time.Duration `env:"SWEEP_RETRY_MAX" envDefault:"6h"`
	// ExpireEvery is how often waiting requests about to expire from
	// INGEST or SYNC are ended visibly (see Expire). Default 5m.
	ExpireEvery time.Duration `env:"SWEEP_EXPIRE_EVERY" envDefault:"5m"`
	// ExpireMargin: a request still waiting in its stream this long before
	// its stream's max_age would drop it is ended (rejected, 503) instead.
	// Keep it well above ExpireEvery. Default 1h.
	ExpireMargin time.Duration `env:"SWEEP_EXPIRE_MARGIN" envDefault:"1h"`
	// JobMaxFailed is the number of failed jobs rows kept per job type,
	// newest first (design 002's removeOnFail: 100): every sweep deletes
	// the older ones, so the cap holds within one Interval, not only at
	// the daily prune_jobs run. 0 keeps them all (no default is filled
	// in: a zero Config keeps them all too).
	JobMaxFailed int `env:"JOB_HISTORY_MAX_FAILED" envDefault:"100"`
}

// Deps are the sweeper's collaborators.
type Deps struct {
	JS         jetstream.JetStream
	Advisories jetstream.Consumer // "retry-sweeper" on ADVISORIES; nil to skip
	// Rejections is "retry-sweeper-rejections" on EVENTS (HandleRejection);
	// nil to skip.
	Rejections jetstream.Consumer
	// Queued is "retry-sweeper-queued" on EVENTS (HandleQueued); nil to
	// skip.
	Queued    jetstream.Consumer
	Store     Store
	Locks     natsx.Lock         // sync-locks
	CronLocks jetstream.KeyValue // cron-locks
	Dead      *natsx.DeadLetter  // the DEAD stream: exhausted messages are copied there before deletion
	app.Base                     // Subjects, Logger, Tracer, Now
}

// Service is a running sweeper.
type Service struct {
	cfg Config
	d   Deps
}

// New checks deps and fills defaults.
func New(cfg Config, d Deps) (*Service, error) {
	if d.JS == nil || d.Store == nil || d.Locks.KV == nil || d.CronLocks == nil {
		return nil, errors.New("sweeper: JS, Store, Locks and CronLocks are required")
	}
	config.Defaults(&cfg)
	d.Base.Fill("retry-sweeper")
	return &Service{cfg: cfg, d: d}, nil
}

// Run sweeps once at start (crash recovery), then every Interval, and
// consumes advisories, until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	if s.d.Advisories != nil {
		g.Go(func() error {
			return natsx.Consume(ctx, s.d.Advisories, s.HandleAdvisory, natsx.ConsumeOptions{
				Name: "retry-sweeper", Concurrency: 1, Logger: s.d.Logger, Tracer: s.d.Tracer,
				// Paused while Postgres is down, as every writer is: an
				// outage costs an advisory no deliveries.
				Settle: natsx.SettleOptions{Dead: s.d.Dead, Probe: s.d.Store.Ping}})
		})
	}
	if s.d.Rejections != nil {
		g.Go(func() error {
			return natsx.Consume(ctx, s.d.Rejections, s.HandleRejection, natsx.ConsumeOptions{
				Name: "retry-sweeper-rejections", Concurrency: 1, Logger: s.d.Logger, Tracer: s.d.Tracer,
				Settle: natsx.SettleOptions{Dead: s.d.Dead, Probe: s.d.Store.Ping}})
		})
	}
	if s.d.Queued != nil {
		g.Go(func() error {
			// Not held by the pause switch: a request it holds is shown
			// pending.
			return natsx.Consume(natsx.WithoutHold(ctx), s.d.Queued, s.HandleQueued, natsx.ConsumeOptions{
				Name: "retry-sweeper-queued", Concurrency: 1, Logger: s.d.Logger, Tracer: s.d.Tracer,
				Settle: natsx.SettleOptions{Dead: s.d.Dead, Probe: s.d.Store.Ping}})
		})
	}
	g.Go(func() error { s.heartbeat(ctx); return nil })
	g.Go(func() error { s.expireLoop(ctx); return nil })
	g.Go(func() error {
		t := time.NewTicker(s.cfg.Interval)
		defer t.Stop()
		for {
			if _, err := s.Tick(ctx); err != nil && ctx.Err() == nil {
				s.d.Logger.WarnContext(ctx, "sweep failed", "err", err)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	})
	return g.Wait()
}

// heartbeat renews, every LockTTL/3 until ctx ends, the sync lock of every
// healthy running sync. It never claims a lock again: one released by a
// finished sync, or expired, stays so.
func (s *Service) heartbeat(ctx context.Context) {
	synclock.Beat(ctx, max(s.cfg.LockTTL/3, 10*time.Millisecond), func() {
		if _, err := s.RenewLocks(ctx); err != nil && ctx.Err() == nil {
			s.d.Logger.WarnContext(ctx, "sync lock heartbeat failed", "err", err)
		}
	})
}

// RenewLocks renews the sync lock of every healthy running sync once and
// returns how many it renewed.
//
// While Postgres does not answer (an error, or no answer within
// LockTTL/3: a black-holed connection would otherwise stall the heartbeat
// past the TTL), it renews every lock held instead (synclock.KeepAll): no
// sync can progress or finish during the outage, and a lock left to lapse
// would let a second sync of the same account in while the first still
// has work in the pipeline. Such locks lapse one TTL after Postgres
// answers again, unless their sync is healthy. The error is returned
// with the count.
func (s *Service) RenewLocks(ctx context.Context) (int, error) {
	qctx, cancel := context.WithTimeout(ctx, s.renewTimeout())
	running, err := s.d.Store.RunningSyncs(qctx, s.d.Now())
	cancel()
	if err != nil {
		if ctx.Err() != nil || fault.KindOf(err) != fault.Transient {
			return 0, err
		}
		n, kerr := synclock.KeepAll(ctx, s.d.Locks, s.cfg.LockTTL)
		return n, errors.Join(fmt.Errorf("running syncs unreadable, every held sync lock kept (%d): %w", n, err), kerr)
	}
	floors := map[string]queueFloor{}
	n := 0
	for _, r := range running {
		ok, err := s.healthy(ctx, r.Region, r.LastProgress, floors)
		if err != nil {
			return n, err
		}
		if ok && synclock.Renew(ctx, s.d.Locks, r.PUUID, r.RequestID, s.cfg.LockTTL) {
			n++
		}
	}
	return n, nil
}

// renewTimeout bounds the heartbeat's read of the running syncs: a third
// of the lock's TTL, so a stalled Postgres still leaves time to renew.
func (s *Service) renewTimeout() time.Duration { return max(s.cfg.LockTTL/3, 100*time.Millisecond) }

// healthy reports whether a sync on region whose last progress was at last
// (on the sweeper's clock: the database's stamp moved onto it by
// RunningSyncs or StuckSyncs) is still at work: it progressed within
// StuckAfter, or the region's FETCH stream still holds a fetch command or
// retry schedule published before last + QueueSlack (its matches may be
// waiting behind a backlog or for a retry; queueFloor, on the same
// clock). floors caches the region's queue across calls.
func (s *Service) healthy(ctx context.Context, region string, last time.Time, floors map[string]queueFloor) (bool, error) {
	if s.d.Now().Sub(last) < s.cfg.StuckAfter {
		return true, nil
	}
	fl, ok := floors[region]
	if !ok {
		var err error
		if fl, err = s.queueFloor(ctx, region, true); err != nil {
			return false, err
		}
		floors[region] = fl
	}
	return fl.queued && !last.Add(s.cfg.QueueSlack).Before(fl.oldest), nil
}

// Report says what one sweep did.
type Report struct {
	Ran         bool // false when another replica owned this tick
	Batches     int  // pages of due rows read (at most BatchSize each)
	Republished int
	// StillQueued counts stale rows left alone because the region's queue
	// still holds commands published before them.
	StillQueued int
	// ResultsWaiting counts stale rows left alone because a FetchResult of
	// their fetch still waits in FETCHED (see pipelineSnapshot).
	ResultsWaiting int
	// Waiting counts pending rows left alone until their backoff is over.
	Waiting int
	// Capped is set when the sweep stopped at MaxPerRun re-publishes; the
	// due rows after them wait for the next sweep.
	Capped bool
	// ResultsBehind is set when FETCHED held a result older than
	// QueueSlack: the persister is behind (or paused on a Postgres
	// outage), the ledger is not current, and nothing was re-published or
	// recovered in this sweep.
	ResultsBehind bool
	Permanent     int
	// Settled counts syncs completed with matches pending.
	Settled   int
	Recovered int
	// FailedJobsCapped counts the failed jobs rows deleted beyond
	// JobMaxFailed per type.
	FailedJobsCapped int64
}

// Tick runs one sweep if this replica wins the tick's cron lock.
func (s *Service) Tick(ctx context.Context) (Report, error) {
	now := s.d.Now()
	tick := now.Truncate(s.cfg.Interval).Unix()
	// The key outlives its tick (then the bucket forgets it): a replica
	// whose clock lags cannot run the same tick again.
	if _, err := s.d.CronLocks.Create(ctx, fmt.Sprintf("retry-sweeper.%d", tick), []byte(now.UTC().Format(time.RFC3339)),
		jetstream.KeyTTL(max(2*s.cfg.Interval, time.Minute))); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return Report{}, nil
		}
		return Report{}, err
	}
	return s.Sweep(ctx)
}

// Sweep re-publishes stale fetches and recovers stuck syncs, once.
func (s *Service) Sweep(ctx context.Context) (Report, error) {
	ctx, span := s.d.Tracer.Start(ctx, "retry-sweeper sweep")
	defer span.End()
	rep := Report{Ran: true}
	now := s.d.Now()
	// The job log's cap on failed rows, whatever the ledger's state; a
	// failure is retried at the next sweep.
	var err error
	if rep.FailedJobsCapped, err = s.d.Store.CapFailedJobs(ctx, s.cfg.JobMaxFailed); err != nil {
		s.d.Logger.WarnContext(ctx, "capping failed job rows failed", "err", err)
	}
	lag, err := s.resultsLag(ctx)
	if err != nil {
		return rep, err
	}
	if lag > s.cfg.QueueSlack {
		// The ledger lags the fetches: a stale row's newer outcome may be
		// waiting in FETCHED. Re-publishing now would fetch it again (after
		// a Postgres outage, most of the backlog).
		rep.ResultsBehind = true
		s.d.Logger.InfoContext(ctx, "sweep skipped: the persister is behind", "oldest_result_age", lag.Round(time.Second))
	}
	if !rep.ResultsBehind {
		if err := s.sweepDue(ctx, now, &rep); err != nil {
			return rep, err
		}
	}
	// Before the stuck-sync scan: a sync waiting only for pending fetches
	// is finished, not restarted.
	settled, err := s.d.Store.SettlePending(ctx, s.policy().MaxAttempts)
	if err != nil {
		return rep, err
	}
	s.life().Advance(ctx, settled.Progress)
	for _, p := range settled.Progress {
		if p.Status == syncjob.Completed {
			rep.Settled++
		}
	}
	if rep.ResultsBehind {
		return rep, nil
	}
	n, err := s.recover(ctx, now)
	rep.Recovered = n
	if err != nil {
		return rep, err
	}
	if rep.Republished+rep.Permanent+rep.Recovered+rep.StillQueued+rep.ResultsWaiting+rep.Settled > 0 || rep.FailedJobsCapped > 0 {
		s.d.Logger.InfoContext(ctx, "sweep", "republished", rep.Republished, "capped", rep.Capped, "still_queued", rep.StillQueued,
			"results_waiting", rep.ResultsWaiting,
			"waiting", rep.Waiting, "permanent", rep.Permanent, "settled_syncs", rep.Settled, "recovered_syncs", rep.Recovered,
			"failed_jobs_capped", rep.FailedJobsCapped)
	}
	return rep, nil
}

// sweepDue re-publishes (sweepRow) the ledger rows due a retry that have
// not moved for StaleAfter, page by page (BatchSize, DueRetriesAfter),
// at most MaxPerRun of them (then rep.Capped), counting into rep.
func (s *Service) sweepDue(ctx context.Context, now time.Time, rep *Report) error {
	cutoff := now.Add(-s.cfg.StaleAfter)
	var after *store.DueFetch
	var snap *pipelineSnapshot
	for !rep.Capped {
		due, err := s.d.Store.DueRetriesAfter(ctx, s.d.Now(), cutoff, after, s.cfg.BatchSize)
		if err != nil {
			return err
		}
		if snap == nil && s.republishes(due, now) {
			// What FETCH and FETCHED hold is read before the ledger rows
			// it is checked against (pipelineSnapshot), so the page is
			// read again; every later page is read after it too.
			if snap, err = s.snapshot(ctx); err != nil {
				return err
			}
			if due, err = s.d.Store.DueRetriesAfter(ctx, s.d.Now(), cutoff, after, s.cfg.BatchSize); err != nil {
				return err
			}
		}
		if len(due) == 0 {
			break
		}
		rep.Batches++
		after = &due[len(due)-1]
		for _, f := range due {
			if rep.Republished >= s.cfg.MaxPerRun {
				rep.Capped = true
				break
			}
			if err := s.sweepRow(ctx, f, now, snap, rep); err != nil {
				return err
			}
		}
		if len(due) < s.cfg.BatchSize {
			break
		}
	}
	return nil
}

// sweepRow handles one due ledger row: made final, left waiting, left to
// the queue that may still hold its command or to the persister that has
// its result still to write, or re-published (counted in rep). snap is
// what FETCH and FETCHED held before f was read; it is not nil when
// republishes says a row of f's page is to be re-published.
func (s *Service) sweepRow(ctx context.Context, f store.DueFetch, now time.Time, snap *pipelineSnapshot, rep *Report) error {
	switch act, reason := s.policy().Sweep(fetchpolicy.Row{Status: f.Status, RetryCount: f.RetryCount, NotFound: f.NotFound,
		Since: f.Since}, now); act {
	case fetchpolicy.MakeFinal:
		// Riot answered 404 MaxAttempts times (the fetcher's own
		// final result was lost): gone. Any other streak is never
		// final.
		res, err := s.d.Store.MarkPermanent(ctx, f.MatchID, f.Kind, reason, f.Attempt+1)
		if err != nil {
			return err
		}
		s.life().Advance(ctx, res.Progress)
		rep.Permanent++
		return nil
	case fetchpolicy.Wait:
		rep.Waiting++
		return nil
	}
	_, region, err := riot.ParseMatchID(f.MatchID)
	if err != nil {
		res, err := s.d.Store.MarkPermanent(ctx, f.MatchID, f.Kind, err.Error(), f.Attempt+1)
		if err != nil {
			return err
		}
		s.life().Advance(ctx, res.Progress)
		rep.Permanent++
		return nil
	}
	fl, ok := snap.floors[region]
	if !ok {
		if fl, err = s.queueFloor(ctx, string(region), false); err != nil {
			return err
		}
		snap.floors[region] = fl
	}
	// The row's last event: its last attempt or hold (Since, on the
	// stages' clock), or its last write (Written, stamped by the
	// database), whichever is later; a jump of the stages' clock since
	// the attempt makes Since look older, never Written.
	last := f.Since
	if f.Written.After(last) {
		last = f.Written
	}
	if fl.queued && !last.Add(s.cfg.QueueSlack).Before(fl.oldest) {
		// Its command may still be waiting in the queue: fetching
		// it twice would spend the rate budget twice.
		rep.StillQueued++
		return nil
	}
	if _, ok := snap.results[fetchKey{f.MatchID, f.Kind}]; ok {
		// Fetched: its result waits for the persister, and the ledger
		// row is only late. Fetching it again would call Riot twice.
		rep.ResultsWaiting++
		return nil
	}
	attempt := f.Attempt + 1
	if f.Status == string(bus.Unfetched) {
		attempt = max(f.Attempt, 1)
	}
	cmd := bus.FetchCommand{MatchID: f.MatchID, Kind: bus.Kind(f.Kind), Region: string(region), Attempt: attempt,
		NotFound: f.NotFound, Priority: bus.Background, RequestID: f.ListedBy}
	if !f.GameCreation.IsZero() {
		cmd.GameCreationMs = f.GameCreation.UnixMilli()
	}
	id := bus.SweepFetchMsgID(cmd)
	if _, err := natsx.Publish(ctx, s.d.JS, s.d.Subjects.Fetch(string(region)), cmd, jetstream.WithMsgID(id)); err != nil {
		return err
	}
	// The re-publish holds the fetch from now: the row is not due
	// again for StaleAfter, and then only once the queue has moved
	// past this command (QueueSlack), so a command still waiting
	// behind a backlog is not re-published every sweep.
	if err := s.d.Store.Hold(ctx, f.MatchID, f.Kind, 0, "sweep/"+id); err != nil {
		s.d.Logger.WarnContext(ctx, "could not record the re-publish in the ledger", "match_id", f.MatchID, "err", err)
	}
	rep.Republished++
	return nil
}

// PendingDelay is fetchpolicy.Policy.PendingDelay of the sweeper's
// configuration.
func (s *Service) PendingDelay(retryCount int) time.Duration {
	return s.policy().PendingDelay(retryCount)
}

// policy is the fetch policy of the sweeper's configuration.
func (s *Service) policy() fetchpolicy.Policy {
	return fetchpolicy.Policy{MaxAttempts: s.cfg.MaxAttempts, StaleAfter: s.cfg.StaleAfter, RetryMax: s.cfg.RetryMax}.WithDefaults()
}

// resultsLag is the age (on the NATS server's clock, natsx.StoredAge: this
// host's clock may be off from the server's) of the oldest FetchResult
// still in the FETCHED work queue, i.e. not yet persisted; 0 when it is
// empty.
func (s *Service) resultsLag(ctx context.Context) (time.Duration, error) {
	st, err := s.d.JS.Stream(ctx, streams.StreamFetched)
	if err != nil {
		return 0, fmt.Errorf("sweeper: stream %s: %w", streams.StreamFetched, err)
	}
	m, err := st.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(">"))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sweeper: oldest message on %s: %w", streams.StreamFetched, err)
	}
	return natsx.StoredAge(st.CachedInfo(), m.Time), nil
}

// republishes reports whether a row of due is one the policy re-publishes
// (unless its command or result is still in the pipeline).
func (s *Service) republishes(due []store.DueFetch, now time.Time) bool {
	for _, f := range due {
		if act, _ := s.policy().Sweep(fetchpolicy.Row{Status: f.Status, RetryCount: f.RetryCount, NotFound: f.NotFound,
			Since: f.Since}, now); act == fetchpolicy.Republish {
			return true
		}
	}
	return false
}

// fetchKey names one fetch: a match ID and a kind ("match", "timeline").
type fetchKey struct{ matchID, kind string }

// fetchRegions are the regional routes whose FETCH queues a snapshot reads.
var fetchRegions = []riot.Region{riot.Americas, riot.Asia, riot.Europe, riot.SEA}

// pipelineSnapshot is what the FETCH and FETCHED work queues held, read
// before the ledger rows it is checked against. A fetch moves on in one
// direction, its command in FETCH (waiting or in flight: a command leaves
// FETCH only once its result is published), then its result in FETCHED
// (a result leaves only once the persister committed it), then its ledger
// row; reading FETCH, then FETCHED, then the ledger, sees every fetch in
// at least one of the three, while a ledger row read first could be
// overtaken between the reads, its fetch then seen nowhere and fetched
// again.
type pipelineSnapshot struct {
	floors map[riot.Region]queueFloor // each region's FETCH queue (queueFloor, without retries)
	// results are the fetches with a FetchResult still in FETCHED, of
	// any outcome: a temporary failure there has its retry scheduled.
	results map[fetchKey]struct{}
}

// snapshot reads every region's FETCH queue floor, then the fetches whose
// results wait in FETCHED.
func (s *Service) snapshot(ctx context.Context) (*pipelineSnapshot, error) {
	snap := &pipelineSnapshot{floors: map[riot.Region]queueFloor{}}
	for _, r := range fetchRegions {
		fl, err := s.queueFloor(ctx, string(r), false)
		if err != nil {
			return nil, err
		}
		snap.floors[r] = fl
	}
	var err error
	snap.results, err = s.waitingResults(ctx)
	return snap, err
}

// waitingResults reads every FetchResult in the FETCHED work queue (those
// the persister has not committed yet) and returns their fetches. FETCHED
// is read message by message (a work queue takes no second consumer on its
// subjects), up to its last message when the read starts: a result
// published later comes from a command that was still in FETCH when the
// snapshot's floors were read. A message that is not a FetchResult is
// skipped.
func (s *Service) waitingResults(ctx context.Context) (map[fetchKey]struct{}, error) {
	out := map[fetchKey]struct{}{}
	st, err := s.d.JS.Stream(ctx, streams.StreamFetched)
	if err != nil {
		return nil, fmt.Errorf("sweeper: stream %s: %w", streams.StreamFetched, err)
	}
	state := st.CachedInfo().State
	if state.Msgs == 0 {
		return out, nil
	}
	for seq := max(state.FirstSeq, 1); seq <= state.LastSeq; {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("sweeper: results waiting on %s: %w", streams.StreamFetched, err)
		}
		if m.Sequence > state.LastSeq {
			break
		}
		if r, err := bus.DecodeFetchResult(m.Header, m.Data); err == nil && r.MatchID != "" {
			out[fetchKey{r.MatchID, string(r.Kind)}] = struct{}{}
		}
		seq = m.Sequence + 1
	}
	return out, nil
}

// queueFloor is what a region's fetch queue still holds.
type queueFloor struct {
	queued bool // some command for the region is still in the stream
	// oldest is the publish time of the oldest one on the sweeper's clock
	// (Now less its age on the server's clock), comparable with the due
	// rows' Since and Written, which Store.DueRetriesAfter gives on the
	// same clock.
	oldest time.Time
}

// queueFloor reads the oldest message still in the FETCH stream on
// region's background and interactive fetch subjects, and with retries
// also its retry schedules. FETCH is a work queue: acked and terminated
// messages are gone, and the sweeper deletes the ones that exhaust
// MaxDeliver, so what remains is waiting or in flight.
func (s *Service) queueFloor(ctx context.Context, region string, retries bool) (queueFloor, error) {
	st, err := s.d.JS.Stream(ctx, streams.StreamFetch)
	if err != nil {
		return queueFloor{}, fmt.Errorf("sweeper: stream %s: %w", streams.StreamFetch, err)
	}
	var fl queueFloor
	now := s.d.Now()
	subjects := []string{s.d.Subjects.FetchFor(region, bus.Background), s.d.Subjects.FetchFor(region, bus.Interactive)}
	if retries {
		subjects = append(subjects, s.d.Subjects.FetchRetry(region, ">"))
	}
	for _, subj := range subjects {
		m, err := st.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return queueFloor{}, fmt.Errorf("sweeper: oldest message on %s: %w", subj, err)
		}
		if at := now.Add(-natsx.StoredAge(st.CachedInfo(), m.Time)); !fl.queued || at.Before(fl.oldest) {
			fl = queueFloor{queued: true, oldest: at}
		}
	}
	return fl, nil
}

// life publishes the progress of syncs a ledger write moved and releases
// the sync lock of those it finished (syncjob.Lifecycle.Advance): a sync
// completed by the sweeper does not wait for the lock's TTL before the
// account can sync again. Locks of running syncs are renewed by the
// sweeper's own beat, not here.
func (s *Service) life() syncjob.Lifecycle {
	return syncjob.Lifecycle{JS: s.d.JS, Subjects: s.d.Subjects, Locks: s.d.Locks, Logger: s.d.Logger, Now: s.d.Now, By: "retry-sweeper"}
}

// recover queues again the syncs stuck in syncing with no live lock and
// no progress for StuckAfter (design 001 crash recovery): it publishes the
// recovery sync first and then moves the account to pending (ResetSync).
// In that order a failed publish (NATS not back yet) or a crash between the
// two leaves the account syncing, so the next sweep finds it again and
// publishes the same command (its Nats-Msg-Id deduplicates it; the
// lister's BeginSync is idempotent per request ID). The other order left
// an account pending with its job running and no command to resume it,
// which no sweep looks at again. A lock that cannot be read is not taken
// for a missing one: the sync is left for a later sweep.
func (s *Service) recover(ctx context.Context, now time.Time) (int, error) {
	stuck, err := s.d.Store.StuckSyncs(ctx, s.d.Now(), now.Add(-s.cfg.StuckAfter))
	if err != nil {
		return 0, err
	}
	n := 0
	floors := map[string]queueFloor{}
	for _, a := range stuck {
		if _, err := s.d.Locks.Get(ctx, a.PUUID); err == nil {
			continue // a live lock: the sync is running
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return n, fmt.Errorf("sweeper: sync lock of %s: %w", a.PUUID, err)
		}
		last := a.LastProgressAt
		if last.IsZero() {
			last = a.SyncStartedAt
		}
		if ok, err := s.healthy(ctx, a.Region, last, floors); err != nil {
			return n, err
		} else if ok {
			continue // slow, not stuck: its work is still queued
		}
		p, err := riot.ParsePlatform(a.Platform)
		if err != nil {
			continue
		}
		cmd := bus.SyncCommand{RequestID: "recover-" + a.SyncRequestID, PUUID: a.PUUID, GameName: a.GameName, TagLine: a.TagLine,
			Platform: string(p), Region: string(p.Region()), Mode: bus.ModeLatest, Count: 1000, Lookback: 730,
			Priority: bus.Background, Trigger: bus.TriggerRecovery, Requested: now}
		if strings.HasPrefix(a.SyncRequestID, "recover-") {
			cmd.RequestID = a.SyncRequestID + "r"
		}
		if _, err := natsx.Publish(ctx, s.d.JS, s.d.Subjects.SyncFor(cmd.Platform, cmd.Priority), cmd, jetstream.WithMsgID(bus.SyncMsgID(cmd.RequestID))); err != nil {
			return n, err
		}
		// Recovered once the command is in SYNC. ErrNotFound: the recovery
		// sync itself began first (the lister can take the command before
		// this write) and the account has moved on already.
		if err := s.d.Store.ResetSync(ctx, a.PUUID, a.SyncRequestID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return n, err
		}
		s.d.Logger.InfoContext(ctx, "stuck sync recovered", "puuid", a.PUUID, "request_id", a.SyncRequestID, "new_request_id", cmd.RequestID)
		n++
	}
	return n, nil
}
