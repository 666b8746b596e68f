package riftflow

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// jsonCall sends body (JSON) to base+path and decodes the answer into out;
// it returns the status code and the Content-Type.
func jsonCall(t *testing.T, base, method, path, body string, out any) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	json.NewDecoder(resp.Body).Decode(out)
	return resp.StatusCode, resp.Header.Get("Content-Type")
}

// TestDesign000Promises reproduces design 000's retry job end to end:
// permanently unfetchable matches are replayed (all, by match ID, by
// player) through POST /v1/admin/retry, at most 100 per run; a replayed
// match is fetched and stored; each run is logged as a retry job; a request
// that selects nothing is a 400 problem+json.
func TestDesign000Promises(t *testing.T) {
	h, p := synthHarness(t, 1, 120, 1)
	// 120 matches an outage left permanently unfetchable.
	if _, err := h.st.Infra.Store.Pool().Exec(h.ctx, `INSERT INTO match_fetches (match_id, kind, status, attempt, retry_count, last_attempt_at)
SELECT id, 'match', 'permanently_unfetchable', 5, 5, now() FROM unnest($1::text[]) id`, idsOf(p.Matches)); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(withToken(t, h.st.Infra, NewAPI(h.st.Infra).Handler(), ScopeAdmin))
	defer srv.Close()
	post := func(body string) (int, RetryResult, string) {
		t.Helper()
		var res RetryResult
		code, ct := jsonCall(t, srv.URL, "POST", "/v1/admin/retry", body, &res)
		return code, res, ct
	}
	stored := func() int {
		return h.count(`SELECT count(*) FROM match_fetches WHERE kind = 'match' AND status = 'success'`)
	}

	// All: the first run replays 100 (the cap), the second the other 20.
	code, res, _ := post(`{"all":true}`)
	if code != http.StatusOK || len(res.Reopened) != 100 {
		t.Fatalf("first run: %d, %d reopened, want 200 and 100 (design 000's cap)", code, len(res.Reopened))
	}
	waitFor(t, "100 replayed matches stored", 2*time.Minute, func() bool { return stored() == 100 })
	if n := h.count(`SELECT count(*) FROM match_fetches WHERE kind = 'match' AND status = 'permanently_unfetchable'`); n != 20 {
		t.Errorf("%d still unfetchable after the first run, want 20", n)
	}
	code, res, _ = post(`{"all":true}`)
	if code != http.StatusOK || len(res.Reopened) != 20 {
		t.Fatalf("second run: %d, %d reopened, want 20", code, len(res.Reopened))
	}
	waitFor(t, "all 120 stored", 2*time.Minute, func() bool { return stored() == 120 })
	if n := h.count(`SELECT count(*) FROM matches m JOIN match_participants pp USING (match_id) WHERE pp.puuid = $1`, p.PUUID); n != 120 {
		t.Errorf("%d of the player's matches readable, want 120", n)
	}
	if n := h.count(`SELECT count(*) FROM jobs WHERE type = 'retry' AND status = 'completed'`); n != 2 {
		t.Errorf("%d retry jobs logged, want 2", n)
	}
	h.waitIdle(30 * time.Second)

	// By match ID and by player: only what is selected is replayed.
	mark := func(ids ...string) {
		t.Helper()
		if _, err := h.st.Infra.Store.Pool().Exec(h.ctx, `UPDATE match_fetches SET status = 'permanently_unfetchable'
WHERE kind = 'match' AND match_id = ANY($1)`, ids); err != nil {
			t.Fatal(err)
		}
	}
	mark(p.Matches[0].ID, p.Matches[1].ID)
	// A replay takes the match's unfetchable timeline row too (the
	// simulator lacks some timelines), never another match's rows.
	reopened := func(res RetryResult) map[string]bool {
		out := map[string]bool{}
		for _, r := range res.Reopened {
			out[r] = true
		}
		return out
	}
	code, res, _ = post(fmt.Sprintf(`{"match_ids":[%q]}`, p.Matches[0].ID))
	got := reopened(res)
	if code != http.StatusOK || !got[p.Matches[0].ID+"/match"] || len(got) > 2 ||
		(len(got) == 2 && !got[p.Matches[0].ID+"/timeline"]) {
		t.Fatalf("by match ID: %d %+v", code, res)
	}
	code, res, _ = post(fmt.Sprintf(`{"puuid":%q,"limit":1000}`, p.PUUID))
	got = reopened(res)
	if code != http.StatusOK || !got[p.Matches[1].ID+"/match"] || got[p.Matches[2].ID+"/match"] {
		t.Fatalf("by player: %d %+v", code, res)
	}
	for r := range got {
		if !strings.HasSuffix(r, "/timeline") && r != p.Matches[1].ID+"/match" {
			t.Errorf("by player reopened %s, which was not unfetchable", r)
		}
	}
	waitFor(t, "the two replays stored", time.Minute, func() bool { return stored() == 120 })

	// Bad input: RFC 9457.
	for _, body := range []string{`{}`, `{"all":true,"puuid":"x"}`, `{"match_ids":["nope"]}`, `{"bogus":1}`} {
		if code, _, ct := post(body); code != http.StatusBadRequest || ct != "application/problem+json" {
			t.Errorf("%s: %d %s, want 400 application/problem+json", body, code, ct)
		}
	}
}
