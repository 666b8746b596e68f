package store

import "github.com/jackc/pgx/v5/pgxpool"

// PoolOf is s's own pool, for the tests about its connections (their
// number, a setting of their session); SQL of a test's own goes through
// pgtest.Pool instead.
func PoolOf(s *Store) *pgxpool.Pool { return s.pool }
