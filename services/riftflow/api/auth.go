package api

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

// ErrBadToken is the answer for a token that is malformed, unknown,
// revoked or does not match: the client learns no more than that.
var ErrBadToken = errors.New("invalid or revoked token")

// TokenID is the public id of s: of the token when s is a whole token,
// else s without the "rft_" prefix (an id as `riftflow token list` shows
// it, with or without the prefix).
func TokenID(s string) string {
	if m := tokenRe.FindStringSubmatch(s); m != nil {
		return m[1]
	}
	return strings.TrimPrefix(s, tokenPrefix)
}

// Tokens issues and checks API tokens; the rows live in Postgres
// (store.TokenRow, table api_tokens).
type Tokens struct{ st *store.Store }

// NewTokens returns the token store over st.
func NewTokens(st *store.Store) *Tokens { return &Tokens{st: st} }

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
	created, err := ts.st.InsertToken(ctx, store.TokenRow{ID: t.ID, Name: name, Scopes: ScopeStrings(scopes), SHA256: sum[:]})
	if err != nil {
		return "", APIToken{}, err
	}
	t.CreatedAt = created
	redact.Register(token)
	return token, t, nil
}

// List returns every token, revoked ones included, oldest first.
func (ts *Tokens) List(ctx context.Context) ([]APIToken, error) {
	rows, err := ts.st.Tokens(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]APIToken, len(rows))
	for i, r := range rows {
		out[i] = apiToken(r)
	}
	return out, nil
}

// Revoke revokes token id at once (the next request with it gets 401).
// store.ErrNotFound when there is no such token or it is already revoked.
func (ts *Tokens) Revoke(ctx context.Context, id string) error { return ts.st.RevokeToken(ctx, id) }

// RevokeName revokes every live token called name and returns how many.
func (ts *Tokens) RevokeName(ctx context.Context, name string) (int64, error) {
	return ts.st.RevokeTokensNamed(ctx, name)
}

// Verify returns the live token row for token. The row is found by the
// token's public id; the SHA-256 of the presented token is then compared
// with the stored one in constant time. ErrBadToken for anything that is
// not a live token; other errors are Postgres failures.
func (ts *Tokens) Verify(ctx context.Context, token string) (APIToken, error) {
	m := tokenRe.FindStringSubmatch(token)
	if m == nil {
		return APIToken{}, ErrBadToken
	}
	row, err := ts.st.TokenByID(ctx, m[1])
	if errors.Is(err, store.ErrNotFound) {
		return APIToken{}, ErrBadToken
	}
	if err != nil {
		return APIToken{}, fmt.Errorf("verify token: %w", err)
	}
	sum := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(sum[:], row.SHA256) != 1 || row.RevokedAt != nil {
		return APIToken{}, ErrBadToken
	}
	_ = ts.st.TouchToken(ctx, row.ID)
	return apiToken(row), nil
}

// apiToken is row without its hash.
func apiToken(r store.TokenRow) APIToken {
	t := APIToken{ID: r.ID, Name: r.Name, CreatedAt: r.CreatedAt, LastUsedAt: r.LastUsedAt, RevokedAt: r.RevokedAt}
	for _, s := range r.Scopes {
		t.Scopes = append(t.Scopes, Scope(s))
	}
	return t
}

func ScopeStrings(scopes []Scope) []string {
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
		if errors.Is(err, ErrBadToken) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="riftflow", error="invalid_token"`)
			writeProblemAt(w, r, http.StatusUnauthorized, ErrBadToken.Error())
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
