package e2e

// Hostile input from Riot: per-match-ID poison (not JSON), truncated and
// oversized bodies from the simulator, plus schema-drifted payloads served
// from a custom fixtures folder (unknown fields, ints as floats, missing
// fields). Each ends stored or final in the ledger with a reason; no service
// dies; the rest of the sync is not blocked.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/services/riftflow/stack/stacktest"
)

// driftFixtures builds a fixtures folder that links every file of src and
// replaces the match files of the given IDs by drift(payload).
func driftFixtures(t *testing.T, src string, drift map[string]func(map[string]any)) string {
	t.Helper()
	dst := t.TempDir()
	for _, kind := range []string{"match", "timeline", "account"} {
		if err := os.MkdirAll(filepath.Join(dst, kind), 0o755); err != nil {
			t.Fatal(err)
		}
		ents, _ := os.ReadDir(filepath.Join(src, kind))
		for _, e := range ents {
			id := strings.TrimSuffix(strings.TrimSuffix(e.Name(), ".gz"), ".json")
			if f := drift[id]; kind == "match" && f != nil {
				b, err := os.ReadFile(filepath.Join(src, kind, e.Name()))
				if err != nil || strings.HasSuffix(e.Name(), ".gz") {
					t.Fatalf("drift %s: %v (gz fixtures not handled)", e.Name(), err)
				}
				d := json.NewDecoder(bytes.NewReader(b))
				d.UseNumber()
				var v map[string]any
				if err := d.Decode(&v); err != nil {
					t.Fatal(err)
				}
				f(v)
				out, err := json.Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dst, kind, id+".json"), out, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err := os.Symlink(filepath.Join(src, kind, e.Name()), filepath.Join(dst, kind, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dst
}

func driftInfo(v map[string]any) map[string]any { return v["info"].(map[string]any) }

func driftParticipants(v map[string]any) []map[string]any {
	var out []map[string]any
	for _, p := range driftInfo(v)["participants"].([]any) {
		out = append(out, p.(map[string]any))
	}
	return out
}

// asFloat rewrites an integer field as "N.0".
func asFloat(m map[string]any, k string) {
	if n, ok := m[k].(json.Number); ok && !strings.ContainsAny(string(n), ".eE") {
		m[k] = json.Number(string(n) + ".0")
	}
}

// Schema drifts applied to real recorded matches.
var drifts = map[string]func(map[string]any){
	"unknown-fields": func(v map[string]any) {
		v["riftflowFutureTopLevel"] = map[string]any{"nested": []any{1, "x", nil}}
		driftInfo(v)["brandNewRiotField"] = []any{1, 2, 3}
		driftInfo(v)["gameModeMutators"] = []any{"SOMETHING_NEW"}
		for _, p := range driftParticipants(v) {
			p["futureStat"] = 42
			p["challenges"] = map[string]any{"aNewChallenge": 1.5}
		}
	},
	"ints-as-floats": func(v map[string]any) {
		asFloat(driftInfo(v), "gameDuration")
		asFloat(driftInfo(v), "mapId")
		for _, p := range driftParticipants(v) {
			for _, k := range []string{"kills", "deaths", "assists", "champLevel", "goldEarned", "teamId", "championId", "participantId"} {
				asFloat(p, k)
			}
		}
	},
	"missing-fields": func(v map[string]any) {
		for _, k := range []string{"gameMode", "gameType", "gameVersion", "endOfGameResult", "gameName", "tournamentCode"} {
			delete(driftInfo(v), k)
		}
		for _, p := range driftParticipants(v) {
			for _, k := range []string{"riotIdTagline", "teamPosition", "visionScore", "challenges", "perks"} {
				delete(p, k)
			}
		}
	},
}

// TestHostileRiotPayloads ingests a recorded player whose matches include
// every kind of hostile payload, and checks the end state match by match.
func TestHostileRiotPayloads(t *testing.T) {
	src := sim.FindFixtures()
	if src == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI: testdata/riot-fixtures not found")
		}
		t.Skip("testdata/riot-fixtures not found")
	}
	// Drift three real retained matches of recorded players off na1 (the
	// synthetic backlog clones na1 matches), and serve poison, truncated
	// and oversized bodies for three matches of a synthetic na1 player.
	probe, err := sim.New(sim.Options{APIKey: "probe", FixturesDir: src, NoEmbedded: true})
	if err != nil {
		t.Fatal(err)
	}
	truth := probe.Truth()
	puuids := make([]string, 0, len(truth.Players))
	for pu := range truth.Players {
		puuids = append(puuids, pu)
	}
	sort.Strings(puuids)
	kinds := map[string]string{} // match ID → hostile kind
	driftBy := map[string]func(map[string]any){}
	var players []sim.PlayerTruth
	driftNames := []string{"unknown-fields", "ints-as-floats", "missing-fields"}
	for _, pu := range puuids {
		p := truth.Players[pu]
		if p.GameName == "" || p.Platform == "" || p.Platform == "na1" || len(driftBy) == len(driftNames) {
			continue
		}
		took := false
		for _, m := range p.Matches {
			if _, err := os.Stat(filepath.Join(src, "match", m.ID+".json")); err != nil || !m.MatchOK || kinds[m.ID] != "" || len(driftBy) == len(driftNames) {
				continue
			}
			k := driftNames[len(driftBy)]
			kinds[m.ID], driftBy[m.ID], took = k, drifts[k], true
		}
		if took {
			players = append(players, p)
		}
	}
	if len(driftBy) < len(driftNames) {
		t.Fatalf("only %d recorded matches to drift", len(driftBy))
	}
	faults := sim.Faults{Match: map[string]sim.MatchFault{}}
	for j, k := range []string{sim.FaultPoison, sim.FaultTruncated, sim.FaultOversized} {
		id := fmt.Sprintf("NA1_%d", sim.SyntheticGameIDBase+j*3)
		kinds[id], faults.Match[id] = k, sim.MatchFault{Kind: k}
	}
	h := stacktest.Start(t, stacktest.Options{Sim: sim.Options{FixturesDir: driftFixtures(t, src, driftBy), NoEmbedded: true, Faults: faults,
		Synthetic: sim.Synthetic{Players: 1, MatchesPerPlayer: 12, Platform: "na1"}},
		// The sweeper completes a sync whose truncated match is pending.
		Env: map[string]string{"SWEEP_INTERVAL": "1s"}})
	truth = h.St.Sim.Truth()
	players = append(players, truth.Players[sim.SyntheticPUUID("na1", 1)])

	var ids []string
	want := map[string]int{}
	for _, p := range players {
		ev, err := h.Ingest(bus.IngestRequest{PUUID: p.PUUID, Platform: p.Platform, Mode: bus.ModeFull,
			LookbackDays: 730, Count: 1000}, 3*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Status != "completed" {
			t.Fatalf("sync of %s ended %+v, want completed", p.PUUID, ev)
		}
		for _, m := range truth.Players[p.PUUID].Matches {
			if m.MatchOK {
				ids = append(ids, m.ID)
				want[m.ID] = m.Participants
			}
		}
	}
	h.WaitIdle(30 * time.Second)
	select {
	case err := <-h.Done:
		h.Done <- err
		t.Fatalf("services stopped during hostile input: %v", err)
	default:
	}

	ledger := readLedger(t, h.Ctx, h.DB, "match_id", "kind = 'match'")
	stored, rejected, pending := 0, 0, 0
	for _, id := range ids {
		r := ledger[id]
		n := h.Count(`SELECT count(*) FROM match_participants WHERE match_id = $1`, id)
		kind := kinds[id]
		switch {
		case r.status == "success":
			stored++
			if n != want[id] {
				t.Errorf("%s (%s): %d participant rows, want %d", id, orNormal(kind), n, want[id])
			}
			if kind == sim.FaultPoison || kind == sim.FaultTruncated {
				t.Errorf("%s (%s) stored as success", id, kind)
			}
		case r.status == "permanently_unfetchable" && r.reason != "":
			rejected++
			if kind == "" {
				t.Errorf("%s: a normal match was rejected: %s", id, r.reason)
			}
			if n != 0 || h.Count(`SELECT count(*) FROM matches WHERE match_id = $1`, id) != 0 {
				t.Errorf("%s rejected but has rows", id)
			}
		case r.status == "temporary_failure" && strings.Contains(r.reason, "left to the retry-sweeper"):
			// A truncated body is a transport fault: retrying can fix it,
			// so it is never final; the sweeper keeps trying.
			pending++
			if kind != sim.FaultTruncated {
				t.Errorf("%s (%s): pending: %s", id, orNormal(kind), r.reason)
			}
		default:
			t.Errorf("%s (%s): ledger %q %q: neither stored, pending nor final with a reason", id, orNormal(kind), r.status, r.reason)
		}
		if kind != "" {
			t.Logf("%-15s %s → %s %s", kind, id, r.status, r.reason)
		}
	}
	t.Logf("%d matches: %d stored, %d rejected with a reason, %d pending; sim faults %v", len(ids), stored, rejected, pending, h.St.Sim.Stats().Faults)
	if h.St.Sim.Stats().Faults[sim.FaultPoison] == 0 || h.St.Sim.Stats().Faults[sim.FaultOversized] == 0 {
		t.Errorf("per-match faults not served: %v", h.St.Sim.Stats().Faults)
	}

	// The pipeline still works after the hostile payloads: a second, latest
	// sync completes.
	p := players[0]
	ev, err := h.Ingest(bus.IngestRequest{PUUID: p.PUUID, Platform: p.Platform, Mode: bus.ModeLatest}, time.Minute)
	if err != nil || ev.Status != "completed" {
		t.Fatalf("sync after hostile payloads: %+v %v", ev, err)
	}
}

func orNormal(k string) string {
	if k == "" {
		return "normal"
	}
	return k
}
