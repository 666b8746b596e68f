package riftflow

// A player's account: erased on request (forget), its Riot ID refreshed by
// PUUID, its PUUIDs rewritten when the API key changes (rotate-key).

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/services/resolver"
	"github.com/riftflow/riftflow/services/riftflow/api"
	"github.com/riftflow/riftflow/streams"
)

// TestForgetPlayer: DELETE /v1/admin/accounts/{puuid} erases a synced
// player's account, job log, sync rows, cursor and riot-ids entry, and the
// matches only they needed (with participants, timelines and ledger rows),
// keeps the match another stored account played in (without the player's
// participant row: TestForgetLeavesNoTrace checks the rest), logs the counts
// in a forget job that names the player by hash only; a second call is 404.
func TestForgetPlayer(t *testing.T) {
	h, p := syncedHarness(t, 3)
	kept := p.Matches[0].ID
	var other string
	if err := h.db.QueryRow(h.ctx, `SELECT puuid FROM match_participants WHERE match_id = $1 AND puuid <> $2 AND puuid <> 'BOT' LIMIT 1`,
		kept, p.PUUID).Scan(&other); err != nil {
		t.Fatal(err)
	}
	if err := h.st.Infra.Store.UpsertAccount(h.ctx, store.Account{PUUID: other, Platform: "na1", Region: "americas", Active: true}); err != nil {
		t.Fatal(err)
	}
	srv := apiServer(t, h.st.Infra, api.ScopeAdmin)
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
		if n := h.count(q, p.PUUID); n != want {
			t.Errorf("%s: %d, want %d", q, n, want)
		}
	}
	if n := h.count(`SELECT count(*) FROM matches WHERE match_id = $1`, kept); n != 1 {
		t.Error("the match another stored account played in was deleted")
	}
	if n := h.count(`SELECT count(*) FROM match_fetches WHERE match_id = ANY($1)`, []string{p.Matches[1].ID, p.Matches[2].ID}); n != 0 {
		t.Errorf("%d ledger rows left for the forgotten matches", n)
	}
	if n := h.count(`SELECT count(*) FROM jobs WHERE type = 'forget' AND id = $1`, res.JobID); n != 1 {
		t.Error("no forget job logged")
	}
	for bucket, key := range map[string]string{streams.BucketCursors: p.PUUID,
		streams.BucketRiotIDs: resolver.CacheKey(riot.RiotID{GameName: "Synth0001", TagLine: "SYN"})} {
		kv, _ := h.st.Infra.KV(h.ctx, bucket)
		if _, err := kv.Get(h.ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("%s key still there (%v)", bucket, err)
		}
	}
	if code, _ := jsonCall(t, srv.URL, "DELETE", "/v1/admin/accounts/"+p.PUUID, "", &res); code != http.StatusNotFound {
		t.Errorf("second DELETE: %d, want 404", code)
	}
}

// TestRiotIDRefreshedByPUUID: a player who renamed themselves (the stored
// Riot ID is stale) gets the current one back from account-v1 by-puuid on
// their next sync by PUUID, and the riot-ids cache learns it.
func TestRiotIDRefreshedByPUUID(t *testing.T) {
	h, p := synthHarness(t, 1, 2, 1)
	if err := h.st.Infra.Store.UpsertAccount(h.ctx, store.Account{PUUID: p.PUUID, GameName: "OldName", TagLine: "OLD",
		Platform: "na1", Region: "americas", Active: true}); err != nil {
		t.Fatal(err)
	}
	before := h.st.Sim.Stats().MethodCount(sim.MethodAccountByPUUID, 200)
	ev, err := h.ingest(bus.IngestRequest{PUUID: p.PUUID, Platform: "na1"}, 2*time.Minute)
	if err != nil || ev.Status != "completed" {
		t.Fatalf("sync: %+v %v", ev, err)
	}
	if n := h.count(`SELECT count(*) FROM accounts WHERE puuid = $1 AND game_name = 'Synth0001' AND tag_line = 'SYN'`, p.PUUID); n != 1 {
		t.Error("the stored Riot ID was not refreshed by PUUID")
	}
	if got := h.st.Sim.Stats().MethodCount(sim.MethodAccountByPUUID, 200) - before; got != 1 {
		t.Errorf("%d account-v1 by-puuid calls, want 1", got)
	}
	kv, _ := h.st.Infra.KV(h.ctx, streams.BucketRiotIDs)
	if e, err := kv.Get(h.ctx, resolver.CacheKey(riot.RiotID{GameName: "Synth0001", TagLine: "SYN"})); err != nil || string(e.Value()) != p.PUUID {
		t.Errorf("riot-ids cache not updated: %v", err)
	}
}

// TestRotateKey: an account stored under a PUUID of another key is
// re-resolved by Riot ID and rewritten, with its jobs and cursor, in one
// go; no match is fetched.
func TestRotateKey(t *testing.T) {
	h, p := synthHarness(t, 1, 2, 1)
	const old = "puuid-under-the-old-key"
	st := h.st.Infra.Store
	if err := st.UpsertAccount(h.ctx, store.Account{PUUID: old, GameName: "Synth0001", TagLine: "SYN", Platform: "na1", Region: "americas", Active: true}); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordJob(h.ctx, store.Job{ID: "j-old", Type: "sync", PUUID: old, Status: "completed"}); err != nil {
		t.Fatal(err)
	}
	cursors, _ := h.st.Infra.KV(h.ctx, streams.BucketCursors)
	if _, err := cursors.Put(h.ctx, old, []byte(`{"listed_until_s":1}`)); err != nil {
		t.Fatal(err)
	}
	fetches := h.st.Sim.Stats().MethodCount(sim.MethodMatch, 200)
	res, err := RotateKey(h.ctx, st, h.st.Infra.JS, h.st.Infra.Riot, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Accounts != 1 || res.Changed != 1 || res.Rows["accounts"] != 1 || res.Rows["jobs"] != 1 {
		t.Errorf("rotation %+v", res)
	}
	if n := h.count(`SELECT count(*) FROM jobs WHERE id = 'j-old' AND puuid = $1`, p.PUUID); n != 1 {
		t.Error("the job was not moved to the new PUUID")
	}
	if e, err := cursors.Get(h.ctx, p.PUUID); err != nil || string(e.Value()) != `{"listed_until_s":1}` {
		t.Errorf("cursor not moved: %v", err)
	}
	if _, err := cursors.Get(h.ctx, old); err == nil {
		t.Error("the old cursor is still there")
	}
	if got := h.st.Sim.Stats().MethodCount(sim.MethodMatch, 200); got != fetches {
		t.Errorf("rotation fetched %d matches", got-fetches)
	}
}
