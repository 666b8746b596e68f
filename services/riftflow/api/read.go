package api

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/store"
)

// Design 002's cache lifetimes, used by the read API's cache (readcache.go)
// and its Cache-Control answers.
const (
	MatchCacheTTL    = 24 * time.Hour  // a match's details: they do not change
	MatchIDsCacheTTL = 5 * time.Minute // a player's list of matches (and ranks, reports): new ones arrive
)

// openAPIDoc is the OpenAPI 3.1 document of the HTTP API, served at
// /openapi.json; TestOpenAPIMatchesRoutes keeps it in step with the routes.
//
//go:embed openapi.json
var openAPIDoc []byte

func (a *API) getOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.Write(openAPIDoc)
}

// etagOf is a strong ETag over body.
func etagOf(body []byte) string {
	sum := sha256.Sum256(body)
	return `"` + hex.EncodeToString(sum[:12]) + `"`
}

// serveBody answers a cached body as JSON with its ETag and Cache-Control
// max-age, or 304 when the client has it (If-None-Match). A client that
// accepts gzip gets the cached gzip bytes as they are (Content-Encoding:
// gzip, ETag suffixed "-gz"); another gets them inflated.
func serveBody(w http.ResponseWriter, r *http.Request, c cachedBody, maxAge time.Duration) {
	gz := acceptsGzip(r)
	etag := c.etag
	if gz {
		etag = strings.TrimSuffix(c.etag, `"`) + `-gz"`
	}
	w.Header().Add("Vary", "Accept-Encoding")
	if notModified(w, r, etag, c.etag, fmt.Sprintf("public, max-age=%d", int(maxAge.Seconds()))) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if gz {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Length", strconv.Itoa(len(c.gz)))
		w.Write(c.gz)
		return
	}
	body, err := gunzipBody(c.gz)
	if err != nil {
		writeError(w, r, http.StatusInternalServerError, err)
		return
	}
	w.Write(body)
}

// serveJSON answers v as JSON with a strong ETag over it and cacheControl,
// or 304 when the client has it (If-None-Match).
func serveJSON(w http.ResponseWriter, r *http.Request, v any, cacheControl string) {
	body, err := json.Marshal(v)
	if err != nil {
		writeError(w, r, http.StatusInternalServerError, err)
		return
	}
	if etag := etagOf(body); notModified(w, r, etag, etag, cacheControl) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(body)
}

// notModified sets the ETag (etag) and Cache-Control headers and answers
// 304 when If-None-Match names etag or same (the ETag of the other
// encoding of the same body), or is "*"; it reports whether it did.
func notModified(w http.ResponseWriter, r *http.Request, etag, same, cacheControl string) bool {
	w.Header().Set("ETag", etag)
	w.Header().Set("Cache-Control", cacheControl)
	inm := r.Header.Get("If-None-Match")
	if inm == "" || (inm != "*" && !strings.Contains(inm, etag) && !strings.Contains(inm, same)) {
		return false
	}
	w.WriteHeader(http.StatusNotModified)
	return true
}

// acceptsGzip reports whether r's Accept-Encoding takes gzip (and not with
// q=0).
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(name), "gzip") {
			q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
			return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
		}
	}
	return false
}

// getMatch is GET /v1/matches/{match_id}: the stored MatchDto exactly as
// Riot sent it.
func (a *API) getMatch(w http.ResponseWriter, r *http.Request) {
	a.serveRaw(w, r, "m", "match", a.inf.Store.MatchRaw)
}

// getTimeline is GET /v1/matches/{match_id}/timeline: the stored TimelineDto.
func (a *API) getTimeline(w http.ResponseWriter, r *http.Request) {
	a.serveRaw(w, r, "t", "timeline", a.inf.Store.TimelineRaw)
}

