package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/services/riftflow/stack/stacktest"
	"github.com/riftflow/riftflow/streams"
)

// TestEndToEnd runs one ingest request through the five services on the
// recorded data and checks the exact rows the simulator's truth implies.
func TestEndToEnd(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{})
	const lookback = 730
	p, listed := richestPlayer(t, h, lookback)
	t.Logf("player %s#%s on %s: %d matches in the window", p.GameName, p.TagLine, p.Platform, len(listed))

	ev, err := h.Ingest(bus.IngestRequest{RiotID: p.GameName + "#" + p.TagLine, Platform: p.Platform,
		Mode: bus.ModeFull, LookbackDays: lookback, Count: 1000}, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Status != "completed" || ev.Total != len(listed) || ev.Progress != ev.Total {
		t.Fatalf("final event %+v, want completed %d/%d", ev, len(listed), len(listed))
	}
	h.WaitIdle(10 * time.Second)

	ledger := ledger(h)
	wantMatches, wantParts, wantTimelines := 0, 0, 0
	for _, m := range listed {
		if !m.MatchOK {
			t.Fatalf("listed match %s is outside retention in the sim: test premise broken", m.ID)
		}
		wantMatches++
		wantParts += m.Participants
		if got := ledger[m.ID+"/match"]; got != "success" {
			t.Errorf("%s match ledger = %q, want success", m.ID, got)
		}
		if n := h.Count(`SELECT count(*) FROM match_participants WHERE match_id = $1`, m.ID); n != m.Participants {
			t.Errorf("%s: %d participant rows, want %d", m.ID, n, m.Participants)
		}
		age := time.Duration(h.St.Sim.Truth().Now-m.GameCreation) * time.Millisecond
		want := "permanently_unfetchable" // no timeline in the recorded data: Riot-like 404s
		switch {
		case m.TimelineOK:
			want = "success"
			wantTimelines++
		case age > 365*24*time.Hour:
			want = "outside_retention_window"
		}
		if got := ledger[m.ID+"/timeline"]; got != want {
			t.Errorf("%s timeline ledger = %q, want %q", m.ID, got, want)
		}
	}
	if n := h.Count(`SELECT count(*) FROM matches`); n != wantMatches {
		t.Errorf("matches: %d rows, want %d", n, wantMatches)
	}
	if n := h.Count(`SELECT count(*) FROM match_participants`); n != wantParts {
		t.Errorf("match_participants: %d rows, want %d", n, wantParts)
	}
	if n := h.Count(`SELECT count(*) FROM match_timelines`); n != wantTimelines {
		t.Errorf("match_timelines: %d rows, want %d", n, wantTimelines)
	}
	if n := h.Count(`SELECT count(*) FROM accounts WHERE puuid = $1 AND sync_status = 'completed' AND sync_total = $2 AND sync_progress = $2`, p.PUUID, len(listed)); n != 1 {
		t.Error("account not completed with the right totals")
	}
	// Normalized columns are filled from the MatchDto (epoch ms → timestamptz).
	if n := h.Count(`SELECT count(*) FROM matches WHERE game_creation IS NULL OR queue_id IS NULL OR patch = '' OR raw IS NULL`); n != 0 {
		t.Errorf("%d matches with empty normalized columns", n)
	}
	// Each match was fetched once: no 429s, one getMatch per match.
	st := h.St.Sim.Stats()
	if got := st.MethodCount(sim.MethodMatch, 200); got != int64(wantMatches) {
		t.Errorf("getMatch 200s = %d, want %d (one per match)", got, wantMatches)
	}
	if st.Violations != 0 {
		t.Errorf("%d rate-limit violations", st.Violations)
	}
	// The lock is released on completion.
	if _, err := h.St.Infra.JS.KeyValue(h.Ctx, "sync-locks"); err == nil {
		kv, _ := h.St.Infra.JS.KeyValue(h.Ctx, "sync-locks")
		if _, err := kv.Get(h.Ctx, p.PUUID); err == nil {
			t.Error("sync lock still held after completion")
		}
	}

	// A second latest sync finds nothing new and stores nothing twice.
	before := fingerprint(h)
	requests := h.St.Sim.Stats().MethodCount(sim.MethodMatch, 200)
	ev, err = h.Ingest(bus.IngestRequest{PUUID: p.PUUID, Platform: p.Platform, Mode: bus.ModeLatest}, time.Minute)
	if err != nil || ev.Status != "completed" || ev.Total != 0 {
		t.Fatalf("second sync: %+v %v", ev, err)
	}
	h.WaitIdle(10 * time.Second)
	if after := fingerprint(h); after != before {
		t.Error("a second sync changed stored rows")
	}
	if got := h.St.Sim.Stats().MethodCount(sim.MethodMatch, 200); got != requests {
		t.Errorf("second sync fetched %d matches again", got-requests)
	}
}

