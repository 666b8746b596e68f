package riftflow

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/control"
	"github.com/riftflow/riftflow/pkg/redact"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/streams"
)

// route is one entry of the API's route table: a net/http ServeMux
// pattern ("METHOD /path/{wildcard}") and its handler. Middleware (auth,
// logging) wraps routes here, in one place.
type route struct {
	pattern string
	scope   Scope // the token scope it needs (auth.go)
	handler http.Handler
}

// seedRoutes are the routes of designs 000-002: admin calls and the read API.
func (a *API) seedRoutes() []route {
	return []route{
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

// guard answers 503 problem+json instead of rt while the pause switch is on
// (routes that change something; GETs and the switch itself pass) or while
// Postgres does not answer (every route but the switch).
func (a *API) guard(rt route) http.Handler {
	isSwitch := strings.HasSuffix(rt.pattern, "/v1/admin/pause")
	isGet := strings.HasPrefix(rt.pattern, "GET ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isSwitch && !isGet && a.inf.Pause.Paused() {
			st := a.inf.Pause.State()
			w.Header().Set("Retry-After", "60")
			writeError(w, r, http.StatusServiceUnavailable,
				fmt.Errorf("syncing is paused (%s); PUT /v1/admin/pause {\"paused\":false} resumes it", orNone(st.Reason)))
			return
		}
		if !isSwitch {
			if err := a.dbUp(r); err != nil {
				w.Header().Set("Retry-After", "5")
				writeError(w, r, http.StatusServiceUnavailable, fmt.Errorf("the database does not answer: %w", err))
				return
			}
		}
		rt.handler.ServeHTTP(w, r)
	})
}

func orNone(s string) string {
	if s == "" {
		return "no reason given"
	}
	return s
}

// dbHealth caches the last Postgres ping for dbCheckEvery, so a busy API
// does not ping per request.
type dbHealth struct {
	mu  sync.Mutex
	at  time.Time
	err error
}

const dbCheckEvery = time.Second

func (a *API) dbUp(r *http.Request) error {
	if a.inf.Store == nil {
		return nil
	}
	a.db.mu.Lock()
	defer a.db.mu.Unlock()
	if time.Since(a.db.at) < dbCheckEvery {
		return a.db.err
	}
	a.db.err, a.db.at = a.inf.Store.Ping(r.Context()), time.Now()
	return a.db.err
}

