package riftflow

// The client side of the HTTP API in the pipeline's tests: package
// apitest, with tokens in a stack's store.

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/riftflow/riftflow/services/riftflow/api"
	"github.com/riftflow/riftflow/services/riftflow/api/apitest"
	"github.com/riftflow/riftflow/services/riftflow/stack"
)

var (
	call          = apitest.Call
	jsonCall      = apitest.JSONCall
	sseEvents     = apitest.SSEEvents
	getFrom       = apitest.Get
	freeAddr      = apitest.FreeAddr
	serveLoopback = apitest.ServeLoopback
)

// newAPI is the API over inf, as `riftflow up` and `riftflow serve` build it.
func newAPI(inf *stack.Infra) *api.API { return api.New(inf.Process, inf.Store) }

// newToken creates an API token named name with scopes in inf's store and
// returns its secret and its row, or fails the test.
func newToken(t testing.TB, inf *stack.Infra, name string, scopes ...api.Scope) (string, api.APIToken) {
	t.Helper()
	return apitest.NewToken(t, api.NewTokens(inf.Store), name, scopes...)
}

// withToken serves h with a fresh token of scope (apitest.WithToken).
func withToken(t testing.TB, inf *stack.Infra, h http.Handler, scope api.Scope) http.Handler {
	t.Helper()
	token, _ := newToken(t, inf, "test "+t.Name(), scope)
	return apitest.WithToken(h, token)
}

// apiServer serves the HTTP API on inf until the test ends, every request
// with a token of scope (withToken).
func apiServer(t *testing.T, inf *stack.Infra, scope api.Scope) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(withToken(t, inf, newAPI(inf).Handler(), scope))
	t.Cleanup(srv.Close)
	return srv
}
