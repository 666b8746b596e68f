package riftflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/synclock"
	"github.com/riftflow/riftflow/pkg/telemetry"
	"github.com/riftflow/riftflow/services/resolver"
	"github.com/riftflow/riftflow/streams"
)

// API is riftflow's HTTP API (served by `riftflow up` next to /healthz).
// Every /v1 route needs a bearer token (auth.go, docs/security.md) with
// the scope given in brackets; without one the answer is 401, with too
// weak a scope 403, both RFC 9457 application/problem+json:
//
//	POST /v1/sync                       [sync] body: an IngestRequest; 202 {"request_id","events"}, 400, or
//	                                    409 (problem+json with "request_id", the holder's) when another
//	                                    request syncs the account
//	GET  /v1/accounts/{puuid}           [read] the account's sync status, progress, counts (404 unknown)
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
//	GET  /v1/jobs?type=&puuid=&status=&limit=  [read] the job log (design 002), newest first
//	POST /v1/admin/retry                [admin] body: a RetryRequest; 200 RetryResult: replays permanently
//	                                    unfetchable matches (and dead letters), 100 per run
//	GET  /v1/admin/pause                [admin] the pause switch: {"paused","reason","by","at"}
//	PUT  /v1/admin/pause                [admin] body {"paused":bool,"reason"?,"by"?}: sets it for every service
//	DELETE /v1/admin/accounts/{puuid}   [admin] erase a player (ForgetPlayer): 200 what was removed, 404
//	GET  /v1/players/{puuid}            [read] a player: account, sync state, counts
//	GET  /v1/players/{puuid}/matches?limit=&cursor=  [read] their stored matches, newest first, paged
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
	inf    *app.Infra
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
}

// NewAPI builds the API over a running stack's infrastructure (its Store
// holds the tokens), reading APIEnv (an unreadable value keeps the
// default).
func NewAPI(inf *app.Infra) *API {
	a := &API{inf: inf, StaleAfter: time.Hour, cache: newReadCache(),
		Limits: APILimits{MaxBody: 16 << 10, SSEPerToken: 8, SSETotal: 128, SSEMaxAge: 30 * time.Minute}}
	var e APIEnv
	if err := config.Parse(&e); err == nil {
		if e.StaleAfter > 0 {
			a.StaleAfter = e.StaleAfter
		}
		if e.Limits.MaxBody > 0 && e.Limits.SSEPerToken > 0 && e.Limits.SSETotal > 0 && e.Limits.SSEMaxAge > 0 {
			a.Limits = e.Limits
		}
	}
	a.Limits.Keepalive = 15 * time.Second
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

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// bodyErr answers a request body that could not be read: 413 over
// API_MAX_BODY_BYTES, else 400 (problem+json).
func bodyErr(w http.ResponseWriter, r *http.Request, err error) {
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		writeProblemAt(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", mbe.Limit))
		return
	}
	writeError(w, r, http.StatusBadRequest, err)
}

func (a *API) postSync(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		bodyErr(w, r, err)
		return
	}
	req, err := decodeSync(body)
	if err != nil {
		writeError(w, r, http.StatusBadRequest, err)
		return
	}
	a.submit(w, r, req)
}

// decodeSync parses POST /v1/sync's body: a bus.IngestRequest, normalised
// (bus.DecodeIngestRequest), whose trigger is "http" unless it names one.
// Errors wrap bus.ErrBadRequest.
func decodeSync(body []byte) (bus.IngestRequest, error) {
	req, err := bus.DecodeIngestRequest(body)
	if err != nil {
		return req, err
	}
	if req.Trigger == "nats" {
		req.Trigger = "http"
	}
	return req, nil
}

