package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/control"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/streams"
)

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
	writeOutcome(w, r, res, err, bus.ErrBadRequest, http.StatusBadRequest)
}

// writeOutcome answers an admin call: 200 with res, or err as problem+json,
// with code when it is a known error, else 503.
func writeOutcome(w http.ResponseWriter, r *http.Request, res any, err, known error, code int) {
	switch {
	case errors.Is(err, known):
		writeError(w, r, code, err)
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

// deleteAccount is DELETE /v1/admin/accounts/{puuid}: ForgetPlayer; 200
// ForgetResult, 404 problem when nothing is stored for the player.
func (a *API) deleteAccount(w http.ResponseWriter, r *http.Request) {
	if !validID(r.PathValue("puuid"), bus.MaxPUUIDLen) {
		writeError(w, r, http.StatusNotFound, errors.New("no such player"))
		return
	}
	res, err := ForgetPlayer(r.Context(), a.inf.Store, a.inf.JS, r.PathValue("puuid"), a.inf.Logger("api"), a.now())
	writeOutcome(w, r, res, err, store.ErrNotFound, http.StatusNotFound)
}
