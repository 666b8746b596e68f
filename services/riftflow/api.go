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
	"text/tabwriter"
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

// API is riftflow's HTTP API (served by `riftflow up` next to /healthz):
//
//	POST /v1/sync                       body: an IngestRequest; 202 {"request_id","events"}, 400, or
//	                                    409 {"error","request_id"} when another request syncs the account
//	GET  /v1/accounts/{puuid}           the account's sync status, progress, counts (404 unknown)
//	POST /v1/accounts/{puuid}/link      body {"platform", "riot_id"?}: the account becomes active
//	                                    and a full sync starts now: 202 as POST /v1/sync, or 409
//	POST /v1/accounts/{puuid}/unlink    active = false (scheduled jobs skip it): 200, 404
//	POST /v1/accounts/{puuid}/login     a login: a latest sync (202) when the last sync is older
//	                                    than LOGIN_SYNC_STALE_AFTER (default 1h) or never was, else
//	                                    200 {"status":"fresh"|"syncing"}; 404 unknown account
//	GET  /v1/sync/{request_id}/events   progress as Server-Sent Events until completed/failed/rejected;
//	                                    replayed for a late client, at once when already finished
//	GET  /v1/jobs?type=&puuid=&status=&limit=  the job log (design 002), newest first
//	POST /v1/admin/retry                body: a RetryRequest; 200 RetryResult: replays permanently
//	                                    unfetchable matches (and dead letters), 100 per run
//	GET  /v1/admin/pause                the pause switch: {"paused","reason","by","at"}
//	PUT  /v1/admin/pause                body {"paused":bool,"reason"?,"by"?}: sets it for every service
//	DELETE /v1/admin/accounts/{puuid}   erase a player (ForgetPlayer): 200 what was removed, 404
//	GET  /v1/players/{puuid}            a player: account, sync state, counts
//	GET  /v1/players/{puuid}/matches?limit=&cursor=  their stored matches, newest first, paged
//	GET  /v1/matches/{match_id}         the stored MatchDto as Riot sent it (ETag, 1-day cache)
//	GET  /v1/matches/{match_id}/timeline  the stored TimelineDto
//	GET  /openapi.json                  the OpenAPI document of these routes
//
// While the pause switch is on, every route but GET ones and the switch
// itself answers 503; while Postgres does not answer, every route but the
// switch does (both as problem+json).
//
// The routes added for designs 000-002 (admin.go) answer errors as RFC 9457
// problem details (application/problem+json).
//
// A 409 is also announced on lol.ingest.rejected and logged in the jobs
// table (status rejected).
type API struct {
	inf *app.Infra
	// StaleAfter is the login trigger's age (LOGIN_SYNC_STALE_AFTER).
	StaleAfter time.Duration
	db         dbHealth
	cache      *readCache
}

// APIEnv is the API's configuration.
type APIEnv struct {
	StaleAfter time.Duration `env:"LOGIN_SYNC_STALE_AFTER" envDefault:"1h"`
}

// NewAPI builds the API over a running stack's infrastructure, reading
// APIEnv (an unreadable value keeps the default).
func NewAPI(inf *app.Infra) *API {
	a := &API{inf: inf, StaleAfter: time.Hour, cache: newReadCache()}
	var e APIEnv
	if err := config.Parse(&e); err == nil && e.StaleAfter > 0 {
		a.StaleAfter = e.StaleAfter
	}
	return a
}

// Mount registers the API's routes on the ops server.
func (a *API) Mount(ops *telemetry.Ops) { a.routes(ops.Handle) }

// Handler serves the API's routes alone (tests, embedding).
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	a.routes(mux.Handle)
	return mux
}

func (a *API) routes(handle func(string, http.Handler)) {
	for _, rt := range a.routeTable() {
		handle(rt.pattern, a.guard(rt))
	}
}

// routeTable is every route of the API, in one place: middleware (the
// pause and database guard, auth) wraps its entries.
func (a *API) routeTable() []route {
	return append([]route{
		{"POST /v1/sync", http.HandlerFunc(a.postSync)},
		{"GET /v1/accounts/{puuid}", http.HandlerFunc(a.getAccount)},
		{"POST /v1/accounts/{puuid}/link", http.HandlerFunc(a.postLink)},
		{"POST /v1/accounts/{puuid}/unlink", http.HandlerFunc(a.postUnlink)},
		{"POST /v1/accounts/{puuid}/login", http.HandlerFunc(a.postLogin)},
		{"GET /v1/sync/{request_id}/events", http.HandlerFunc(a.syncEvents)},
		{"GET /v1/jobs", http.HandlerFunc(a.getJobs)},
	}, a.seedRoutes()...)
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

func writeErr(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

func (a *API) postSync(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, bus.MaxRequestBytes+1))
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	req, err := bus.DecodeIngestRequest(body)
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	if req.Trigger == "nats" {
		req.Trigger = "http"
	}
	a.submit(w, r, req)
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
				writeJSON(w, http.StatusConflict, map[string]string{
					"error": fmt.Sprintf("account is already syncing (request %s)", v.RequestID), "request_id": v.RequestID})
				return
			}
		}
	}
	m := nats.NewMsg(a.inf.Subjects.IngestRequest())
	m.Data, _ = json.Marshal(req)
	if _, err := natsx.PublishMsg(r.Context(), a.inf.JS, m, jetstream.WithMsgID("ingest:"+req.RequestID)); err != nil {
		writeErr(w, http.StatusServiceUnavailable, err)
		return
	}
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
	puuid := r.PathValue("puuid")
	var b linkBody
	dec := json.NewDecoder(io.LimitReader(r.Body, bus.MaxRequestBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("invalid JSON: %w", err))
		return
	}
	// Validate through the ingest request the link turns into.
	req := bus.IngestRequest{PUUID: puuid, Platform: b.Platform, Mode: bus.ModeFull, Trigger: "link"}
	if err := req.Normalize(); err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	acct := store.Account{PUUID: puuid, Platform: req.Platform}
	if p, err := riot.ParsePlatform(req.Platform); err == nil {
		acct.Region = string(p.Region())
	}
	if b.RiotID != "" {
		id, err := riot.ParseRiotID(b.RiotID)
		if err != nil {
			writeErr(w, http.StatusBadRequest, err)
			return
		}
		acct.GameName, acct.TagLine = id.GameName, id.TagLine
	}
	if err := a.inf.Store.LinkAccount(r.Context(), acct); err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	req.RequestID = "link-" + randHex(8)
	a.submit(w, r, req)
}

