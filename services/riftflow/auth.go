package riftflow

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/riftflow/riftflow/pkg/redact"
	"github.com/riftflow/riftflow/pkg/store"
)

// Scope is what an API token may do. Scopes nest: admin includes sync, and
// sync includes read.
//
//   - read: GET the accounts, the job log and a sync's events.
//   - sync: start syncs (POST /v1/sync, link, unlink, login); spends the Riot key.
//   - admin: everything, including the operator endpoints.
type Scope string

// The scopes, weakest first.
const (
	ScopeRead  Scope = "read"
	ScopeSync  Scope = "sync"
	ScopeAdmin Scope = "admin"
)

var scopeRank = map[Scope]int{ScopeRead: 1, ScopeSync: 2, ScopeAdmin: 3}

// ParseScopes parses a comma-separated scope list ("read,sync").
// Errors: an empty list or an unknown scope.
func ParseScopes(s string) ([]Scope, error) {
	var out []Scope
	for p := range strings.SplitSeq(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if scopeRank[Scope(p)] == 0 {
			return nil, fmt.Errorf("unknown scope %q (read, sync or admin)", p)
		}
		if !slices.Contains(out, Scope(p)) {
			out = append(out, Scope(p))
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no scope given (read, sync or admin)")
	}
	return out, nil
}

// APIToken is an api_tokens row: everything about a token but the token.
type APIToken struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Scopes     []Scope    `json:"scopes"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
}

// Allows reports whether the token grants scope need (scopes nest).
func (t APIToken) Allows(need Scope) bool {
	for _, s := range t.Scopes {
		if scopeRank[s] >= scopeRank[need] {
			return true
		}
	}
	return false
}

// A token is "rft_<id>_<secret>": id is 16 hex digits (8 random bytes,
// public: it names the token in `riftflow token list` and logs), secret is
// 256 random bits in unpadded base64url (43 characters). The database keeps
// the SHA-256 of the whole string.
const tokenPrefix = "rft_"

var tokenRe = regexp.MustCompile(`^rft_([0-9a-f]{16})_[A-Za-z0-9_-]{43}$`)

// errBadToken is the answer for a token that is malformed, unknown,
// revoked or does not match: the client learns no more than that.
var errBadToken = errors.New("invalid or revoked token")

// Tokens manages API tokens in Postgres (table api_tokens, migration 002).
type Tokens struct{ pool *pgxpool.Pool }

// NewTokens returns the token store over st's pool.
func NewTokens(st *store.Store) *Tokens { return &Tokens{pool: st.Pool()} }

// Create makes a token for name with scopes and returns the token (shown
// once, never stored) and its row.
func (ts *Tokens) Create(ctx context.Context, name string, scopes []Scope) (string, APIToken, error) {
	if strings.TrimSpace(name) == "" {
		return "", APIToken{}, errors.New("a token needs a name (who or what holds it)")
	}
	if len(scopes) == 0 {
		return "", APIToken{}, errors.New("a token needs at least one scope")
	}
	var id [8]byte
	var secret [32]byte
	rand.Read(id[:])
	rand.Read(secret[:])
	t := APIToken{ID: hex.EncodeToString(id[:]), Name: name, Scopes: scopes}
	token := tokenPrefix + t.ID + "_" + base64.RawURLEncoding.EncodeToString(secret[:])
	sum := sha256.Sum256([]byte(token))
	err := ts.pool.QueryRow(ctx, `INSERT INTO api_tokens (id, name, scopes, sha256) VALUES ($1, $2, $3, $4) RETURNING created_at`,
		t.ID, name, scopeStrings(scopes), sum[:]).Scan(&t.CreatedAt)
	if err != nil {
		return "", APIToken{}, fmt.Errorf("create token: %w", err)
	}
	redact.Register(token)
	return token, t, nil
}

// List returns every token, revoked ones included, oldest first.
func (ts *Tokens) List(ctx context.Context) ([]APIToken, error) {
	rows, err := ts.pool.Query(ctx, `SELECT id, name, scopes, created_at, last_used_at, revoked_at FROM api_tokens ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (APIToken, error) {
		var t APIToken
		var scopes []string
		err := r.Scan(&t.ID, &t.Name, &scopes, &t.CreatedAt, &t.LastUsedAt, &t.RevokedAt)
		for _, s := range scopes {
			t.Scopes = append(t.Scopes, Scope(s))
		}
		return t, err
	})
}