// submit answers 409 when another request holds the account's lock, else
// publishes req on lol.ingest.request and answers 202.
func (a *API) submit(w http.ResponseWriter, r *http.Request, req bus.IngestRequest) {
	if req.RequestID == "" {
		req.RequestID = "http-" + randHex(8)
	}
	if req.RequestedAt.IsZero() {
		req.RequestedAt = a.now().UTC()
	}
	// Fast 409: the account's lock is held by another request. The lister
	// re-checks atomically; this only saves a round trip.
	if puuid := a.knownPUUID(r.Context(), req); puuid != "" {
		if locks, err := a.inf.Lock(r.Context(), streams.BucketSyncLocks); err == nil {
			if v, err := synclock.Get(r.Context(), locks, puuid); err == nil && v.RequestID != req.RequestID {
				a.rejectBusy(r.Context(), req, puuid, v.RequestID)
				writeProblemDoc(w, r, Problem{Status: http.StatusConflict, RequestID: v.RequestID,
					Detail: fmt.Sprintf("account is already syncing (request %s)", v.RequestID)})
				return
			}
		}
	}
	m := nats.NewMsg(a.inf.Subjects.IngestFor(req.Priority))
	m.Data, _ = json.Marshal(req)
	if _, err := natsx.PublishMsg(r.Context(), a.inf.JS, m, jetstream.WithMsgID("ingest:"+req.RequestID)); err != nil {
		writeError(w, r, http.StatusServiceUnavailable, err)
		return
	}
	a.submitted.add(req.RequestID)
	writeJSON(w, http.StatusAccepted, map[string]string{"request_id": req.RequestID,
		"events": "/v1/sync/" + req.RequestID + "/events"})
}

// rejectBusy announces a fast 409 on lol.ingest.rejected and logs it in the
// job log, like the lister does for the ones it refuses.
func (a *API) rejectBusy(ctx context.Context, req bus.IngestRequest, puuid, holder string) {
	reason := fmt.Errorf("account %s is already syncing (request %s)", puuid, holder)
	raw, _ := json.Marshal(req)
	rej := bus.NewRejection(req.RequestID, a.inf.Subjects.IngestRequest(), http.StatusConflict, reason, raw, a.now())
	if _, err := natsx.Publish(ctx, a.inf.JS, a.inf.Subjects.IngestRejected(), rej); err != nil {
		a.inf.Log.WarnContext(ctx, "publish rejection failed", "err", err)
	}
	if a.inf.Store == nil {
		return
	}
	detail, _ := json.Marshal(map[string]string{"mode": string(req.Mode), "trigger": req.Trigger})
	if _, err := a.inf.Store.RecordJobOnce(ctx, store.Job{ID: req.RequestID, Type: "sync", PUUID: puuid, Status: "rejected",
		Error: reason.Error(), Detail: detail, RequestedAt: req.RequestedAt, FinishedAt: a.now()}); err != nil {
		a.inf.Log.WarnContext(ctx, "job log: rejected request not recorded", "err", err)
	}
}

// linkBody is POST /v1/accounts/{puuid}/link's body.
type linkBody struct {
	Platform string `json:"platform"`
	RiotID   string `json:"riot_id,omitempty"`
}

func (a *API) postLink(w http.ResponseWriter, r *http.Request) {
	req, acct, err := decodeLink(r.PathValue("puuid"), r.Body)
	if err != nil {
		bodyErr(w, r, err)
		return
	}
	if err := a.inf.Store.LinkAccount(r.Context(), acct); err != nil {
		writeError(w, r, http.StatusInternalServerError, err)
		return
	}
	req.RequestID = "link-" + randHex(8)
	a.submit(w, r, req)
}

// decodeLink parses POST /v1/accounts/{puuid}/link: the full sync it
// starts and the account row to store. The PUUID and platform are
// validated through the ingest request (bus.IngestRequest.Normalize).
// Errors: invalid JSON, an unknown field, a bad PUUID, platform or Riot ID,
// or a body over the limit (an *http.MaxBytesError in the chain).
func decodeLink(puuid string, body io.Reader) (bus.IngestRequest, store.Account, error) {
	var b linkBody
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return bus.IngestRequest{}, store.Account{}, fmt.Errorf("invalid JSON: %w", err)
	}
	req := bus.IngestRequest{PUUID: puuid, Platform: b.Platform, Mode: bus.ModeFull, Trigger: "link"}
	if err := req.Normalize(); err != nil {
		return req, store.Account{}, err
	}
	acct := store.Account{PUUID: puuid, Platform: req.Platform}
	if p, err := riot.ParsePlatform(req.Platform); err == nil {
		acct.Region = string(p.Region())
	}
	if b.RiotID != "" {
		id, err := riot.ParseRiotID(b.RiotID)
		if err != nil {
			return req, store.Account{}, err
		}
		acct.GameName, acct.TagLine = id.GameName, id.TagLine
	}
	return req, acct, nil
}

