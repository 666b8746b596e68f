package api

import (
	"net/http/httptest"
	"testing"

	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/services/riftflow/api/apitest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// newEnv is the API's world in a test: an in-process JetStream server with
// every stream and bucket streams/ declares, the pause switch watched, and
// a fresh migrated database (stagetest.New); nothing consumes the streams.
func newEnv(t *testing.T) *stagetest.Env { return stagetest.New(t, stagetest.Options{DB: true}) }

// newAPI is the API over e.
func newAPI(e *stagetest.Env) *API { return New(e.Process, e.Store) }

// newToken creates a token named name with scopes in e's store and returns
// its secret and its row, or fails the test.
func newToken(t testing.TB, e *stagetest.Env, name string, scopes ...Scope) (string, APIToken) {
	t.Helper()
	return apitest.NewToken(t, NewTokens(e.Store), name, scopes...)
}

// serveWithToken serves a until the test ends, every request with a fresh
// token of scope from e's store.
func serveWithToken(t *testing.T, e *stagetest.Env, a *API, scope Scope) *httptest.Server {
	t.Helper()
	token, _ := newToken(t, e, "test "+t.Name(), scope)
	srv := httptest.NewServer(apitest.WithToken(a.Handler(), token))
	t.Cleanup(srv.Close)
	return srv
}
