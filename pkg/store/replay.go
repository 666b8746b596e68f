package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ReplayFilter selects permanently unfetchable ledger rows to replay
// (design 000's retry job). Exactly one of MatchIDs, PUUID and All is meant
// to be set; an empty filter selects nothing.
type ReplayFilter struct {
	MatchIDs []string // these matches (both kinds)
	PUUID    string   // matches listed by this player's syncs or stored with them as a participant
	All      bool     // every permanently unfetchable row
	// Limit caps the rows reopened in one run; 0 → DefaultReplayLimit.
	Limit int
	// RequestID is recorded as listed_by_request of the reopened rows.
	RequestID string
}

// DefaultReplayLimit is design 000's cap: at most 100 retries per run.
const DefaultReplayLimit = 100

// Reopened is one ledger row ReopenUnfetchable put back to unfetched.
type Reopened struct {
	MatchID, Kind string
	GameCreation  time.Time // zero when unknown
}

// ReopenUnfetchable puts up to f.Limit permanently_unfetchable ledger rows
// chosen by f (oldest last attempt first) back to unfetched with attempt 0
// and not_found 0, listed by f.RequestID, and returns them; the caller
// publishes one FetchCommand per row. retry_count keeps the history. Rows
// locked by a concurrent writer are skipped, not waited for.
func (s *Store) ReopenUnfetchable(ctx context.Context, f ReplayFilter) (_ []Reopened, err error) {
	defer classified(&err)
	if f.Limit <= 0 {
		f.Limit = DefaultReplayLimit
	}
	if len(f.MatchIDs) == 0 && f.PUUID == "" && !f.All {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `
WITH pick AS (
    SELECT match_id, kind FROM match_fetches
    WHERE status = 'permanently_unfetchable'
      AND ($1 OR match_id = ANY($2)
           OR ($3 <> '' AND match_id IN (SELECT match_id FROM sync_matches WHERE puuid = $3
                                        UNION SELECT match_id FROM match_participants WHERE puuid = $3)))
    ORDER BY last_attempt_at NULLS FIRST, match_id, kind
    LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE match_fetches f SET status = 'unfetched', attempt = 0, not_found = 0, last_error = NULL,
    http_status = NULL, listed_by_request = nullif($5, ''), updated_at = now()
FROM pick WHERE f.match_id = pick.match_id AND f.kind = pick.kind
RETURNING f.match_id, f.kind, f.game_creation`, f.All, f.MatchIDs, f.PUUID, f.Limit, f.RequestID)
	if err != nil {
		return nil, fmt.Errorf("store: reopen unfetchable: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Reopened, error) {
		var o Reopened
		var gc *time.Time
		err := r.Scan(&o.MatchID, &o.Kind, &gc)
		o.GameCreation = deref(gc)
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: reopen unfetchable: %w", err)
	}
	return out, nil
}
