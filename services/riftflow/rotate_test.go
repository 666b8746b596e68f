package riftflow

import (
	"testing"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/streams"
)

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
