package riftflow

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

	"github.com/hashicorp/golang-lru/v2/expirable"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/store"
)

// Design 002's cache lifetimes, used by the read API's in-process caches
// and its Cache-Control answers.
const (
	MatchCacheTTL    = 24 * time.Hour  // a match's details: they do not change
	MatchIDsCacheTTL = 5 * time.Minute // a player's list of matches: new games arrive
)

// readCache holds the read API's answers: whole match and timeline bodies
// for MatchCacheTTL, pages of a player's matches for MatchIDsCacheTTL
// (expirable LRUs of hashicorp/golang-lru, 2,000 and 10,000 entries).
type readCache struct {
	bodies *expirable.LRU[string, cachedBody]
	pages  *expirable.LRU[string, matchesPage]
}

type cachedBody struct {
	body []byte
	etag string
}

func newReadCache() *readCache {
	return &readCache{
		bodies: expirable.NewLRU[string, cachedBody](2000, nil, MatchCacheTTL),
		pages:  expirable.NewLRU[string, matchesPage](10000, nil, MatchIDsCacheTTL),
	}
}

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

// serveBody answers body as JSON with its ETag and Cache-Control max-age,
// or 304 when the client has it (If-None-Match).
func serveBody(w http.ResponseWriter, r *http.Request, c cachedBody, maxAge time.Duration) {
	serveCached(w, r, c, fmt.Sprintf("public, max-age=%d", int(maxAge.Seconds())))
}

// serveJSON answers v as JSON with a strong ETag over it and cacheControl,
// or 304 when the client has it (If-None-Match).
func serveJSON(w http.ResponseWriter, r *http.Request, v any, cacheControl string) {
	body, err := json.Marshal(v)
	if err != nil {
		writeError(w, r, http.StatusInternalServerError, err)
		return
	}
	serveCached(w, r, cachedBody{body: body, etag: etagOf(body)}, cacheControl)
}

// serveCached is serveBody with any Cache-Control value.
func serveCached(w http.ResponseWriter, r *http.Request, c cachedBody, cacheControl string) {
	w.Header().Set("ETag", c.etag)
	w.Header().Set("Cache-Control", cacheControl)
	if inm := r.Header.Get("If-None-Match"); inm != "" && (inm == "*" || strings.Contains(inm, c.etag)) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(c.body)
}

// getMatch is GET /v1/matches/{match_id}: the stored MatchDto exactly as
// Riot sent it.
func (a *API) getMatch(w http.ResponseWriter, r *http.Request) {
	a.serveRaw(w, r, "match:", a.inf.Store.MatchRaw)
}

// getTimeline is GET /v1/matches/{match_id}/timeline: the stored TimelineDto.
func (a *API) getTimeline(w http.ResponseWriter, r *http.Request) {
	a.serveRaw(w, r, "timeline:", a.inf.Store.TimelineRaw)
}

func (a *API) serveRaw(w http.ResponseWriter, r *http.Request, prefix string,
	load func(context.Context, string) ([]byte, time.Time, error)) {
	id := r.PathValue("match_id")
	if _, _, err := riot.ParseMatchID(id); err != nil {
		writeError(w, r, http.StatusNotFound, err) // no stored match has such an ID
		return
	}
	if c, ok := a.cache.bodies.Get(prefix + id); ok {
		serveBody(w, r, c, MatchCacheTTL)
		return
	}
	body, _, err := load(r.Context(), id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(w, r, http.StatusNotFound, fmt.Errorf("no stored %s%s", prefix, id))
		return
	case err != nil:
		writeError(w, r, http.StatusServiceUnavailable, err)
		return
	}
	c := cachedBody{body: body, etag: etagOf(body)}
	a.cache.bodies.Add(prefix+id, c)
	serveBody(w, r, c, MatchCacheTTL)
}

// matchesPage is one page of GET /v1/players/{puuid}/matches.
type matchesPage struct {
	Matches []store.PlayerMatch `json:"matches"`
	// Next is the cursor of the following page; absent on the last one.
	Next string `json:"next,omitempty"`
}

// newMatchesPage is a page of ms, with the next page's cursor when the
// page is full.
func newMatchesPage(ms []store.PlayerMatch, limit int) matchesPage {
	p := matchesPage{Matches: ms}
	if len(ms) == limit && limit > 0 {
		last := ms[len(ms)-1]
		p.Next = encodeCursor(store.MatchPage{Before: last.GameCreation, BeforeID: last.MatchID})
	}
	return p
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
	page, err := decodeCursor(q.Get("cursor"))
	if err != nil {
		writeError(w, r, http.StatusBadRequest, err)
		return
	}
	key := fmt.Sprintf("%s|%d|%s", puuid, limit, q.Get("cursor"))
	out, ok := a.cache.pages.Get(key)
	if !ok {
		ms, err := a.inf.Store.PlayerMatches(r.Context(), puuid, page, limit)
		if err != nil {
			writeError(w, r, http.StatusServiceUnavailable, err)
			return
		}
		out = newMatchesPage(ms, limit)
		a.cache.pages.Add(key, out)
	}
	serveJSON(w, r, out, fmt.Sprintf("public, max-age=%d", int(MatchIDsCacheTTL.Seconds())))
}

// encodeCursor and decodeCursor turn a MatchPage into an opaque cursor:
// base64url("<unix ns>|<match id>").
func encodeCursor(p store.MatchPage) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(p.Before.UnixNano(), 10) + "|" + p.BeforeID))
}

func decodeCursor(s string) (store.MatchPage, error) {
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