func (a *API) postUnlink(w http.ResponseWriter, r *http.Request) {
	if a.onAccount(w, r, "no such account", a.inf.Store.UnlinkAccount) {
		writeJSON(w, http.StatusOK, map[string]any{"puuid": r.PathValue("puuid"), "active": false})
	}
}

// onAccount runs do on the {puuid} of the path and answers its failure as
// problem+json: 404 with notFound for a PUUID that cannot exist or that
// the store does not know, 500 for any other error. It reports whether do
// succeeded, the caller then answering.
func (a *API) onAccount(w http.ResponseWriter, r *http.Request, notFound string, do func(ctx context.Context, puuid string) error) bool {
	err := errNoAccount
	if puuid := r.PathValue("puuid"); validID(puuid, bus.MaxPUUIDLen) {
		err = do(r.Context(), puuid)
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(w, r, http.StatusNotFound, errors.New(notFound))
	case err != nil:
		writeError(w, r, http.StatusInternalServerError, err)
	}
	return err == nil
}

// errNoAccount is onAccount's error for a PUUID that cannot exist.
var errNoAccount = fmt.Errorf("invalid PUUID: %w", store.ErrNotFound)

// accountStatus is the stored status of the {puuid} of the path, or an
// answer (onAccount) and false.
func (a *API) accountStatus(w http.ResponseWriter, r *http.Request, notFound string) (s store.AccountStatus, ok bool) {
	ok = a.onAccount(w, r, notFound, func(ctx context.Context, puuid string) (err error) {
		s, err = a.inf.Store.AccountStatus(ctx, puuid)
		return err
	})
	return s, ok
}

// postLogin is design 001's stale-login trigger.
func (a *API) postLogin(w http.ResponseWriter, r *http.Request) {
	s, ok := a.accountStatus(w, r, "no such account: link it first")
	if !ok {
		return
	}
	switch {
	case s.SyncStatus == "syncing":
		writeJSON(w, http.StatusOK, map[string]any{"status": "syncing", "request_id": s.SyncRequestID})
		return
	case !s.LastSyncedAt.IsZero() && a.now().Sub(s.LastSyncedAt) < a.StaleAfter:
		writeJSON(w, http.StatusOK, map[string]any{"status": "fresh", "last_synced_at": s.LastSyncedAt})
		return
	}
	req := bus.IngestRequest{RequestID: "login-" + randHex(8), PUUID: s.PUUID, Platform: s.Platform,
		Mode: bus.ModeLatest, Trigger: "login"}
	if err := req.Normalize(); err != nil {
		writeError(w, r, http.StatusConflict, fmt.Errorf("account cannot be synced: %w", err))
		return
	}
	a.submit(w, r, req)
}

func (a *API) getJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	jobs, err := a.inf.Store.Jobs(r.Context(), store.JobFilter{Type: q.Get("type"), PUUID: q.Get("puuid"),
		Status: q.Get("status"), Limit: min(atoiOr(q.Get("limit"), 100), 1000)})
	if err != nil {
		writeError(w, r, http.StatusInternalServerError, err)
		return
	}
	out := make([]jobJSON, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, toJobJSON(j))
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": out})
}

// jobJSON is a jobs row over HTTP and in `status --jobs --json`.
type jobJSON struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	PUUID       string          `json:"puuid,omitempty"`
	Status      string          `json:"status"`
	Retries     int             `json:"retries"`
	RequestedBy string          `json:"requested_by,omitempty"`
	Error       string          `json:"error,omitempty"`
	Detail      json.RawMessage `json:"detail,omitempty"`
	RequestedAt time.Time       `json:"requested_at"`
	StartedAt   *time.Time      `json:"started_at,omitempty"`
	FinishedAt  *time.Time      `json:"finished_at,omitempty"`
}

