package matchidlister_test

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/internal/testenv"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/riot"
	matchidlister "github.com/riftflow/riftflow/services/matchid-lister"
	"github.com/riftflow/riftflow/streams"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// start runs a lister, built by its Connect, on a fresh database and the
// simulator with so; it returns the simulator's demo player. Only one of
// the demo player's 16 matches is within Riot's 730-day retention, so the
// lister's retention is 10 years here unless env says otherwise: these
// tests are about listing, not retention (TestListsOnlyRetainedMatches).
func start(t *testing.T, so sim.Options, env map[string]string) (*stagetest.Env, sim.Player) {
	t.Helper()
	if _, ok := env["MATCH_RETENTION_DAYS"]; !ok {
		env = maps.Clone(env)
		if env == nil {
			env = map[string]string{}
		}
		env["MATCH_RETENTION_DAYS"] = "3650"
	}
	e := stagetest.Start(t, stagetest.Options{DB: true, Riot: &so, Env: env}, matchidlister.Connect)
	return e, e.DemoPlayer()
}

func syncOf(p sim.Player, requestID string, count int) bus.SyncCommand {
	return bus.SyncCommand{RequestID: requestID, PUUID: p.PUUID, Platform: p.Platform, Region: regionOf(p),
		Mode: bus.ModeLatest, Count: count, Priority: bus.Interactive, Requested: time.Now()}
}

func regionOf(p sim.Player) string { return string(riot.Platform(p.Platform).Region()) }

