package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// TokenRow is an api_tokens row (migration 002): an API token's public id,
// its holder's name, its scopes ("read", "sync", "admin"), the SHA-256 of
// the whole token string (the token itself is never stored) and its times.
type TokenRow struct {
	ID         string
	Name       string
	Scopes     []string
	SHA256     []byte
	CreatedAt  time.Time
	LastUsedAt *time.Time
	RevokedAt  *time.Time
}

// InsertToken stores a new token row (ID, Name, Scopes, SHA256) and
// returns its created_at.
func (s *Store) InsertToken(ctx context.Context, t TokenRow) (_ time.Time, err error) {
	defer classified(&err)
	var created time.Time
	err = s.pool.QueryRow(ctx, `INSERT INTO api_tokens (id, name, scopes, sha256) VALUES ($1, $2, $3, $4) RETURNING created_at`,
		t.ID, t.Name, t.Scopes, t.SHA256).Scan(&created)
	if err != nil {
		return time.Time{}, fmt.Errorf("create token: %w", err)
	}
	return created, nil
}

// Tokens returns every token row, revoked ones included, oldest first,
// without their hashes.
func (s *Store) Tokens(ctx context.Context) (_ []TokenRow, err error) {
	defer classified(&err)
	rows, err := s.pool.Query(ctx, `SELECT id, name, scopes, created_at, last_used_at, revoked_at FROM api_tokens ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (TokenRow, error) {
		var t TokenRow
		err := r.Scan(&t.ID, &t.Name, &t.Scopes, &t.CreatedAt, &t.LastUsedAt, &t.RevokedAt)
		return t, err
	})
}

// TokenByID returns the token row with public id, hash included;
// ErrNotFound when there is none.
func (s *Store) TokenByID(ctx context.Context, id string) (_ TokenRow, err error) {
	defer classified(&err)
	var t TokenRow
	err = s.pool.QueryRow(ctx, `SELECT id, name, scopes, sha256, created_at, last_used_at, revoked_at FROM api_tokens WHERE id = $1`, id).
		Scan(&t.ID, &t.Name, &t.Scopes, &t.SHA256, &t.CreatedAt, &t.LastUsedAt, &t.RevokedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return TokenRow{}, ErrNotFound
	}
	if err != nil {
		return TokenRow{}, fmt.Errorf("read token: %w", err)
	}
	return t, nil
}

// RevokeToken revokes token id now. ErrNotFound when there is no such
// token or it is already revoked.
func (s *Store) RevokeToken(ctx context.Context, id string) (err error) {
	defer classified(&err)
	tag, err := s.pool.Exec(ctx, `UPDATE api_tokens SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL`, id)
	if err != nil {
		return fmt.Errorf("revoke token: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// RevokeTokensNamed revokes every live token called name and returns how
// many it revoked.
func (s *Store) RevokeTokensNamed(ctx context.Context, name string) (_ int64, err error) {
	defer classified(&err)
	tag, err := s.pool.Exec(ctx, `UPDATE api_tokens SET revoked_at = now() WHERE name = $1 AND revoked_at IS NULL`, name)
	if err != nil {
		return 0, fmt.Errorf("revoke tokens: %w", err)
	}
	return tag.RowsAffected(), nil
}

// TouchToken records token id as used now, at minute precision: one write
// a minute per token at most. Best effort: the error is for the caller to
// log or drop.
func (s *Store) TouchToken(ctx context.Context, id string) (err error) {
	defer classified(&err)
	_, err = s.pool.Exec(ctx, `UPDATE api_tokens SET last_used_at = now() WHERE id = $1
AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')`, id)
	return err
}
