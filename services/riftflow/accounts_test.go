package riftflow

// A player's account: erased on request (forget), its PUUIDs rewritten
// when the API key changes (rotate-key). e2e's TestRiotIDRefreshedByPUUID
// covers its Riot ID refreshed by PUUID on a sync.

import (
	"errors"
	"net/http"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/services/resolver"
	"github.com/riftflow/riftflow/services/riftflow/api"
	"github.com/riftflow/riftflow/services/riftflow/stack/stacktest"
	"github.com/riftflow/riftflow/streams"
)

// TestForgetPlayer: DELETE /v1/admin/accounts/{puuid} erases a synced
// player's account, job log, sync rows, cursor and riot-ids entry, and the
// matches only they needed (with participants, timelines and ledger rows),
// keeps the match another stored account played in (without the player's
// participant row: TestForgetLeavesNoTrace checks the rest), logs the counts
// in a forget job that names the player by hash only; a second call is 404.
func TestForgetPlayer(t *testing.T) {
	h, p := stacktest.Synced(t, 3)
	kept := p.Matches[0].ID
	var other string
	if err := h.DB.QueryRow(h.Ctx, `SELECT puuid FROM match_participants WHERE match_id = $1 AND puuid <> $2 AND puuid <> 'BOT' LIMIT 1`,
		kept, p.PUUID).Scan(&other); err != nil {
		t.Fatal(err)
	}
	if err := h.St.Infra.Store.UpsertAccount(h.Ctx, store.Account{PUUID: other, Platform: "na1", Region: "americas", Active: true}); err != nil {
		t.Fatal(err)
	}
	srv := stacktest.APIServer(t, h.St.Infra, api.ScopeAdmin)
	var res api.ForgetResult
	code, _ := jsonCall(t, srv.URL, "DELETE", "/v1/admin/accounts/"+p.PUUID, "", &res)
	if code != http.StatusOK {
		t.Fatalf("DELETE: %d %+v", code, res)
	}
	if res.Removed.Accounts != 1 || res.Removed.Matches != 2 || res.Removed.KeptMatches != 1 || res.Removed.Jobs < 1 {
		t.Errorf("removed %+v, want the account, 2 matches, 1 kept, its jobs", res.Removed)
	}
	for q, want := range map[string]int{
		`SELECT count(*) FROM accounts WHERE puuid = $1`:                                         0,
		`SELECT count(*) FROM jobs WHERE puuid = $1`:                                             0,
		`SELECT count(*) FROM sync_matches WHERE puuid = $1`:                                     0,
		`SELECT count(*) FROM match_participants WHERE puuid = $1`:                               0, // none, even in the kept match
		`SELECT count(*) FROM jobs WHERE type = 'forget' AND detail::text LIKE '%' || $1 || '%'`: 0,
	} {
		if n := h.Count(q, p.PUUID); n != want {
			t.Errorf("%s: %d, want %d", q, n, want)
		}
	}
	if n := h.Count(`SELECT count(*) FROM matches WHERE match_id = $1`, kept); n != 1 {
		t.Error("the match another stored account played in was deleted")
	}
	if n := h.Count(`SELECT count(*) FROM match_fetches WHERE match_id = ANY($1)`, []string{p.Matches[1].ID, p.Matches[2].ID}); n != 0 {
		t.Errorf("%d ledger rows left for the forgotten matches", n)
	}
	if n := h.Count(`SELECT count(*) FROM jobs WHERE type = 'forget' AND id = $1`, res.JobID); n != 1 {
		t.Error("no forget job logged")
	}
	for bucket, key := range map[string]string{streams.BucketCursors: p.PUUID,
		streams.BucketRiotIDs: resolver.CacheKey(riot.RiotID{GameName: "Synth0001", TagLine: "SYN"})} {
		kv, _ := h.St.Infra.KV(h.Ctx, bucket)
		if _, err := kv.Get(h.Ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("%s key still there (%v)", bucket, err)
		}
	}
	if code, _ := jsonCall(t, srv.URL, "DELETE", "/v1/admin/accounts/"+p.PUUID, "", &res); code != http.StatusNotFound {
		t.Errorf("second DELETE: %d, want 404", code)
	}
}

// TestRotateKey: an account stored under a PUUID of another key is
// re-resolved by Riot ID and rewritten, with its jobs and cursor, in one
// go; no match is fetched.
func TestRotateKey(t *testing.T) {
	h, p := stacktest.Synthetic(t, 1, 2, 1)
	const old = "puuid-under-the-old-key"
	st := h.St.Infra.Store
	if err := st.UpsertAccount(h.Ctx, store.Account{PUUID: old, GameName: "Synth0001", TagLine: "SYN", Platform: "na1", Region: "americas", Active: true}); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordJob(h.Ctx, store.Job{ID: "j-old", Type: "sync", PUUID: old, Status: "completed"}); err != nil {
		t.Fatal(err)
	}
	cursors, _ := h.St.Infra.KV(h.Ctx, streams.BucketCursors)
	if _, err := cursors.Put(h.Ctx, old, []byte(`{"listed_until_s":1}`)); err != nil {
		t.Fatal(err)
	}
	fetches := h.St.Sim.Stats().MethodCount(sim.MethodMatch, 200)
	res, err := RotateKey(h.Ctx, st, h.St.Infra.JS, h.St.Infra.Riot, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Accounts != 1 || res.Changed != 1 || res.Rows["accounts"] != 1 || res.Rows["jobs"] != 1 {
		t.Errorf("rotation %+v", res)
	}
	if n := h.Count(`SELECT count(*) FROM jobs WHERE id = 'j-old' AND puuid = $1`, p.PUUID); n != 1 {
		t.Error("the job was not moved to the new PUUID")
	}
	if e, err := cursors.Get(h.Ctx, p.PUUID); err != nil || string(e.Value()) != `{"listed_until_s":1}` {
		t.Errorf("cursor not moved: %v", err)
	}
	if _, err := cursors.Get(h.Ctx, old); err == nil {
		t.Error("the old cursor is still there")
	}
	if got := h.St.Sim.Stats().MethodCount(sim.MethodMatch, 200); got != fetches {
		t.Errorf("rotation fetched %d matches", got-fetches)
	}
}