// TestReplayChangesNothing redelivers every fetch result the persister saw
// and every fetch command the fetcher saw: no row changes.
func TestReplayChangesNothing(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{})
	p, _ := richestPlayer(t, h, 730)
	subj := h.St.Infra.Subjects
	got, stop := capture(h, subj.Fetched("*"), subj.Failed("*"), subj.FetchAll())
	ev, err := h.Ingest(bus.IngestRequest{RiotID: p.GameName + "#" + p.TagLine, Platform: p.Platform, Mode: bus.ModeFull, LookbackDays: 730, Count: 1000}, 2*time.Minute)
	if err != nil || ev.Status != "completed" {
		t.Fatalf("%+v %v", ev, err)
	}
	h.WaitIdle(10 * time.Second)
	stop()
	msgs := got()
	if len(msgs) < 3 {
		t.Fatalf("captured only %d messages", len(msgs))
	}
	before := fingerprint(h)
	for _, m := range msgs {
		// A fresh message id, so JetStream's dedup does not hide the replay.
		r := nats.NewMsg(m.Subject)
		r.Data = m.Data
		if _, err := h.St.Infra.JS.PublishMsg(h.Ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	h.WaitIdle(30 * time.Second)
	if after := fingerprint(h); after != before {
		t.Errorf("replaying %d messages changed rows", len(msgs))
	}
}

// TestConcurrentRequestsFetchOnce sends two requests for one player at once:
// exactly one sync runs (the other is rejected 409 or finds nothing new) and
// each match is fetched once.
func TestConcurrentRequestsFetchOnce(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{})
	p, listed := richestPlayer(t, h, 730)
	var wg sync.WaitGroup
	results := make([]error, 2)
	events := make([]bus.ProgressEvent, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			events[i], results[i] = h.Ingest(bus.IngestRequest{PUUID: p.PUUID, Platform: p.Platform, Mode: bus.ModeFull, LookbackDays: 730, Count: 1000}, 2*time.Minute)
		}()
	}
	wg.Wait()
	completed, rejected := 0, 0
	for i := range 2 {
		switch {
		case results[i] == nil && events[i].Status == "completed":
			completed++
		case results[i] != nil && strings.Contains(results[i].Error(), "(409)"):
			rejected++
		default:
			t.Errorf("request %d: %+v %v", i, events[i], results[i])
		}
	}
	if completed < 1 {
		t.Fatal("no request completed")
	}
	h.WaitIdle(10 * time.Second)
	if got := h.St.Sim.Stats().MethodCount(sim.MethodMatch, 200); got != int64(len(listed)) {
		t.Errorf("getMatch 200s = %d, want %d: a match was fetched twice", got, len(listed))
	}
	if n := h.Count(`SELECT count(*) FROM matches`); n != len(listed) {
		t.Errorf("%d matches stored, want %d", n, len(listed))
	}
	t.Logf("completed %d, rejected %d", completed, rejected)
}

