// Package api is riftflow's HTTP API (API, served by `riftflow up` and
// `riftflow serve`): its routes and their handlers, the bearer-token
// middleware and scopes (auth.go), the sync progress stream (events.go),
// the read API and its shared cache (read.go, readcache.go), the
// problem+json errors (problem.go), the operator calls it shares with the
// CLI (RetryMatches, ForgetPlayer) and its HTTP server (server.go).
package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/telemetry"
)

// API is riftflow's HTTP API (served by `riftflow up` next to /healthz).
// Every /v1 route needs a bearer token (auth.go, docs/security.md) with
// the scope given in brackets; without one the answer is 401, with too
// weak a scope 403, both RFC 9457 application/problem+json:
//
//	POST /v1/sync                       [sync] body: an IngestRequest; 202 {"request_id","events"}, 400, or
//	                                    409 (problem+json with "request_id", the holder's) when another
//	                                    request syncs the account
//	GET  /v1/accounts/{puuid}           [read] the account's sync status (pending while a request is queued),
//	                                    progress, counts, queued requests (404 unknown and nothing queued)
//	POST /v1/accounts/{puuid}/link      [sync] body {"platform", "riot_id"?}: the account becomes active
//	                                    and a full sync starts now: 202 as POST /v1/sync, or 409
//	POST /v1/accounts/{puuid}/unlink    [sync] active = false (scheduled jobs skip it): 200, 404
//	POST /v1/accounts/{puuid}/login     [sync] a login: a latest sync (202) when the last sync is older
//	                                    than LOGIN_SYNC_STALE_AFTER (default 1h) or never was, else
//	                                    200 {"status":"fresh"|"syncing"}; 404 unknown account
//	GET  /v1/sync/{request_id}/events   [read] progress as Server-Sent Events until completed/failed/rejected;
//	                                    replayed for a late client, at once when already finished;
//	                                    404 for a request id nobody submitted; 429 with Retry-After
//	                                    beyond API_SSE_MAX_PER_TOKEN or API_SSE_MAX open streams
//	GET  /v1/jobs?type=&puuid=&status=&limit=  [read] the job log (design 002), newest first; a pending
//	                                    sync (accepted, not started) has its queue position
//	POST /v1/admin/retry                [admin] body: a RetryRequest; 200 RetryResult: replays permanently
//	                                    unfetchable matches (and dead letters), 100 per run
//	GET  /v1/admin/pause                [admin] the pause switch: {"paused","reason","by","at"}
//	PUT  /v1/admin/pause                [admin] body {"paused":bool,"reason"?,"by"?}: sets it for every service
//	DELETE /v1/admin/accounts/{puuid}   [admin] erase a player (ForgetPlayer): 200 what was removed, 404
//	GET  /v1/players/{puuid}            [read] a player: account, sync state, counts
//	GET  /v1/players/{puuid}/matches?limit=&cursor=  [read] their stored matches, newest first, paged
//	GET  /v1/players/{puuid}/ranks?limit=&cursor=    [read] their daily league-v4 snapshots, newest first, paged
//	GET  /v1/players/{puuid}/reports?limit=&cursor=  [read] their weekly reports, newest first, paged
//	GET  /v1/matches/{match_id}         [read] the stored MatchDto as Riot sent it (ETag, 1-day cache)
//	GET  /v1/matches/{match_id}/timeline  [read] the stored TimelineDto
//	GET  /openapi.json                  [read] the OpenAPI document of these routes
//
// While the pause switch is on, every route but GET ones and the switch
// itself answers 503; while Postgres does not answer, every route but the
// switch does (both as problem+json).
//
// Every error, on every route, is an RFC 9457 problem details object
// (application/problem+json, Problem): bad input, unknown ids, conflicts,
// the pause and database guard, authentication, an unknown path under /v1
// (404) or a known path with another method (405 with Allow). Only an
// event stream already started can no longer answer one; it ends with an
// plain end of the stream instead.
//
// Bodies over API_MAX_BODY_BYTES get 413. A 409 is also announced on
// lol.ingest.rejected and logged in the jobs table (status rejected).
type API struct {
	inf    deps
	tokens *Tokens
	// StaleAfter is the login trigger's age (LOGIN_SYNC_STALE_AFTER).
	StaleAfter time.Duration
	// Limits are the HTTP limits (APIEnv).
	Limits APILimits

	db        dbHealth
	cache     *readCache
	streams   *streamGate
	submitted *recentIDs
}

