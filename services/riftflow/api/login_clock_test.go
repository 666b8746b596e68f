package api

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/services/riftflow/api/apitest"
)

// syncedAccounts are two accounts whose last syncs the database stamped:
// puuid-fresh's a minute ago, puuid-stale's 2 h ago.
const syncedAccounts = `INSERT INTO accounts (puuid, platform, region, sync_status, last_synced_at) VALUES
('puuid-fresh', 'NA1', 'americas', 'completed', now() - interval '1 minute'),
('puuid-stale', 'NA1', 'americas', 'completed', now() - interval '2 hours')`

// The login trigger judges an account's freshness by the age of its last
// sync on the database's clock, which stamped it, wherever the API's clock
// is set: an API 2 h ahead of the database finds an account synced a
// minute ago fresh (its own time less the stamp made it 2 h stale and
// synced it again), and one 3 h behind finds an account synced 2 h ago
// stale (the stamp was still to come on its clock, so it stayed fresh
// for ever).
func TestLoginFreshnessOnTheDatabaseClock(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	if _, err := e.DB.Exec(ctx, syncedAccounts); err != nil {
		t.Fatal(err)
	}
	var skew time.Duration
	e.Process.Now = func() time.Time { return time.Now().Add(skew) }
	a := newAPI(e) // StaleAfter 1 h
	srv := serveWithToken(t, e, a, ScopeSync)
	for _, tc := range []struct {
		puuid      string
		skew       time.Duration
		wantStatus int
	}{
		{"puuid-fresh", 2 * time.Hour, http.StatusOK},
		{"puuid-stale", -3 * time.Hour, http.StatusAccepted},
	} {
		skew = tc.skew
		c := apitest.Call(t, http.MethodPost, srv.URL+"/v1/accounts/"+tc.puuid+"/login", "", "")
		if c.Code != tc.wantStatus || (tc.wantStatus == http.StatusOK && !strings.Contains(string(c.Body), `"status":"fresh"`)) {
			t.Errorf("login of %s with the API's clock %v off the database's: %d %s, want %d", tc.puuid, tc.skew, c.Code, c.Body, tc.wantStatus)
		}
	}
}
