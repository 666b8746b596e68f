package resolver_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/internal/testenv"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/services/resolver"
	"github.com/riftflow/riftflow/streams"
)

// start runs a resolver, built by its Connect, on the simulator with so.
func start(t *testing.T, so sim.Options, env map[string]string) (*stagetest.Env, sim.Player) {
	t.Helper()
	e := stagetest.Start(t, stagetest.Options{Riot: &so, Env: env}, resolver.Connect)
	return e, e.DemoPlayer()
}

// A Riot ID becomes one SyncCommand (on the interactive sync queue: the
// request came on the interactive ingest subject) with the player's PUUID and the
// configured defaults; the second request for the same Riot ID (another
// case) is served from the riot-ids cache without a second account lookup.
func TestResolvesRiotIDOnceIntoSyncCommands(t *testing.T) {
	e, p := start(t, sim.Options{}, map[string]string{"INGESTION_MAX_MATCHES_PER_RUN": "7"})
	syncs := e.Subscribe(e.Process.Subjects.SyncFor(p.Platform, bus.Interactive))
	for i, id := range []string{p.GameName + "#" + p.TagLine, strings.ToUpper(p.GameName) + "#" + p.TagLine} {
		reqID := []string{"first", "second"}[i]
		e.Publish(e.Process.Subjects.IngestRequest(), bus.IngestRequest{RequestID: reqID, RiotID: id, Platform: p.Platform})
		cmd := stagetest.Decode[bus.SyncCommand](t, stagetest.Next(t, syncs, "sync command "+reqID))
		if cmd.RequestID != reqID || cmd.PUUID != p.PUUID || cmd.Platform != p.Platform || cmd.Count != 7 || cmd.Requested.IsZero() {
			t.Errorf("%s: sync command %+v, want request %s for %s on %s, count 7", id, cmd, reqID, p.PUUID, p.Platform)
		}
	}
	if n := e.Sim.Stats().MethodCount(sim.MethodAccountByRiotID, 200); n != 1 {
		t.Errorf("%d account lookups by Riot ID, want 1 (the second from the cache)", n)
	}
}

// Requests that can never succeed are rejected on lol.ingest.rejected with
// their code and reason, and leave nothing in the resolver's consumer.
func TestRejectsWhatCanNeverSucceed(t *testing.T) {
	e, p := start(t, sim.Options{}, nil)
	rejected := e.Subscribe(e.Process.Subjects.IngestRejected())
	for _, c := range []struct {
		name string
		req  any
		code int
		want string
	}{
		{"bad JSON", json.RawMessage(`{"riot_id": 7}`), 400, "invalid JSON"},
		{"unknown platform", bus.IngestRequest{RequestID: "r-platform", RiotID: "a#b", Platform: "moon1"}, 400, "platform"},
		{"no tag line", bus.IngestRequest{RequestID: "r-tag", RiotID: "nohash", Platform: p.Platform}, 400, "#"},
		{"unknown player", bus.IngestRequest{RequestID: "r-unknown", RiotID: "Nobody Here#0000", Platform: p.Platform}, 404, "no Riot account"},
	} {
		e.Publish(e.Process.Subjects.IngestRequest(), c.req)
		rej := stagetest.Decode[bus.Rejection](t, stagetest.Next(t, rejected, "rejection of "+c.name))
		if rej.Code != c.code || !strings.Contains(rej.Reason, c.want) {
			t.Errorf("%s: rejection %d %q, want %d with %q", c.name, rej.Code, rej.Reason, c.code, c.want)
		}
	}
	waitSettled(t, e)
}