// getPause is GET /v1/admin/pause.
func (a *API) getPause(w http.ResponseWriter, r *http.Request) {
	kv, err := a.inf.KV(r.Context(), streams.BucketControl)
	if err != nil {
		writeError(w, r, http.StatusServiceUnavailable, err)
		return
	}
	st, err := control.Get(r.Context(), kv)
	if err != nil {
		writeError(w, r, http.StatusServiceUnavailable, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// putPause is PUT /v1/admin/pause: body {"paused":bool,"reason","by"}.
func (a *API) putPause(w http.ResponseWriter, r *http.Request) {
	st, err := decodePause(r)
	if err != nil {
		bodyErr(w, r, err)
		return
	}
	kv, err := a.inf.KV(r.Context(), streams.BucketControl)
	if err == nil {
		st.At = a.now().UTC()
		err = control.Set(r.Context(), kv, st)
	}
	if err != nil {
		writeError(w, r, http.StatusServiceUnavailable, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// decodePause decodes PUT /v1/admin/pause's body, a control.State of at
// most 200 bytes of reason and bus.MaxFreeTextLength of by (decodeBody's
// rules: no unknown fields, no trailing data).
func decodePause(r *http.Request) (control.State, error) {
	var st control.State
	if err := decodeBody(r, &st); err != nil {
		return st, err
	}
	if len(st.Reason) > 200 || len(st.By) > bus.MaxFreeTextLength {
		return st, errors.New("reason longer than 200 bytes or by longer than 64")
	}
	return st, nil
}

// Problem is an RFC 9457 problem details object
// (https://www.rfc-editor.org/rfc/rfc9457), served as application/problem+json
// for every error the API answers.
type Problem struct {
	Type     string `json:"type"`   // "about:blank": the status code says it all
	Title    string `json:"title"`  // the status text
	Status   int    `json:"status"` // the HTTP status code
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"` // the request path
	// RequestID is an extension member of the 409 of a sync: the request
	// that holds the account.
	RequestID string `json:"request_id,omitempty"`
}

// writeError answers code with a problem+json body whose detail is err
// (redacted: a Postgres or NATS error may quote a URL) and whose instance
// is the request path.
func writeError(w http.ResponseWriter, r *http.Request, code int, err error) {
	p := Problem{Status: code}
	if err != nil {
		p.Detail = redact.String(err.Error())
	}
	writeProblemDoc(w, r, p)
}

// writeProblemAt answers code with a problem+json body with detail.
func writeProblemAt(w http.ResponseWriter, r *http.Request, code int, detail string) {
	writeProblemDoc(w, r, Problem{Status: code, Detail: detail})
}

// writeProblemDoc writes p, filling type (about:blank), title (the status
// text) and instance (r's path; r may be nil), as application/problem+json.
func writeProblemDoc(w http.ResponseWriter, r *http.Request, p Problem) {
	if p.Type == "" {
		p.Type = "about:blank"
	}
	p.Title = http.StatusText(p.Status)
	if p.Instance == "" && r != nil {
		p.Instance = r.URL.Path
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	json.NewEncoder(w).Encode(p)
}

// decodeBody decodes a JSON request body of at most bus.MaxRequestBytes
// into v, refusing unknown fields and trailing data.
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, bus.MaxRequestBytes*16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// postRetry is POST /v1/admin/retry (RetryMatches).
func (a *API) postRetry(w http.ResponseWriter, r *http.Request) {
	var req RetryRequest
	if err := decodeBody(r, &req); err != nil {
		bodyErr(w, r, err)
		return
	}
	if req.Dead && !mayReplayDead(a.inf.Env.NATS.User) {
		writeError(w, r, http.StatusForbidden, errReplayNeedsAdmin)
		return
	}
	res, err := RetryMatches(r.Context(), a.inf.Store, a.inf.JS, a.inf.Subjects, req, a.now())
	switch {
	case errors.Is(err, bus.ErrBadRequest):
		writeError(w, r, http.StatusBadRequest, err)
	case err != nil:
		writeError(w, r, http.StatusServiceUnavailable, err)
	default:
		writeJSON(w, http.StatusOK, res)
	}
}

// errReplayNeedsAdmin is the 403 detail of a dead-letter replay asked of
// an API whose NATS user is not the admin.
var errReplayNeedsAdmin = errors.New("replaying dead letters republishes other services' messages (fetch results " +
	"among them), which only the NATS user admin may: run `riftflow retry --dead` with NATS_USER=admin " +
	"(docs/runbook.md); the API's NATS user may replay only the ledger (match_ids, puuid or all without dead)")

// mayReplayDead reports whether a connection as NATS user may replay dead
// letters (natsx.Replay: read and delete DEAD, publish on any subject):
// the admin, or a server without users. streams.Grants gives it to no
// other user, so the server would refuse the replay half-way.
func mayReplayDead(user string) bool { return user == "" || user == streams.UserAdmin }

// cmdPause is `riftflow pause [--off] [--reason TEXT]`: it sets the pause
// switch in the control bucket (NATS_URL) for every service.
func cmdPause(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("pause", flag.ContinueOnError)
	fs.SetOutput(stderr)
	off := fs.Bool("off", false, "resume syncing")
	reason := fs.String("reason", "", "why (shown in 503 answers and logs)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	_, _, nc, js, err := connectCLI(ctx, "riftflow-pause", stderr)
	if err != nil {
		return err
	}
	defer nc.Close()
	kv, err := js.KeyValue(ctx, streams.BucketControl)
	if err != nil {
		return fmt.Errorf("open the control bucket (run `riftflow streams apply`): %w", err)
	}
	st := control.State{Paused: !*off, Reason: *reason, By: "cli"}
	if err := control.Set(ctx, kv, st); err != nil {
		return err
	}
	if st.Paused {
		fmt.Fprintln(stdout, "syncing paused; `riftflow pause --off` resumes it")
	} else {
		fmt.Fprintln(stdout, "syncing resumed")
	}
	return nil
}

// deleteAccount is DELETE /v1/admin/accounts/{puuid}: ForgetPlayer; 200
// ForgetResult, 404 problem when nothing is stored for the player.
func (a *API) deleteAccount(w http.ResponseWriter, r *http.Request) {
	if !validID(r.PathValue("puuid"), bus.MaxPUUIDLen) {
		writeError(w, r, http.StatusNotFound, errors.New("no such player"))
		return
	}
	res, err := ForgetPlayer(r.Context(), a.inf.Store, a.inf.JS, r.PathValue("puuid"), a.inf.Logger("api"), a.now())
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(w, r, http.StatusNotFound, err)
	case err != nil:
		writeError(w, r, http.StatusServiceUnavailable, err)
	default:
		writeJSON(w, http.StatusOK, res)
	}
}