func toJobJSON(j store.Job) jobJSON {
	out := jobJSON{ID: j.ID, Type: j.Type, PUUID: j.PUUID, Status: j.Status, Retries: j.Retries, Error: j.Error,
		RequestedBy: j.RequestedBy, Detail: j.Detail, RequestedAt: j.RequestedAt}
	if !j.StartedAt.IsZero() {
		out.StartedAt = &j.StartedAt
	}
	if !j.FinishedAt.IsZero() {
		out.FinishedAt = &j.FinishedAt
	}
	return out
}

// knownPUUID returns the request's PUUID, from the request or the riot-ids cache.
func (a *API) knownPUUID(ctx context.Context, req bus.IngestRequest) string {
	if req.PUUID != "" {
		return req.PUUID
	}
	id, err := riot.ParseRiotID(req.RiotID)
	if err != nil {
		return ""
	}
	kv, err := a.inf.KV(ctx, streams.BucketRiotIDs)
	if err != nil {
		return ""
	}
	e, err := kv.Get(ctx, resolver.CacheKey(id))
	if err != nil {
		return ""
	}
	return string(e.Value())
}

func (a *API) getAccount(w http.ResponseWriter, r *http.Request) {
	if s, ok := a.accountStatus(w, r, "no such account"); ok {
		writeJSON(w, http.StatusOK, s)
	}
}

