package e2e

import (
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/services/riftflow/stack/stacktest"
)

// TestRateLimitedFetchHeldFromTheSweeper holds a fetch in a long
// rate-limit schedule (Riot answers its first getMatch and getTimeline
// with a server 429 and Retry-After 10 s, past the limiter's 1 s
// patience) while the retry-sweeper runs every second with a 2 s age
// threshold. The fetch's ledger row, listed before the wait, is long past
// that threshold while the schedule waits: the sweep leaves it alone
// (the fetcher recorded the hold), and the match and its timeline are
// each fetched exactly once after their 429. Before the holds, every
// sweep saw an unfetched row with no command queued and re-published it,
// and the schedule fired beside that copy: two 200s for each.
func TestRateLimitedFetchHeldFromTheSweeper(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{Env: map[string]string{
		"SWEEP_INTERVAL": "1s", "SWEEP_STALE_AFTER": "2s", "SWEEP_QUEUE_SLACK": "1s",
		// The call gives up on the wait (1 s + 2 s < 10 s) instead of
		// holding the 429 in process: the fetch is rescheduled.
		"RIOT_RATELIMIT_MAX_WAIT": "1s", "RIOT_HTTP_TIMEOUT_MS": "2000"}})
	m := fetchable(t, h, 1, 300*24*time.Hour, true)[0]
	if err := h.St.Sim.SetFaults(sim.Faults{ServerRetryAfter: 10,
		Match: map[string]sim.MatchFault{m.ID: {Kind: sim.FaultServer429N, N: 1}}}); err != nil {
		t.Fatal(err)
	}
	// Listed as the lister lists: an unfetched ledger row, then the command.
	if _, err := h.St.Infra.Store.PersistBatch(h.Ctx, store.Batch{Ledger: []store.LedgerUpdate{
		{MatchID: m.ID, Kind: "match", Status: "unfetched"}}}); err != nil {
		t.Fatal(err)
	}
	publishFetch(h, bus.FetchCommand{MatchID: m.ID})
	waitFinal(h, 90*time.Second, m.ID)
	// A copy published late would still call: give the sweeper a few more
	// runs after the end.
	time.Sleep(3 * time.Second)
	if r, _ := fetchRowOf(h, m.ID, "match"); r.Status != "success" {
		t.Fatalf("match ledger %+v", r)
	}
	wantAnswers(h, sim.MethodMatch, map[int]int64{429: 1, 200: 1})
	wantAnswers(h, sim.MethodTimeline, map[int]int64{429: 1, 200: 1})
	if n := h.Count(`SELECT count(*) FROM matches WHERE match_id = $1`, m.ID); n != 1 {
		t.Errorf("%d matches rows", n)
	}
}
