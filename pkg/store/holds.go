package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// FetchState is what the ledger knows of one fetch (a match_fetches row),
// read by the match-fetcher before it spends a Riot call on a command.
type FetchState struct {
	// Status is the row's status ("unfetched", "success", ...), "" when
	// the fetch has no row yet.
	Status  string
	Attempt int // highest attempt applied (0: never tried)
	// HeldBy and HeldFor are the fetch's last hold (Hold): the JetStream
	// message schedule HeldBy fires HeldFor after the read, on the
	// database's clock (0 or less: its time has come). "" and 0 when
	// none.
	HeldBy  string
	HeldFor time.Duration
}

// Final reports whether the fetch needs no further attempt (success,
// permanently_unfetchable, outside_retention_window).
func (f FetchState) Final() bool {
	return f.Status == StatusSuccess || f.Status == StatusPermanentlyUnfetchable || f.Status == StatusOutsideRetentionWindow
}

// FetchState reads the ledger row of (matchID, kind). A fetch with no row
// is FetchState{} and no error.
func (s *Store) FetchState(ctx context.Context, matchID, kind string) (_ FetchState, err error) {
	defer classified(&err)
	var f FetchState
	var left *float64
	var by *string
	err = s.pool.QueryRow(ctx, `SELECT status, attempt, extract(epoch FROM held_until - now())::float8, held_by
FROM match_fetches WHERE match_id = $1 AND kind = $2`, matchID, kind).Scan(&f.Status, &f.Attempt, &left, &by)
	if errors.Is(err, pgx.ErrNoRows) {
		return FetchState{}, nil
	}
	if err != nil {
		return FetchState{}, fmt.Errorf("store: fetch state %s/%s: %w", matchID, kind, err)
	}
	if left != nil {
		f.HeldFor = time.Duration(*left * float64(time.Second))
	}
	if by != nil {
		f.HeldBy = *by
	}
	return f, nil
}

// Hold records that the fetch (matchID, kind) waits in the JetStream
// message schedule named by (a token the scheduled FetchCommand carries as
// Hold) for d from now: the retry-sweeper does not re-publish it before
// then + its stale threshold (DueRetriesAfter counts a row's age from its
// hold), and no other command for it calls Riot before then (FetchState).
// The hold's end is kept on the database's clock (now() + d), as the
// callers' clocks may be set apart from one another and from it: a hold
// is read back as a duration (FetchState) or on the reader's clock
// (DueRetriesAfter). A row that does not exist yet is created unfetched; a
// final row is left alone. The hold replaces the row's previous one: the
// newest schedule holds the fetch.
func (s *Store) Hold(ctx context.Context, matchID, kind string, d time.Duration, by string) (err error) {
	defer classified(&err)
	_, err = s.pool.Exec(ctx, `INSERT INTO match_fetches AS f (match_id, kind, held_until, held_by)
VALUES ($1, $2, now() + $3::bigint * interval '1 microsecond', $4)
ON CONFLICT (match_id, kind) DO UPDATE SET held_until = EXCLUDED.held_until, held_by = EXCLUDED.held_by
WHERE f.status IN ('unfetched', 'temporary_failure')`, matchID, kind, d.Microseconds(), by)
	if err != nil {
		return fmt.Errorf("store: hold %s/%s: %w", matchID, kind, err)
	}
	return nil
}