// Account-v1 answers only 5xx: the resolver retries with a doubling delay
// and, on the consumer's last delivery, rejects the request with 503 and
// the reason (a nak would end in a MAX_DELIVERIES advisory and the request
// would vanish), after one lookup per delivery at most.
func TestGivesUpWithReasonOnLastDelivery(t *testing.T) {
	testenv.SkipShort(t, "slow")
	e, p := start(t, sim.Options{Faults: sim.Faults{Methods: []string{sim.MethodAccountByRiotID}, Error5xx: 1}},
		map[string]string{"RESOLVER_RETRY_DELAY": "10ms", "RIOT_BREAKER_TIMEOUT": "200ms"})
	rejected := e.Subscribe(e.Process.Subjects.IngestRejected())
	e.Publish(e.Process.Subjects.IngestRequest(), bus.IngestRequest{RequestID: "gives-up", RiotID: p.GameName + "#" + p.TagLine, Platform: p.Platform})
	rej := stagetest.Decode[bus.Rejection](t, stagetest.Next(t, rejected, "the 503 rejection"))
	if rej.Code != 503 || rej.RequestID != "gives-up" || !strings.Contains(rej.Reason, "giving up") {
		t.Fatalf("rejection %+v, want 503 giving up for gives-up", rej)
	}
	cons, err := e.Process.JS.Consumer(t.Context(), streams.StreamIngest, streams.ConsumerResolver)
	if err != nil {
		t.Fatal(err)
	}
	maxDeliver := cons.CachedInfo().Config.MaxDeliver
	var lookups int64
	for _, code := range []int{500, 502, 503, 504} {
		lookups += e.Sim.Stats().MethodCount(sim.MethodAccountByRiotID, code)
	}
	if lookups == 0 || lookups > int64(maxDeliver) {
		t.Errorf("%d account lookups, want 1..%d (one per delivery at most)", lookups, maxDeliver)
	}
	waitSettled(t, e)
}

// waitSettled waits until the resolver's consumer has nothing pending or
// unacknowledged: every request was acknowledged or terminated.
func waitSettled(t *testing.T, e *stagetest.Env) {
	t.Helper()
	e.Wait("the resolver's consumer to settle", func() bool {
		c, err := e.Process.JS.Consumer(t.Context(), streams.StreamIngest, streams.ConsumerResolver)
		if err != nil {
			t.Fatal(err)
		}
		ci, err := c.Info(t.Context())
		return err == nil && ci.NumPending == 0 && ci.NumAckPending == 0
	})
}

// Design 002's payload exactly as the design writes it names no platform:
// the resolver finds the player's active platform through account-v1
// getActiveRegion on an account-v1 cluster, once (the second request is
// served from the riot-ids cache), and says so in the sync command; a
// Riot ID without a platform is resolved the same way.
func TestFindsThePlatformOfARequestWithoutOne(t *testing.T) {
	e, p := start(t, sim.Options{}, nil)
	syncs := e.Subscribe(e.Process.Subjects.SyncAll())
	seed := `{"puuid":"` + p.PUUID + `","count":20,"lookbackDays":30,"force":false,"requestedBy":"bot"}`
	for i, body := range []string{seed, seed, `{"riot_id":"` + p.GameName + `#` + p.TagLine + `","request_id":"by-riot-id"}`} {
		e.Publish(e.Process.Subjects.IngestRequest(), json.RawMessage(body))
		cmd := stagetest.Decode[bus.SyncCommand](t, stagetest.Next(t, syncs, "sync command "+body))
		if cmd.PUUID != p.PUUID || cmd.Platform != p.Platform || !cmd.PlatformFound || cmd.Region == "" {
			t.Errorf("request %d: sync command %+v, want %s on %s, platform found", i, cmd, p.PUUID, p.Platform)
		}
		if i < 2 && (cmd.Count != 20 || cmd.Lookback != 30 || cmd.RequestedBy != "bot") {
			t.Errorf("request %d: sync command %+v, want count 20, lookback 30, requested by bot", i, cmd)
		}
	}
	if n := e.Sim.Stats().MethodCount(sim.MethodActiveRegion, 200); n != 1 {
		t.Errorf("%d active-region lookups, want 1 (then the riot-ids cache)", n)
	}
	waitSettled(t, e)
}

// A PUUID Riot cannot decrypt is rejected (400) when its platform is
// looked up, and leaves nothing in the resolver's consumer.
func TestRejectsAnUnknownPUUIDWithoutPlatform(t *testing.T) {
	e, _ := start(t, sim.Options{}, nil)
	rejected := e.Subscribe(e.Process.Subjects.IngestRejected())
	e.Publish(e.Process.Subjects.IngestRequest(), bus.IngestRequest{RequestID: "no-such-puuid", PUUID: "not-a-real-puuid"})
	rej := stagetest.Decode[bus.Rejection](t, stagetest.Next(t, rejected, "the rejection"))
	if rej.Code != 400 || rej.RequestID != "no-such-puuid" {
		t.Errorf("rejection %+v, want 400 for no-such-puuid", rej)
	}
	waitSettled(t, e)
}