// syncEvents streams one request's progress as Server-Sent Events: "event:
// progress" with a bus.ProgressEvent, or "event: rejected" with a
// bus.Rejection, each as JSON in "data:". It ends after the final event
// (completed, failed, rejected), or after API_SSE_MAX_AGE (the client
// reconnects and gets the replay).
//
// A client may connect at any time after POST /v1/sync. A request already
// finished in the jobs table gets its outcome at once (progress counted
// from sync_matches). Otherwise the events are replayed from the EVENTS
// stream (an ordered consumer; the stream keeps an hour) and then followed
// live, so a fast rejection by the resolver (an unknown Riot ID answers in
// milliseconds) or the first progress events are not missed. A request id
// that is not in the jobs table, was not submitted through this API in the
// last hour and has no event in the replayed stream gets 404 once the
// replay is done, instead of a stream that never ends.
//
// Each open stream holds a JetStream consumer, so they are capped per token
// and in total (429 with Retry-After beyond).
func (a *API) syncEvents(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("request_id")
	if !validID(id, bus.MaxRequestIDLen) {
		writeProblemAt(w, r, http.StatusNotFound, "no such request")
		return
	}
	tok, _ := tokenFrom(ctx)
	release, ok := a.streams.acquire(tok.ID, a.Limits.SSEPerToken, a.Limits.SSETotal)
	if !ok {
		w.Header().Set("Retry-After", "5")
		writeProblemAt(w, r, http.StatusTooManyRequests, fmt.Sprintf("too many open event streams (at most %d per token, %d in all)",
			a.Limits.SSEPerToken, a.Limits.SSETotal))
		return
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, a.Limits.SSEMaxAge)
	defer cancel()
	rc := http.NewResponseController(w)
	// The stream is bounded by SSEMaxAge and the write deadline, not by
	// the server's ReadTimeout: clear the read deadline so the connection's
	// background read can never end it.
	_ = rc.SetReadDeadline(time.Time{})
	var job store.Job
	if a.inf.Store != nil {
		j, err := a.inf.Store.JobByID(ctx, id)
		switch {
		case err == nil:
			job = j
		case !errors.Is(err, store.ErrNotFound):
			writeError(w, r, http.StatusServiceUnavailable, err)
			return
		}
	}
	if final, data, err := a.finishedEvent(ctx, job); err != nil {
		writeError(w, r, http.StatusServiceUnavailable, err)
		return
	} else if final != "" {
		startSSE(w)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", final, data)
		rc.Flush()
		return
	}
	// Known so far: in the jobs table, or submitted here. Otherwise the
	// replay decides.
	known := job.ID != "" || a.submitted.has(id)

	progress := a.inf.Subjects.ProgressAll()
	if job.PUUID != "" {
		progress = a.inf.Subjects.Progress(job.PUUID)
	}
	cons, err := a.inf.JS.OrderedConsumer(ctx, streams.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{progress, a.inf.Subjects.IngestRejected()},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		writeError(w, r, http.StatusServiceUnavailable, err)
		return
	}
	ch := make(chan jetstream.Msg, 256)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case ch <- m:
		case <-ctx.Done():
		}
	})
	if err != nil {
		writeError(w, r, http.StatusServiceUnavailable, err)
		return
	}
	defer cc.Stop()
	// What the replay holds: delivered so far plus still pending (an
	// ordered consumer exists only once consuming).
	info, err := cons.Info(ctx)
	if err != nil {
		writeError(w, r, http.StatusServiceUnavailable, err)
		return
	}
	backlog := info.NumPending + info.Delivered.Consumer
	started := false
	start := func() {
		if !started {
			startSSE(w)
			started = true
		}
	}
	// write extends the write deadline (the server's WriteTimeout would
	// cut a long stream) and flushes.
	write := func(format string, args ...any) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(2 * a.Limits.Keepalive))
		start()
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if known {
		if !write(": following %s\n\n", id) {
			return
		}
	}
	if backlog == 0 && !known {
		writeProblemAt(w, r, http.StatusNotFound, "no such request")
		return
	}
	keepalive := time.NewTicker(a.Limits.Keepalive)
	defer keepalive.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-keepalive.C:
			if started && !write(": keepalive\n\n") {
				return
			}
		case m := <-ch:
			var probe struct {
				RequestID string `json:"request_id"`
				Status    string `json:"status"`
			}
			if json.Unmarshal(m.Data(), &probe) != nil || probe.RequestID != id {
				// The end of the replay without an event for an id
				// nobody submitted: it does not exist.
				if md, err := m.Metadata(); err == nil && md.NumPending == 0 && !started {
					writeProblemAt(w, r, http.StatusNotFound, "no such request")
					return
				}
				continue
			}
			event := "progress"
			if m.Subject() == a.inf.Subjects.IngestRejected() {
				event = "rejected"
			}
			if !write("event: %s\ndata: %s\n\n", event, m.Data()) {
				return
			}
			if event == "rejected" || probe.Status == "completed" || probe.Status == "failed" {
				return
			}
		}
	}
}

// validID reports whether a path parameter can name a request (request
// id) or an account (PUUID): 1 to max bytes of letters, digits, '-' and '_'
// (what bus.IngestRequest.Normalize accepts). Anything else cannot exist:
// 404 without a lookup.
func validID(id string, max int) bool {
	if id == "" || len(id) > max {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// startSSE writes the headers of a Server-Sent Events response.
func startSSE(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
}

// finishedEvent is the SSE event for a job that has already finished
// (completed, failed or rejected in the jobs table): its name and JSON, or
// "" when the job is unknown or still running.
func (a *API) finishedEvent(ctx context.Context, j store.Job) (string, []byte, error) {
	switch j.Status {
	case "completed", "failed":
		done, total, err := a.inf.Store.RequestProgress(ctx, j.ID)
		if err != nil {
			return "", nil, err
		}
		b, err := json.Marshal(bus.ProgressEvent{RequestID: j.ID, PUUID: j.PUUID, Status: j.Status,
			Progress: done, Total: total, Error: j.Error, At: j.FinishedAt})
		return "progress", b, err
	case "rejected":
		b, err := json.Marshal(bus.Rejection{RequestID: j.ID, Reason: j.Error, Code: http.StatusConflict, At: j.FinishedAt})
		return "rejected", b, err
	}
	return "", nil, nil
}

func listen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

func atoiOr(s string, d int) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return d
	}
	return n
}