func (a *API) postUnlink(w http.ResponseWriter, r *http.Request) {
	err := a.inf.Store.UnlinkAccount(r.Context(), r.PathValue("puuid"))
	if errors.Is(err, store.ErrNotFound) {
		writeErr(w, http.StatusNotFound, errors.New("no such account"))
		return
	}
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"puuid": r.PathValue("puuid"), "active": false})
}

// postLogin is design 001's stale-login trigger.
func (a *API) postLogin(w http.ResponseWriter, r *http.Request) {
	s, err := a.inf.Store.AccountStatus(r.Context(), r.PathValue("puuid"))
	if errors.Is(err, store.ErrNotFound) {
		writeErr(w, http.StatusNotFound, errors.New("no such account: link it first"))
		return
	}
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
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
		writeErr(w, http.StatusConflict, fmt.Errorf("account cannot be synced: %w", err))
		return
	}
	a.submit(w, r, req)
}

func (a *API) getJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	jobs, err := a.inf.Store.Jobs(r.Context(), store.JobFilter{Type: q.Get("type"), PUUID: q.Get("puuid"),
		Status: q.Get("status"), Limit: min(atoiOr(q.Get("limit"), 100), 1000)})
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
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
	s, err := a.inf.Store.AccountStatus(r.Context(), r.PathValue("puuid"))
	if errors.Is(err, store.ErrNotFound) {
		writeErr(w, http.StatusNotFound, errors.New("no such account"))
		return
	}
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

// syncEvents streams one request's progress as Server-Sent Events: "event:
// progress" with a bus.ProgressEvent, or "event: rejected" with a
// bus.Rejection, each as JSON in "data:". It ends after the final event
// (completed, failed, rejected).
//
// A client may connect at any time after POST /v1/sync. A request already
// finished in the jobs table gets its outcome at once (progress counted
// from sync_matches). Otherwise the events are replayed from the EVENTS
// stream (an ordered consumer; the stream keeps an hour) and then followed
// live, so a fast rejection by the resolver (an unknown Riot ID answers in
// milliseconds) or the first progress events are not missed.
func (a *API) syncEvents(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("request_id")
	fl, ok := w.(http.Flusher)
	if !ok {
		writeErr(w, http.StatusInternalServerError, errors.New("streaming unsupported"))
		return
	}
	var job store.Job
	if a.inf.Store != nil {
		j, err := a.inf.Store.JobByID(ctx, id)
		switch {
		case err == nil:
			job = j
		case !errors.Is(err, store.ErrNotFound):
			writeErr(w, http.StatusServiceUnavailable, err)
			return
		}
	}
	if final, data, err := a.finishedEvent(ctx, job); err != nil {
		writeErr(w, http.StatusServiceUnavailable, err)
		return
	} else if final != "" {
		startSSE(w)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", final, data)
		fl.Flush()
		return
	}

	progress := a.inf.Subjects.ProgressAll()
	if job.PUUID != "" {
		progress = a.inf.Subjects.Progress(job.PUUID)
	}
	cons, err := a.inf.JS.OrderedConsumer(ctx, streams.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{progress, a.inf.Subjects.IngestRejected()},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		writeErr(w, http.StatusServiceUnavailable, err)
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
		writeErr(w, http.StatusServiceUnavailable, err)
		return
	}
	defer cc.Stop()
	startSSE(w)
	fl.Flush()
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-keepalive.C:
			fmt.Fprint(w, ": keepalive\n\n")
			fl.Flush()
		case m := <-ch:
			var probe struct {
				RequestID string `json:"request_id"`
				Status    string `json:"status"`
			}
			if json.Unmarshal(m.Data(), &probe) != nil || probe.RequestID != id {
				continue
			}
			event := "progress"
			if m.Subject() == a.inf.Subjects.IngestRejected() {
				event = "rejected"
			}
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, m.Data())
			fl.Flush()
			if event == "rejected" || probe.Status == "completed" || probe.Status == "failed" {
				return
			}
		}
	}
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

// printJobs is `riftflow status --jobs`: the job log as a table or JSON.
func printJobs(ctx context.Context, st *store.Store, out io.Writer, f store.JobFilter, asJSON bool) error {
	jobs, err := st.Jobs(ctx, f)
	if err != nil {
		return err
	}
	if asJSON {
		rows := make([]jobJSON, 0, len(jobs))
		for _, j := range jobs {
			rows = append(rows, toJobJSON(j))
		}
		return json.NewEncoder(out).Encode(rows)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTYPE\tSTATUS\tRETRIES\tREQUESTED\tSTARTED\tFINISHED\tPUUID\tERROR")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", j.ID, j.Type, j.Status, j.Retries, fmtTime(j.RequestedAt),
			fmtTime(j.StartedAt), fmtTime(j.FinishedAt), j.PUUID, j.Error)
	}
	return tw.Flush()
}
