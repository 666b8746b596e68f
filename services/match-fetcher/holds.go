package matchfetcher

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/store"
)

// Ledger is the part of the fetch ledger (pkg/store) the fetcher uses. The
// persister still writes every outcome; the fetcher reads a fetch's row
// before it calls Riot and records the hold of each schedule it makes:
//
//   - a command for a fetch that is final (success, permanently_unfetchable,
//     outside_retention_window; not for a forced refetch) is acked without
//     a call: its work is done;
//   - a command for a fetch held by a schedule other than the one it came
//     from (FetchState.HeldBy ≠ FetchCommand.Hold) until a time still to
//     come is acked without a call: that schedule owns the fetch and will
//     fire. The hold of the command that made this command's schedule
//     (FetchCommand.PrevHold) does not count: a schedule may fire before
//     its own hold is recorded. A retry-sweeper re-publish, a redelivered command whose
//     handler already rescheduled, or an older chain's retry therefore
//     never calls Riot beside the fetch's live schedule;
//   - every schedule (rate-limit and key waits, the backoff before the
//     next attempt) is recorded as the fetch's hold (store.Hold), so the
//     retry-sweeper does not count a waiting fetch as stuck.
//
// The ledger is an optimisation of Riot calls, never a dependency of the
// fetch: a read or write that fails (Postgres down, LedgerTimeout) is
// logged, the command goes on as if the ledger had nothing to say, and the
// ledger is not asked again for LedgerPause, so an outage costs each fetch
// nothing.
type Ledger interface {
	FetchState(ctx context.Context, matchID, kind string) (store.FetchState, error)
	// Hold's d is the schedule's delay from now: the ledger keeps holds
	// on its own clock, which the fetchers' clocks may be set apart from.
	Hold(ctx context.Context, matchID, kind string, d time.Duration, by string) error
}

// LedgerTimeout bounds one ledger read or write; after a failure the
// ledger is left alone for LedgerPause.
const (
	LedgerTimeout = 2 * time.Second
	LedgerPause   = 10 * time.Second
)

// ledgerGate skips the ledger for LedgerPause after a failure.
type ledgerGate struct{ downUntil atomic.Int64 } // unix nanoseconds, monotonic enough for a pause

func (g *ledgerGate) open() bool { return time.Now().UnixNano() >= g.downUntil.Load() }

func (g *ledgerGate) failed() { g.downUntil.Store(time.Now().Add(LedgerPause).UnixNano()) }

// notNeeded returns why cmd needs no Riot call ("" when it does): its
// fetch is final, or held by another command's schedule that has not
// fired yet (on the ledger's clock: store.FetchState.HeldFor).
func (s *Service) notNeeded(ctx context.Context, cmd bus.FetchCommand) string {
	if s.d.Ledger == nil || !s.ledger.open() {
		return ""
	}
	lctx, cancel := context.WithTimeout(ctx, LedgerTimeout)
	defer cancel()
	st, err := s.d.Ledger.FetchState(lctx, cmd.MatchID, string(cmd.Kind))
	if err != nil {
		if ctx.Err() == nil {
			s.ledger.failed()
			s.d.Logger.WarnContext(ctx, "fetch ledger unreadable; fetching without its check", "match_id", cmd.MatchID, "err", err)
		}
		return ""
	}
	if st.Final() && !cmd.Force {
		return "already " + st.Status
	}
	if st.HeldBy != "" && st.HeldBy != cmd.Hold && (cmd.PrevHold == "" || st.HeldBy != cmd.PrevHold) && st.HeldFor > 0 {
		return fmt.Sprintf("held by schedule %s for another %s", st.HeldBy, st.HeldFor.Round(time.Second))
	}
	return ""
}

// hold records cmd's schedule (cmd.Hold, firing at at, on the services'
// clock) as its fetch's hold, by its delay from now; a failure is logged
// and otherwise ignored (see Ledger).
func (s *Service) hold(ctx context.Context, cmd bus.FetchCommand, at time.Time) {
	if s.d.Ledger == nil || !s.ledger.open() {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, LedgerTimeout)
	defer cancel()
	if err := s.d.Ledger.Hold(lctx, cmd.MatchID, string(cmd.Kind), at.Sub(s.d.Now()), cmd.Hold); err != nil && ctx.Err() == nil {
		s.ledger.failed()
		s.d.Logger.WarnContext(ctx, "could not record the fetch's hold; the retry-sweeper may re-publish it", "match_id", cmd.MatchID, "err", err)
	}
}