func (a *API) serveRaw(w http.ResponseWriter, r *http.Request, kind, what string,
	load func(context.Context, string) ([]byte, time.Time, error)) {
	id := r.PathValue("match_id")
	if _, _, err := riot.ParseMatchID(id); err != nil {
		writeError(w, r, http.StatusNotFound, err) // no stored match has such an ID
		return
	}
	c, err := a.cache.get(r.Context(), matchCacheKey(kind, id), MatchCacheTTL, func(ctx context.Context) ([]byte, error) {
		body, _, err := load(ctx, id)
		return body, err
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(w, r, http.StatusNotFound, fmt.Errorf("no stored %s %s", what, id))
	case err != nil:
		writeError(w, r, http.StatusServiceUnavailable, err)
	default:
		serveBody(w, r, c, MatchCacheTTL)
	}
}

// MatchesPage is one page of GET /v1/players/{puuid}/matches.
type MatchesPage struct {
	Matches []store.PlayerMatch `json:"matches"`
	// Next is the cursor of the following page; absent on the last one.
	Next string `json:"next,omitempty"`
}

// NewMatchesPage is a page of ms, with the next page's cursor when the
// page is full.
func NewMatchesPage(ms []store.PlayerMatch, limit int) MatchesPage {
	return MatchesPage{Matches: ms, Next: nextCursor(ms, limit, func(last store.PlayerMatch) string {
		return encodeCursor(store.MatchPage{Before: last.GameCreation, BeforeID: last.MatchID})
	})}
}

// nextCursor is the cursor of the page after items, a page of at most
// limit of a player's list: cursor of its last item when the page is full
// (limit > 0), "" when it is the last page.
func nextCursor[T any](items []T, limit int, cursor func(last T) string) string {
	if len(items) == limit && limit > 0 {
		return cursor(items[len(items)-1])
	}
	return ""
}

// getPlayer is GET /v1/players/{puuid}: the account, its sync state and
// what is stored for it (as GET /v1/accounts/{puuid}, with problem+json).
func (a *API) getPlayer(w http.ResponseWriter, r *http.Request) {
	if !validID(r.PathValue("puuid"), bus.MaxPUUIDLen) {
		writeError(w, r, http.StatusNotFound, errors.New("no such player"))
		return
	}
	st, err := a.inf.Store.AccountStatus(r.Context(), r.PathValue("puuid"))
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(w, r, http.StatusNotFound, errors.New("no such player"))
	case err != nil:
		writeError(w, r, http.StatusServiceUnavailable, err)
	default:
		serveJSON(w, r, st, "private, max-age=0") // revalidated every time: the sync state moves
	}
}

// getPlayerMatches is GET /v1/players/{puuid}/matches?limit=20&cursor=…:
// the player's stored matches, newest first, paged by an opaque cursor.
func (a *API) getPlayerMatches(w http.ResponseWriter, r *http.Request) {
	servePlayerPage(w, r, a, "matches", DecodeCursor, func(ctx context.Context, puuid string, page store.MatchPage, limit int) (any, error) {
		ms, err := a.inf.Store.PlayerMatches(ctx, puuid, page, limit)
		return NewMatchesPage(ms, limit), err
	})
}

// RanksPage is one page of GET /v1/players/{puuid}/ranks.
type RanksPage struct {
	Ranks []store.RankSnapshot `json:"ranks"`
	Next  string               `json:"next,omitempty"` // the following page's cursor; absent on the last one
}

// NewRanksPage is a page of rs, with the next page's cursor (day and
// queue of its last snapshot) when the page is full.
func NewRanksPage(rs []store.RankSnapshot, limit int) RanksPage {
	return RanksPage{Ranks: rs, Next: nextCursor(rs, limit, func(last store.RankSnapshot) string {
		return EncodeDayCursor(last.SnapshotDate, last.QueueType)
	})}
}

// getPlayerRanks is GET /v1/players/{puuid}/ranks?limit=20&cursor=…: the
// player's daily league-v4 snapshots (one per ranked queue and day),
// newest day first, paged by an opaque cursor.
func (a *API) getPlayerRanks(w http.ResponseWriter, r *http.Request) {
	servePlayerPage(w, r, a, "ranks", DecodeDayCursor, func(ctx context.Context, puuid string, page store.DayPage, limit int) (any, error) {
		rs, err := a.inf.Store.RankSnapshots(ctx, puuid, page, limit)
		return NewRanksPage(rs, limit), err
	})
}

// ReportsPage is one page of GET /v1/players/{puuid}/reports.
type ReportsPage struct {
	Reports []store.StoredReport `json:"reports"`
	Next    string               `json:"next,omitempty"` // the following page's cursor; absent on the last one
}