// A latest sync lists the run's count of the player's newest matches, claims them in the
// ledger and publishes one FetchCommand each; it holds the account's sync
// lock meanwhile, so a second sync with another request id is refused
// with 409 and a rejected job row.
func TestListsMatchesIntoFetchCommandsUnderTheLock(t *testing.T) {
	e, p := start(t, sim.Options{}, nil)
	fetches := e.Subscribe(e.Process.Subjects.FetchAll())
	rejected := e.Subscribe(e.Process.Subjects.IngestRejected())
	const count = 3
	e.Publish(e.Process.Subjects.Sync(p.Platform), syncOf(p, "sync-1", count))
	seen := map[string]bool{}
	for range count {
		fc := stagetest.Decode[bus.FetchCommand](t, stagetest.Next(t, fetches, "fetch command"))
		if seen[fc.MatchID] || fc.Region != regionOf(p) || !strings.Contains(fc.MatchID, "_") {
			t.Errorf("fetch command %+v: repeated, or not a %s match ID", fc, regionOf(p))
		}
		seen[fc.MatchID] = true
	}
	e.Wait("the listed matches in the ledger", func() bool {
		return e.Count(`SELECT count(*) FROM sync_matches WHERE request_id = 'sync-1' AND match_id = ANY($1)`, keys(seen)) == count
	})
	if n := e.Count(`SELECT count(*) FROM accounts WHERE puuid = $1 AND sync_status = 'syncing'`, p.PUUID); n != 1 {
		t.Errorf("account syncing rows = %d, want 1", n)
	}
	locks, err := e.Process.KV(t.Context(), streams.BucketSyncLocks)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locks.Get(t.Context(), p.PUUID); err != nil {
		t.Fatalf("sync lock: %v, want it held until the persister ends the sync", err)
	}

	e.Publish(e.Process.Subjects.Sync(p.Platform), syncOf(p, "sync-2", count))
	rej := stagetest.Decode[bus.Rejection](t, stagetest.Next(t, rejected, "the 409 rejection"))
	if rej.Code != 409 || rej.RequestID != "sync-2" {
		t.Errorf("rejection %+v, want 409 for sync-2", rej)
	}
	e.Wait("the rejected job row", func() bool {
		return e.Count(`SELECT count(*) FROM jobs WHERE id = 'sync-2' AND status = 'rejected'`) == 1
	})
	select {
	case raw := <-fetches:
		t.Errorf("a fetch command beyond the run's count: %s", raw)
	default:
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// match-v5 by-puuid answers only 5xx: the lister retries and, on the
// consumer's last delivery, fails the sync with the reason: the client
// hears "failed … giving up", the account is not left syncing and the
// lock is released, so a new request runs at once (no 409).
func TestGivesUpWithReasonAndReleasesTheLock(t *testing.T) {
	testenv.SkipShort(t, "slow")
	e, p := start(t, sim.Options{Faults: sim.Faults{Methods: []string{sim.MethodMatchIDs}, Error5xx: 1}},
		map[string]string{"LISTER_RETRY_DELAY": "10ms", "RIOT_BREAKER_TIMEOUT": "200ms"})
	progress := e.Subscribe(e.Process.Subjects.Progress(p.PUUID))
	locks, err := e.Process.KV(t.Context(), streams.BucketSyncLocks)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"gives-up", "runs-again"} {
		e.Publish(e.Process.Subjects.Sync(p.Platform), syncOf(p, id, 5))
		for {
			ev := stagetest.Decode[bus.ProgressEvent](t, stagetest.Next(t, progress, "the failed event of "+id))
			if ev.Status != "failed" {
				continue
			}
			if ev.RequestID != id || !strings.Contains(ev.Error, "giving up") {
				t.Fatalf("failed event %+v, want %s giving up", ev, id)
			}
			break
		}
		e.Wait("the account to leave syncing", func() bool {
			return e.Count(`SELECT count(*) FROM accounts WHERE puuid = $1 AND sync_status = 'syncing'`, p.PUUID) == 0
		})
		if _, err := locks.Get(t.Context(), p.PUUID); err == nil {
			t.Errorf("%s: sync lock still held after the lister gave up", id)
		}
	}
}

// A latest sync of an account with no cursor lists from now − the match
// retention (730 days), not from the beginning: the demo player has 16
// matches over 2.3 years, and Riot lists the expired ones but answers 404
// for them. Only the retained one is listed, claimed and published; the
// window's start is the retention limit.
func TestListsOnlyRetainedMatches(t *testing.T) {
	testenv.SkipShort(t, "slow")
	e, p := start(t, sim.Options{}, map[string]string{"MATCH_RETENTION_DAYS": "730"})
	fetches := e.Subscribe(e.Process.Subjects.FetchAll())
	e.Publish(e.Process.Subjects.Sync(p.Platform), syncOf(p, "sync-r", 100))
	truth := e.Sim.Truth().Players[p.PUUID]
	var retained []string
	for _, m := range truth.Matches {
		if m.MatchOK {
			retained = append(retained, m.ID)
		}
	}
	if len(retained) == 0 || len(retained) == len(truth.Matches) {
		t.Fatalf("test premise: %d of %d matches retained, want some on each side", len(retained), len(truth.Matches))
	}
	for range retained {
		fc := stagetest.Decode[bus.FetchCommand](t, stagetest.Next(t, fetches, "fetch command"))
		if !slices.Contains(retained, fc.MatchID) {
			t.Errorf("fetch command for %s, which Riot no longer serves", fc.MatchID)
		}
		if age := time.Since(time.Unix(fc.ListedAfterS, 0)); age < 729*24*time.Hour || age > 731*24*time.Hour {
			t.Errorf("listed after %s (%s ago), want the retention limit", time.Unix(fc.ListedAfterS, 0).UTC(), age)
		}
	}
	e.Wait("the sync's listed matches", func() bool {
		return e.Count(`SELECT count(*) FROM sync_matches WHERE request_id = 'sync-r'`) == len(retained)
	})
	select {
	case raw := <-fetches:
		t.Errorf("a fetch command for an expired match: %s", raw)
	case <-time.After(time.Second):
	}
	if n := e.Count(`SELECT count(*) FROM match_fetches`); n != len(retained) {
		t.Errorf("%d ledger rows, want %d (the retained matches only)", n, len(retained))
	}
}

// A sync whose lock lapsed (an outage longer than its TTL) is taken over
// by a second request for the same account: the first job is not left
// running for ever but ends failed, naming the request that replaced it,
// and its followers hear a final "failed" event.
func TestTakeoverEndsTheReplacedSync(t *testing.T) {
	testenv.SkipShort(t, "slow")
	e, p := start(t, sim.Options{}, nil)
	progress := e.Subscribe(e.Process.Subjects.Progress(p.PUUID))
	e.Publish(e.Process.Subjects.Sync(p.Platform), syncOf(p, "lapsed", 3))
	e.Wait("the first sync running", func() bool {
		return e.Count(`SELECT count(*) FROM jobs WHERE id = 'lapsed' AND status = 'running'`) == 1 &&
			e.Count(`SELECT count(*) FROM sync_matches WHERE request_id = 'lapsed'`) == 3
	})
	locks, err := e.Process.KV(t.Context(), streams.BucketSyncLocks)
	if err != nil {
		t.Fatal(err)
	}
	if err := locks.Delete(t.Context(), p.PUUID); err != nil { // the lock lapsed
		t.Fatal(err)
	}
	e.Publish(e.Process.Subjects.Sync(p.Platform), syncOf(p, "takeover", 3))
	for {
		ev := stagetest.Decode[bus.ProgressEvent](t, stagetest.Next(t, progress, "the failed event of the replaced sync"))
		if ev.RequestID != "lapsed" || ev.Status != "failed" {
			continue
		}
		if !strings.Contains(ev.Error, "replaced by sync takeover") {
			t.Errorf("failed event %+v, want the reason naming takeover", ev)
		}
		break
	}
	if n := e.Count(`SELECT count(*) FROM jobs WHERE id = 'lapsed' AND status = 'failed' AND error LIKE 'replaced by sync takeover%'`); n != 1 {
		t.Error("the replaced sync's job is not failed with the reason")
	}
}

// force in latest mode (design 002): an account that already has a cursor,
// whose newest matches are stored, gets a forced latest sync: it lists the
// newest count matches whatever the cursor says and publishes a forced
// fetch for each stored one (today's cursor window would list none).
func TestForcedLatestSyncRefetchesTheNewestStored(t *testing.T) {
	e, p := start(t, sim.Options{}, nil)
	fetches := e.Subscribe(e.Process.Subjects.FetchAll())
	const count = 3
	e.Publish(e.Process.Subjects.Sync(p.Platform), syncOf(p, "first", count))
	first := map[string]bool{}
	for range count {
		first[stagetest.Decode[bus.FetchCommand](t, stagetest.Next(t, fetches, "fetch command")).MatchID] = true
	}
	cursors, err := e.Process.KV(t.Context(), streams.BucketCursors)
	if err != nil {
		t.Fatal(err)
	}
	e.Wait("the first sync's cursor", func() bool { _, err := cursors.Get(t.Context(), p.PUUID); return err == nil })
	// The first sync's matches are stored and the sync is over.
	if _, err := e.DB.Exec(t.Context(), `UPDATE match_fetches SET status = 'success' WHERE match_id = ANY($1)`, keys(first)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.DB.Exec(t.Context(), `UPDATE accounts SET sync_status = 'completed' WHERE puuid = $1`, p.PUUID); err != nil {
		t.Fatal(err)
	}
	locks, err := e.Process.KV(t.Context(), streams.BucketSyncLocks)
	if err != nil {
		t.Fatal(err)
	}
	if err := locks.Delete(t.Context(), p.PUUID); err != nil {
		t.Fatal(err)
	}

	forced := syncOf(p, "forced", count)
	forced.Force = true
	e.Publish(e.Process.Subjects.Sync(p.Platform), forced)
	for range count {
		fc := stagetest.Decode[bus.FetchCommand](t, stagetest.Next(t, fetches, "forced fetch command"))
		if !first[fc.MatchID] || !fc.Force || fc.RequestID != "forced" {
			t.Errorf("fetch command %+v, want a forced refetch of one of the newest stored %v", fc, keys(first))
		}
	}
	e.Wait("the forced job's detail", func() bool {
		return e.Count(`SELECT count(*) FROM jobs WHERE id = 'forced' AND (detail->>'forced')::int = $1`, count) == 1
	})
}
