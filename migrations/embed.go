// Package migrations holds riftflow's versioned Postgres schema as plain SQL
// files (jackc/tern format), embedded so every binary can apply them.
package migrations

import "embed"

// FS holds the migration files, 001_*.sql, 002_*.sql, ..., and the shared
// templates they include (shared/*.sql).
//
//go:embed *.sql shared/*.sql
var FS embed.FS
