package riftflow

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/riftflow/riftflow/pkg/bus"
)

// route is one entry of the API's route table: a net/http ServeMux
// pattern ("METHOD /path/{wildcard}") and its handler. Middleware (auth,
// logging) wraps routes here, in one place.
type route struct {
	pattern string
	handler http.Handler
}

// seedRoutes are the routes of designs 000-002: admin calls and the read API.
func (a *API) seedRoutes() []route {
	return []route{
		{"POST /v1/admin/retry", http.HandlerFunc(a.postRetry)},
	}
}

// Problem is an RFC 9457 problem details object
// (https://www.rfc-editor.org/rfc/rfc9457), served as application/problem+json.
type Problem struct {
	Type     string `json:"type"`   // "about:blank": the status code says it all
	Title    string `json:"title"`  // the status text
	Status   int    `json:"status"` // the HTTP status code
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"` // the request path
}

// writeProblem answers code with a problem+json body whose detail is err.
func writeProblem(w http.ResponseWriter, r *http.Request, code int, err error) {
	p := Problem{Type: "about:blank", Title: http.StatusText(code), Status: code, Instance: r.URL.Path}
	if err != nil {
		p.Detail = err.Error()
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(code)
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
		writeProblem(w, r, http.StatusBadRequest, err)
		return
	}
	res, err := RetryMatches(r.Context(), a.inf.Store, a.inf.JS, a.inf.Subjects, req, a.now())
	switch {
	case errors.Is(err, bus.ErrBadRequest):
		writeProblem(w, r, http.StatusBadRequest, err)
	case err != nil:
		writeProblem(w, r, http.StatusServiceUnavailable, err)
	default:
		writeJSON(w, http.StatusOK, res)
	}
}