// APILimits bound what one client can hold of the API.
type APILimits struct {
	// MaxBody is the largest request body in bytes (API_MAX_BODY_BYTES).
	MaxBody int64 `env:"API_MAX_BODY_BYTES" envDefault:"16384"`
	// SSEPerToken and SSETotal cap the open event streams per token and in
	// all (API_SSE_MAX_PER_TOKEN, API_SSE_MAX); each holds a JetStream
	// consumer.
	SSEPerToken int `env:"API_SSE_MAX_PER_TOKEN" envDefault:"8"`
	SSETotal    int `env:"API_SSE_MAX" envDefault:"128"`
	// SSEMaxAge ends an event stream after this long (API_SSE_MAX_AGE); the
	// client reconnects and gets the replay.
	SSEMaxAge time.Duration `env:"API_SSE_MAX_AGE" envDefault:"30m"`
	// Keepalive is the SSE comment interval; every write extends the write
	// deadline by twice this.
	Keepalive time.Duration `env:"-"`
}

// APIEnv is the API's configuration.
type APIEnv struct {
	StaleAfter time.Duration `env:"LOGIN_SYNC_STALE_AFTER" envDefault:"1h"`
	Limits     APILimits
	ReadCache  ReadCacheEnv
}

// deps is what the API runs on: a process (NATS, the pause switch, the
// logger, the clock) and the Postgres store.
type deps struct {
	*app.Process
	Store *store.Store
}

// New builds the API over p (NATS, the pause switch, logs, the clock; nil:
// none) and st (Postgres, which holds the tokens; nil: no database, every
// /v1 route answers 503), reading APIEnv (an unreadable value keeps the
// default).
func New(p *app.Process, st *store.Store) *API {
	if p == nil { // no process: no NATS, no logger of its own
		p = &app.Process{}
	}
	inf := deps{Process: p, Store: st}
	a := &API{inf: inf, StaleAfter: time.Hour,
		Limits: APILimits{MaxBody: 16 << 10, SSEPerToken: 8, SSETotal: 128, SSEMaxAge: 30 * time.Minute}}
	var e APIEnv
	memory := int64(defaultReadCacheMemory)
	if err := config.Parse(&e); err == nil {
		if e.ReadCache.MemoryBytes >= 0 {
			memory = e.ReadCache.MemoryBytes
		}
		if e.StaleAfter > 0 {
			a.StaleAfter = e.StaleAfter
		}
		if e.Limits.MaxBody > 0 && e.Limits.SSEPerToken > 0 && e.Limits.SSETotal > 0 && e.Limits.SSEMaxAge > 0 {
			a.Limits = e.Limits
		}
	}
	a.Limits.Keepalive = 15 * time.Second
	log := slog.Default()
	if inf.Log != nil {
		log = inf.Logger("api")
	}
	a.cache = newReadCache(context.Background(), inf.JS, memory, log)
	if inf.Store != nil {
		a.tokens = NewTokens(inf.Store)
	}
	a.streams = &streamGate{perToken: map[string]int{}}
	a.submitted = newRecentIDs(10000, time.Hour)
	return a
}

// Mount registers the API's routes on the ops server.
func (a *API) Mount(ops *telemetry.Ops) {
	a.routes(func(pattern string, need Scope, h http.HandlerFunc) { ops.Handle(pattern, a.authorize(need, h)) })
	ops.Handle("/v1/", a.unrouted())
}

// Handler serves the API's routes alone (tests, embedding).
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	a.routes(func(pattern string, need Scope, h http.HandlerFunc) { mux.Handle(pattern, a.authorize(need, h)) })
	mux.Handle("/v1/", a.unrouted())
	return mux
}