// NewReportsPage is a page of rs, with the next page's cursor (the week
// of its last report) when the page is full.
func NewReportsPage(rs []store.StoredReport, limit int) ReportsPage {
	return ReportsPage{Reports: rs, Next: nextCursor(rs, limit, func(last store.StoredReport) string {
		return EncodeDayCursor(last.WeekStart, "")
	})}
}

// getPlayerReports is GET /v1/players/{puuid}/reports?limit=20&cursor=…:
// the player's weekly reports, newest week first, paged by an opaque
// cursor.
func (a *API) getPlayerReports(w http.ResponseWriter, r *http.Request) {
	servePlayerPage(w, r, a, "reports", DecodeDayCursor, func(ctx context.Context, puuid string, page store.DayPage, limit int) (any, error) {
		rs, err := a.inf.Store.WeeklyReports(ctx, puuid, page, limit)
		return NewReportsPage(rs, limit), err
	})
}

// servePlayerPage answers one page of a player's list (what: matches,
// ranks, reports) from the read cache (MatchIDsCacheTTL), loading it with
// load on a miss. limit is 1..100 (default 20); cursor is decoded by
// decode; both bad give 400, an invalid PUUID 404.
func servePlayerPage[P any](w http.ResponseWriter, r *http.Request, a *API, what string, decode func(string) (P, error),
	load func(ctx context.Context, puuid string, page P, limit int) (any, error)) {
	puuid, q := r.PathValue("puuid"), r.URL.Query()
	if !validID(puuid, bus.MaxPUUIDLen) {
		writeError(w, r, http.StatusNotFound, errors.New("no such player"))
		return
	}
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			writeError(w, r, http.StatusBadRequest, fmt.Errorf("limit %q: want 1..100", v))
			return
		}
		limit = n
	}
	cursor := q.Get("cursor")
	page, err := decode(cursor)
	if err == nil && len(cursor) > 200 { // none this API gives; it would make a long cache key
		err = errors.New("cursor: not one this API gave")
	}
	if err != nil {
		writeError(w, r, http.StatusBadRequest, err)
		return
	}
	if cursor == "" {
		cursor = "first"
	}
	key := playerCacheKey(puuid, fmt.Sprintf("%s.%d.%s", what, limit, cursor))
	c, err := a.cache.get(r.Context(), key, MatchIDsCacheTTL, func(ctx context.Context) ([]byte, error) {
		v, err := load(ctx, puuid, page, limit)
		if err != nil {
			return nil, err
		}
		return json.Marshal(v)
	})
	if err != nil {
		writeError(w, r, http.StatusServiceUnavailable, err)
		return
	}
	serveBody(w, r, c, MatchIDsCacheTTL)
}

// encodeCursor and DecodeCursor turn a MatchPage into an opaque cursor:
// base64url("<unix ns>|<match id>").
func encodeCursor(p store.MatchPage) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(p.Before.UnixNano(), 10) + "|" + p.BeforeID))
}

func DecodeCursor(s string) (store.MatchPage, error) {
	if s == "" {
		return store.MatchPage{}, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	ns, id, ok := strings.Cut(string(b), "|")
	n, perr := strconv.ParseInt(ns, 10, 64)
	if err != nil || !ok || perr != nil || id == "" {
		return store.MatchPage{}, errors.New("cursor: not one this API gave")
	}
	return store.MatchPage{Before: time.Unix(0, n).UTC(), BeforeID: id}, nil
}

// EncodeDayCursor and DecodeDayCursor turn a DayPage into an opaque
// cursor: base64url("<YYYY-MM-DD>|<key>").
func EncodeDayCursor(day, key string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(day + "|" + key))
}

func DecodeDayCursor(s string) (store.DayPage, error) {
	if s == "" {
		return store.DayPage{}, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	d, key, ok := strings.Cut(string(b), "|")
	t, terr := time.Parse(time.DateOnly, d)
	if err != nil || !ok || terr != nil {
		return store.DayPage{}, errors.New("cursor: not one this API gave")
	}
	return store.DayPage{Before: t, BeforeKey: key}, nil
}
