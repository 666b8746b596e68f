package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/redact"
)

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
