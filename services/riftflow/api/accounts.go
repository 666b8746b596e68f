package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/syncjob"
	"github.com/riftflow/riftflow/pkg/synclock"
	"github.com/riftflow/riftflow/services/resolver"
	"github.com/riftflow/riftflow/streams"
)

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
	if t, ok := tokenFrom(r.Context()); ok && req.RequestID != "" {
		req.RequestID = scopedRequestID(t.ID, req.RequestID)
	}
	a.submit(w, r, req)
}

// scopedRequestID is the request ID of a POST /v1/sync whose body chose
// key as its request_id: "http-" and 16 hex digits of a hash of the
// token's ID and key. A client's key is an idempotency key within its own
// token (the same key gives the same request, and the stream's duplicate
// window keeps one), and no token can choose another's request ID: taking
// the ID of a 409's holder, or a key another client used, never joins
// that request's sync lock or publish.
func scopedRequestID(tokenID, key string) string {
	sum := sha256.Sum256([]byte(tokenID + "\x00" + key))
	return "http-" + hex.EncodeToString(sum[:8])
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
	puuid := a.knownPUUID(r.Context(), req)
	if puuid != "" {
		if locks, err := a.inf.Lock(r.Context(), streams.BucketSyncLocks); err == nil {
			if v, err := synclock.Get(r.Context(), locks, puuid); err == nil && v.RequestID != req.RequestID {
				a.rejectBusy(r.Context(), req, puuid, v.RequestID)
				writeProblemDoc(w, r, Problem{Status: http.StatusConflict, RequestID: v.RequestID,
					Detail: fmt.Sprintf("account is already syncing (request %s)", v.RequestID)})
				return
			}
		}
	}
	// Accepted: pending in the job log from now on, also while the pause
	// switch or a backlog holds it.
	if a.inf.Store != nil {
		if _, err := a.inf.Store.QueueSync(r.Context(), syncjob.Queued(req, puuid)); err != nil {
			writeError(w, r, http.StatusServiceUnavailable, err)
			return
		}
	}
	m := nats.NewMsg(a.inf.Subjects.IngestFor(req.Priority))
	m.Data, _ = json.Marshal(req)
	if _, err := natsx.PublishMsg(r.Context(), a.inf.JS, m, jetstream.WithMsgID(bus.IngestMsgID(req.RequestID))); err != nil {
		if a.inf.Store != nil {
			_ = a.inf.Store.FinishJob(r.Context(), req.RequestID, syncjob.Failed, "not queued: "+err.Error())
		}
		writeError(w, r, http.StatusServiceUnavailable, err)
		return
	}
	a.submitted.add(req.RequestID)
	writeJSON(w, http.StatusAccepted, map[string]string{"request_id": req.RequestID,
		"events": "/v1/sync/" + req.RequestID + "/events"})
}

// rejectBusy logs a fast 409 in the job log, as the lister does for the
// ones it refuses, then announces it on lol.ingest.rejected (in that
// order: the retry-sweeper records a refusal whose request has no job yet
// with its code only, store.RejectQueued).
func (a *API) rejectBusy(ctx context.Context, req bus.IngestRequest, puuid, holder string) {
	raw, _ := json.Marshal(req)
	r := syncjob.Refusal{RequestID: req.RequestID, PUUID: puuid, RequestedAt: req.RequestedAt, Mode: string(req.Mode),
		Trigger: req.Trigger, Code: http.StatusConflict, Reason: fmt.Errorf("account %s is already syncing (request %s)", puuid, holder),
		At: a.now(), Subject: a.inf.Subjects.IngestRequest(), Raw: raw}
	if a.inf.Store != nil {
		syncjob.Record(ctx, a.inf.Store, r, a.inf.Log)
	}
	if err := syncjob.Announce(ctx, a.inf.JS, a.inf.Subjects, r); err != nil {
		a.inf.Log.WarnContext(ctx, "publish rejection failed", "err", err)
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
	case s.SyncStatus == syncjob.Syncing || s.SyncStatus == syncjob.Pending && len(s.Queued) > 0:
		writeJSON(w, http.StatusOK, map[string]any{"status": s.SyncStatus, "request_id": s.SyncRequestID})
		return
	case !s.LastSyncedAt.IsZero() && s.SyncedAge < a.StaleAfter:
		// The age on the database's clock, which stamped the sync's end:
		// the API's clock may be set apart from it.
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
	out := make([]Job, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, JobOf(j))
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": out})
}

// Job is a jobs row over HTTP and in `status --jobs --json`.
type Job struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	PUUID       string          `json:"puuid,omitempty"`
	Status      string          `json:"status"`
	Position    int             `json:"position,omitempty"` // pending syncs: place in the queue, 1 = next
	Retries     int             `json:"retries"`
	RequestedBy string          `json:"requested_by,omitempty"`
	Error       string          `json:"error,omitempty"`
	Detail      json.RawMessage `json:"detail,omitempty"`
	RequestedAt time.Time       `json:"requested_at"`
	StartedAt   *time.Time      `json:"started_at,omitempty"`
	FinishedAt  *time.Time      `json:"finished_at,omitempty"`
}

func JobOf(j store.Job) Job {
	out := Job{ID: j.ID, Type: j.Type, PUUID: j.PUUID, Status: string(j.Status), Position: j.Position, Retries: j.Retries, Error: j.Error,
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