// TestBadIngestRequestRejected: malformed requests are terminated with a
// reason on lol.ingest.rejected, and a good request behind them still runs.
func TestBadIngestRequestRejected(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{})
	subj := h.St.Infra.Subjects
	rej := make(chan *nats.Msg, 16)
	sub, err := h.St.Infra.NC.ChanSubscribe(subj.IngestRejected(), rej)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	bad := []struct{ body, reason string }{
		{`{not json`, "invalid JSON"},
		{`{"riot_id":"NoHash","platform":"na1"}`, "no '#'"},
		{`{"riot_id":"A#B12","platform":"atlantis"}`, "unknown platform"},
		{`{"riot_id":"` + strings.Repeat("x", 40) + `#NA1","platform":"na1"}`, "longer than 16"},
		{`{"riot_id":"Nobody Here#ZZZ","platform":"na1"}`, "no Riot account"},
	}
	for _, b := range bad {
		if _, err := h.St.Infra.JS.Publish(h.Ctx, subj.IngestRequest(), []byte(b.body)); err != nil {
			t.Fatal(err)
		}
	}
	p := h.Demo()
	ev, err := h.Ingest(bus.IngestRequest{RiotID: p.GameName + "#" + p.TagLine, Platform: p.Platform, Mode: bus.ModeLatest, LookbackDays: 730}, time.Minute)
	if err != nil || ev.Status != "completed" {
		t.Fatalf("good request behind bad ones: %+v %v", ev, err)
	}
	seen := map[string]bool{}
	timeout := time.After(10 * time.Second)
	for len(seen) < len(bad) {
		select {
		case m := <-rej:
			var r bus.Rejection
			if err := json.Unmarshal(m.Data, &r); err != nil {
				t.Fatal(err)
			}
			for _, b := range bad {
				if strings.Contains(r.Reason, b.reason) {
					seen[b.reason] = true
				}
			}
		case <-timeout:
			t.Fatalf("rejections seen for %v only", seen)
		}
	}
	// Nothing is left behind: the bad messages were terminated.
	h.WaitIdle(5 * time.Second)
}

// TestLargePayloadsThroughObjectStore: with the inline limit at 1 KiB every
// payload travels through the payloads object store, as a timeline over the
// NATS message size would; every match and timeline is stored once, with
// one getMatch per match (a payload that cannot be published inline is
// never fetched from Riot again on a redelivery).
func TestLargePayloadsThroughObjectStore(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{Env: map[string]string{"FETCH_INLINE_PAYLOAD_MAX": "1024"}})
	const lookback = 730
	p, listed := richestPlayer(t, h, lookback)
	ev, err := h.Ingest(bus.IngestRequest{RiotID: p.GameName + "#" + p.TagLine, Platform: p.Platform,
		Mode: bus.ModeFull, LookbackDays: lookback, Count: 1000}, 2*time.Minute)
	if err != nil || ev.Status != "completed" || ev.Total != len(listed) {
		t.Fatalf("ingest: %+v %v, want completed %d", ev, err, len(listed))
	}
	h.WaitIdle(10 * time.Second)
	wantTimelines := 0
	for _, m := range listed {
		if m.TimelineOK {
			wantTimelines++
		}
	}
	if n := h.Count(`SELECT count(*) FROM matches`); n != len(listed) {
		t.Errorf("%d matches stored, want %d", n, len(listed))
	}
	if n := h.Count(`SELECT count(*) FROM match_timelines`); n != wantTimelines {
		t.Errorf("%d timelines stored, want %d", n, wantTimelines)
	}
	if got := h.St.Sim.Stats().MethodCount(sim.MethodMatch, 200); got != int64(len(listed)) {
		t.Errorf("getMatch 200s = %d, want %d (one per match)", got, len(listed))
	}
	obs, err := h.St.Infra.JS.ObjectStore(h.Ctx, streams.ObjectPayloads)
	if err != nil {
		t.Fatal(err)
	}
	list, err := obs.List(h.Ctx)
	if err != nil || len(list) < len(listed)+wantTimelines {
		t.Fatalf("%d payload objects (%v), want at least %d", len(list), err, len(listed)+wantTimelines)
	}
}

// TestFiltersReachRiot: the queue and type filters of an ingest request
// travel through the resolver and the lister to match-v5's ids endpoint
// (queue, type), so only matching matches are listed and fetched.
func TestFiltersReachRiot(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{})
	p, listed := richestPlayer(t, h, 730)
	// The queueId of each listed match, read from the simulator as a client would.
	env := h.St.Infra.Env.Riot
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
		ev, err := h.Ingest(r, time.Minute)
		if err != nil || ev.Status != "completed" {
			t.Fatalf("%s: %+v %v", tc.name, ev, err)
		}
		if ev.Total != tc.want {
			t.Errorf("%s: %d matches listed, want %d", tc.name, ev.Total, tc.want)
		}
	}
	if n := h.Count(`SELECT count(*) FROM matches`); n != byQueue[q] {
		t.Errorf("%d matches stored, want the %d of queue %d", n, byQueue[q], q)
	}
	if n := h.Count(`SELECT count(*) FROM matches WHERE queue_id <> $1`, q); n != 0 {
		t.Errorf("%d stored matches of another queue", n)
	}
}
