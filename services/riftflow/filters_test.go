package riftflow

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/riot"
)

// TestFiltersReachRiot: the queue and type filters of an ingest request
// travel through the resolver and the lister to match-v5's ids endpoint
// (queue, type), so only matching matches are listed and fetched.
func TestFiltersReachRiot(t *testing.T) {
	h := startHarness(t, harnessOptions{})
	p, listed := richestPlayer(t, h, 730)
	// The queueId of each listed match, read from the simulator as a client would.
	env := h.st.Infra.Env.Riot
	_, region, _ := riot.ParseMatchID(listed[0].ID)
	byQueue := map[int]int{}
	for _, m := range listed {
		req, _ := http.NewRequest(http.MethodGet, strings.Replace(env.BaseURL, "{route}", string(region), 1)+"/lol/match/v5/matches/"+m.ID, nil)
		req.Header.Set("X-Riot-Token", env.APIKey.Reveal())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var match riot.Match
		err = json.NewDecoder(resp.Body).Decode(&match)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		byQueue[int(match.Info.QueueID)]++
	}
	q := 0
	for queue, n := range byQueue {
		if n > byQueue[q] || q == 0 {
			q = queue
		}
	}
	t.Logf("%d listed matches by queueId: %v; filtering on %d", len(listed), byQueue, q)

	base := bus.IngestRequest{PUUID: p.PUUID, Platform: p.Platform, Mode: bus.ModeFull, LookbackDays: 730, Count: 1000}
	none := 9999
	for _, tc := range []struct {
		name  string
		queue *int
		typ   string
		want  int
	}{
		{"queue nobody played", &none, "", 0},
		{"type with no match", nil, "tutorial", 0},
		{"one queue", &q, "", byQueue[q]},
	} {
		r := base
		r.Queue, r.Type = tc.queue, tc.typ
		ev, err := h.ingest(r, time.Minute)
		if err != nil || ev.Status != "completed" {
			t.Fatalf("%s: %+v %v", tc.name, ev, err)
		}
		if ev.Total != tc.want {
			t.Errorf("%s: %d matches listed, want %d", tc.name, ev.Total, tc.want)
		}
	}
	if n := h.count(`SELECT count(*) FROM matches`); n != byQueue[q] {
		t.Errorf("%d matches stored, want the %d of queue %d", n, byQueue[q], q)
	}
	if n := h.count(`SELECT count(*) FROM matches WHERE queue_id <> $1`, q); n != 0 {
		t.Errorf("%d stored matches of another queue", n)
	}
}