// unrouted answers what no route takes under /v1/, as problem+json: 405
// with an Allow header when the path is a route's with another method,
// else 404.
func (a *API) unrouted() http.Handler {
	allow := map[string][]string{} // route path pattern -> its methods
	paths := http.NewServeMux()
	for _, rt := range a.routeTable() {
		method, path, _ := strings.Cut(rt.pattern, " ")
		if _, seen := allow[path]; !seen {
			paths.Handle(path, http.NotFoundHandler())
		}
		allow[path] = append(allow[path], method)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, path := paths.Handler(r); path != "" {
			w.Header().Set("Allow", strings.Join(allow[path], ", "))
			writeProblemAt(w, r, http.StatusMethodNotAllowed, fmt.Sprintf("%s does not take %s; it takes %s", r.URL.Path, r.Method, strings.Join(allow[path], ", ")))
			return
		}
		writeProblemAt(w, r, http.StatusNotFound, fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
	})
}

// routes registers every route of routeTable with the scope it needs;
// handle wraps each in authorize, so a route cannot be added without
// choosing its scope. The pause and database guard wraps every handler.
func (a *API) routes(handle func(pattern string, need Scope, h http.HandlerFunc)) {
	for _, rt := range a.routeTable() {
		handle(rt.pattern, rt.scope, a.guard(rt).ServeHTTP)
	}
}

// route is one entry of the API's route table: a net/http ServeMux
// pattern ("METHOD /path/{wildcard}") and its handler. Middleware (auth,
// logging) wraps routes here, in one place.
type route struct {
	pattern string
	scope   Scope // the token scope it needs (auth.go)
	handler http.Handler
}

// routeTable is every route of the API with its scope, in one place: the
// sync and account routes, the admin calls (admin.go) and the read API
// (read.go).
func (a *API) routeTable() []route {
	return []route{
		{"POST /v1/sync", ScopeSync, http.HandlerFunc(a.postSync)},
		{"GET /v1/accounts/{puuid}", ScopeRead, http.HandlerFunc(a.getAccount)},
		{"POST /v1/accounts/{puuid}/link", ScopeSync, http.HandlerFunc(a.postLink)},
		{"POST /v1/accounts/{puuid}/unlink", ScopeSync, http.HandlerFunc(a.postUnlink)},
		{"POST /v1/accounts/{puuid}/login", ScopeSync, http.HandlerFunc(a.postLogin)},
		{"GET /v1/sync/{request_id}/events", ScopeRead, http.HandlerFunc(a.syncEvents)},
		{"GET /v1/jobs", ScopeRead, http.HandlerFunc(a.getJobs)},
		{"POST /v1/admin/retry", ScopeAdmin, http.HandlerFunc(a.postRetry)},
		{"GET /v1/admin/pause", ScopeAdmin, http.HandlerFunc(a.getPause)},
		{"PUT /v1/admin/pause", ScopeAdmin, http.HandlerFunc(a.putPause)},
		{"DELETE /v1/admin/accounts/{puuid}", ScopeAdmin, http.HandlerFunc(a.deleteAccount)},
		{"GET /v1/players/{puuid}", ScopeRead, http.HandlerFunc(a.getPlayer)},
		{"GET /v1/players/{puuid}/matches", ScopeRead, http.HandlerFunc(a.getPlayerMatches)},
		{"GET /v1/players/{puuid}/ranks", ScopeRead, http.HandlerFunc(a.getPlayerRanks)},
		{"GET /v1/players/{puuid}/reports", ScopeRead, http.HandlerFunc(a.getPlayerReports)},
		{"GET /v1/matches/{match_id}", ScopeRead, http.HandlerFunc(a.getMatch)},
		{"GET /v1/matches/{match_id}/timeline", ScopeRead, http.HandlerFunc(a.getTimeline)},
		{"GET /openapi.json", ScopeRead, http.HandlerFunc(a.getOpenAPI)},
	}
}

func (a *API) now() time.Time {
	if a.inf.Now != nil {
		return a.inf.Now()
	}
	return time.Now()
}

// randHex is n random bytes in hex (request and job ids).
func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func atoiOr(s string, d int) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return d
	}
	return n
}