// Revoke revokes token id at once (the next request with it gets 401).
// store.ErrNotFound when there is no such token or it is already revoked.
func (ts *Tokens) Revoke(ctx context.Context, id string) error {
	tag, err := ts.pool.Exec(ctx, `UPDATE api_tokens SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL`, id)
	if err != nil {
		return fmt.Errorf("revoke token: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrNotFound
	}
	return nil
}

// RevokeName revokes every live token called name and returns how many.
func (ts *Tokens) RevokeName(ctx context.Context, name string) (int64, error) {
	tag, err := ts.pool.Exec(ctx, `UPDATE api_tokens SET revoked_at = now() WHERE name = $1 AND revoked_at IS NULL`, name)
	if err != nil {
		return 0, fmt.Errorf("revoke tokens: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Verify returns the live token row for token. The row is found by the
// token's public id; the SHA-256 of the presented token is then compared
// with the stored one in constant time. errBadToken for anything that is
// not a live token; other errors are Postgres failures.
func (ts *Tokens) Verify(ctx context.Context, token string) (APIToken, error) {
	m := tokenRe.FindStringSubmatch(token)
	if m == nil {
		return APIToken{}, errBadToken
	}
	var t APIToken
	var scopes []string
	var stored []byte
	err := ts.pool.QueryRow(ctx, `SELECT id, name, scopes, sha256, created_at, revoked_at FROM api_tokens WHERE id = $1`, m[1]).
		Scan(&t.ID, &t.Name, &scopes, &stored, &t.CreatedAt, &t.RevokedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return APIToken{}, errBadToken
	}
	if err != nil {
		return APIToken{}, fmt.Errorf("verify token: %w", err)
	}
	sum := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(sum[:], stored) != 1 || t.RevokedAt != nil {
		return APIToken{}, errBadToken
	}
	for _, s := range scopes {
		t.Scopes = append(t.Scopes, Scope(s))
	}
	// last_used_at at minute precision: one write a minute per token at most.
	_, _ = ts.pool.Exec(ctx, `UPDATE api_tokens SET last_used_at = now() WHERE id = $1
AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')`, t.ID)
	return t, nil
}

func scopeStrings(scopes []Scope) []string {
	out := make([]string, len(scopes))
	for i, s := range scopes {
		out[i] = string(s)
	}
	return out
}

// ---- HTTP ---------------------------------------------------------------

type tokenKey struct{}

// tokenFrom returns the verified token of an authenticated request.
func tokenFrom(ctx context.Context) (APIToken, bool) {
	t, ok := ctx.Value(tokenKey{}).(APIToken)
	return t, ok
}

// bearer returns the token of an "Authorization: Bearer <token>" header
// (RFC 6750; the scheme is case-insensitive), or "".
func bearer(r *http.Request) string {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

// authorize wraps h so it runs only for a request with a live token
// granting need: 401 (with WWW-Authenticate) without a valid token, 403
// when the token lacks the scope, 503 when the token store cannot answer.
// The request body is capped at maxBody bytes.
func (a *API) authorize(need Scope, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := bearer(r)
		if tok == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="riftflow"`)
			writeProblemAt(w, r, http.StatusUnauthorized, "this endpoint needs a bearer token (Authorization: Bearer rft_…); create one with `riftflow token create`")
			return
		}
		if a.tokens == nil {
			writeProblemAt(w, r, http.StatusServiceUnavailable, "the API has no token store (no database)")
			return
		}
		t, err := a.tokens.Verify(r.Context(), tok)
		if errors.Is(err, errBadToken) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="riftflow", error="invalid_token"`)
			writeProblemAt(w, r, http.StatusUnauthorized, errBadToken.Error())
			return
		}
		if err != nil {
			a.inf.Log.WarnContext(r.Context(), "api: token store unavailable", "err", err)
			writeProblemAt(w, r, http.StatusServiceUnavailable, "the token store is unavailable")
			return
		}
		if !t.Allows(need) {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="riftflow", error="insufficient_scope", scope=%q`, need))
			writeProblemAt(w, r, http.StatusForbidden, fmt.Sprintf("token %s lacks scope %q", t.ID, need))
			return
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, a.Limits.MaxBody)
		}
		h(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, t)))
	})
}
