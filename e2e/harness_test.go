package e2e

// What the tests on stacktest.Start share beside it: SQL views of the
// stored data, captures of subjects, the simulator's answers, clocks and
// faults, requests published without waiting.

import (
	"encoding/json"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/services/riftflow/stack"
	"github.com/riftflow/riftflow/services/riftflow/stack/stacktest"
)

func TestMain(m *testing.M) { pgtest.Main(m, printChaosTable) }

// fingerprint is an md5 over every row of the data tables, to prove that a
// replay changed nothing.
func fingerprint(h *stacktest.Harness) string {
	h.T.Helper()
	var parts []string
	for _, q := range []string{
		`SELECT md5(string_agg(t::text, '|' ORDER BY match_id)) FROM matches t`,
		`SELECT md5(string_agg(t::text, '|' ORDER BY match_id, participant_id)) FROM match_participants t`,
		`SELECT md5(string_agg(t::text, '|' ORDER BY match_id)) FROM match_timelines t`,
		`SELECT md5(string_agg(t::text, '|' ORDER BY match_id, kind)) FROM match_fetches t`,
	} {
		var s *string
		if err := h.DB.QueryRow(h.Ctx, q).Scan(&s); err != nil {
			h.T.Fatal(err)
		}
		if s == nil {
			parts = append(parts, "-")
		} else {
			parts = append(parts, *s)
		}
	}
	return strings.Join(parts, ",")
}

// ledger returns match_fetches status by "match_id/kind".
func ledger(h *stacktest.Harness) map[string]string {
	h.T.Helper()
	rows, _ := h.DB.Query(h.Ctx, `SELECT match_id || '/' || kind, status FROM match_fetches`)
	out := map[string]string{}
	var k, v string
	if _, err := pgx.ForEachRow(rows, []any{&k, &v}, func() error { out[k] = v; return nil }); err != nil {
		h.T.Fatal(err)
	}
	return out
}

// capture records every message on subjects of h until stop is called.
func capture(h *stacktest.Harness, subjects ...string) (msgs func() []*nats.Msg, stop func()) {
	ch := make(chan *nats.Msg, 1<<16)
	var subs []*nats.Subscription
	for _, s := range subjects {
		sub, err := h.St.Infra.NC.ChanSubscribe(s, ch)
		if err != nil {
			h.T.Fatal(err)
		}
		subs = append(subs, sub)
	}
	var got []*nats.Msg
	return func() []*nats.Msg {
			for {
				select {
				case m := <-ch:
					got = append(got, m)
				default:
					return got
				}
			}
		}, func() {
			for _, s := range subs {
				s.Unsubscribe()
			}
		}
}

// mustJSON is v as JSON; v must marshal.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// wantAnswers checks how many answers of each status (want) the simulator
// gave to method.
func wantAnswers(h *stacktest.Harness, method string, want map[int]int64) {
	h.T.Helper()
	st := h.St.Sim.Stats()
	for status, n := range want {
		if got := st.MethodCount(method, status); got != n {
			h.T.Errorf("%s %ds = %d, want %d", method, status, got, n)
		}
	}
}

// offsetClock is a clock the test moves: real time plus an offset.
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) Now() time.Time            { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *offsetClock) Set(d time.Duration)       { c.off.Store(int64(d)) }
func (c *offsetClock) Offset() (d time.Duration) { return time.Duration(c.off.Load()) }

// slowTimelines keeps every sync running for a while (each timeline fetch
// waits d), so concurrent triggers really overlap the running sync.
func slowTimelines(d time.Duration) sim.Faults {
	return sim.Faults{Slow: 1, SlowDelay: d, Methods: []string{sim.MethodTimeline}}
}

// publishReq publishes req (normalized) on h without waiting for it.
func publishReq(t *testing.T, h *stacktest.Harness, req bus.IngestRequest) {
	t.Helper()
	if err := req.Normalize(); err != nil {
		t.Fatal(err)
	}
	if err := stack.PublishIngest(h.Ctx, h.St.Infra.NC, h.St.Infra.Subjects, req); err != nil {
		t.Fatal(err)
	}
}

// richestPlayer is the recorded player with a Riot ID and the most matches
// inside the listing window of lookbackDays.
func richestPlayer(t *testing.T, h *stacktest.Harness, lookbackDays int) (sim.PlayerTruth, []sim.MatchTruth) {
	t.Helper()
	truth := h.St.Sim.Truth()
	cutoff := truth.Now - int64(lookbackDays)*24*3600*1000
	var best sim.PlayerTruth
	var bestM []sim.MatchTruth
	ids := make([]string, 0, len(truth.Players))
	for id := range truth.Players {
		ids = append(ids, id)
	}
	sort.Strings(ids) // deterministic choice among equals
	for _, id := range ids {
		p := truth.Players[id]
		if p.GameName == "" || p.TagLine == "" || p.Platform == "" || strings.HasPrefix(p.GameName, "Synth") {
			continue
		}
		var in []sim.MatchTruth
		for _, m := range p.Matches {
			if m.GameCreation >= cutoff {
				in = append(in, m)
			}
		}
		if len(in) > len(bestM) {
			best, bestM = p, in
		}
	}
	if len(bestM) == 0 {
		t.Fatal("no recorded player has matches in the window")
	}
	return best, bestM
}

// idsOf is the IDs of ms.
func idsOf(ms []sim.MatchTruth) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// dbDown is a copy of h's Infra on a database that is down: a closed
// store.
func dbDown(h *stacktest.Harness) *stack.Infra {
	h.T.Helper()
	down, err := store.Open(h.Ctx, pgtest.NewDatabase(h.T))
	if err != nil {
		h.T.Fatal(err)
	}
	down.Close()
	inf := *h.St.Infra
	inf.Store = down
	return &inf
}
