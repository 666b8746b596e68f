package stack

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/bus"
)

// The demo (`riftflow up --demo`, make run) ingests the simulator's demo
// player, whose 16 recorded matches span 2022-01 … 2024-06: longer than
// Riot keeps a match (730 days) or a timeline (365 days). So that every one
// is stored with its timeline, the simulator serves the recorded dates as
// they are and the demo runs the clock of the simulator and of the services
// at those dates: one sync per group of matches that fit in the timeline
// retention, the clock one day after the group's newest match. The first
// sync is a full backfill; the next ones are "latest" syncs, which list
// only what is newer than the account's cursor, as a deployment that had
// been running then would have.

// Phase is one sync of the demo.
type Phase struct {
	At      time.Time // the clock during the sync
	Mode    bus.Mode
	Matches int // recorded matches the sync should add
}

// Clock is the demo's shared clock: real time moved by an offset.
type Clock struct{ offset atomic.Int64 }

// Now is the clock's time.
func (c *Clock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// Set moves the clock to at; it runs on from there.
func (c *Clock) Set(at time.Time) { c.offset.Store(int64(time.Until(at))) }

// PlanDemo groups match creation times (epoch ms) into syncs: a group
// spans less than the timeline retention minus two days, and its sync runs
// one day after its newest match.
func PlanDemo(created []int64) []Phase {
	created = slices.Clone(created)
	slices.Sort(created)
	span := (sim.TimelineRetention - 48*time.Hour).Milliseconds()
	var plan []Phase
	for i := 0; i < len(created); {
		j := i
		for j+1 < len(created) && created[j+1]-created[i] < span {
			j++
		}
		mode := bus.ModeLatest
		if len(plan) == 0 {
			mode = bus.ModeFull
		}
		plan = append(plan, Phase{At: time.UnixMilli(created[j]).Add(24 * time.Hour).UTC(), Mode: mode, Matches: j - i + 1})
		i = j + 1
	}
	return plan
}

// SimDemo sets so up for a demo against the simulator (recorded dates
// served as they are, derived timelines, one clock for the simulator and
// the services: the started Stack's DemoClock) and returns the demo
// player's syncs.
func SimDemo(so *Options) ([]Phase, error) {
	fixtures := sim.FindFixtures()
	s, err := sim.New(sim.Options{APIKey: "RGAPI-plan", FixturesDir: fixtures, Shift: sim.ShiftNone,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, fmt.Errorf("simulator: %w", err)
	}
	p, ok := s.DemoPlayer()
	truth := s.Truth().Players[p.PUUID]
	s.Close()
	if !ok || len(truth.Matches) == 0 {
		return nil, errors.New("the simulator has no demo player")
	}
	var created []int64
	for _, m := range truth.Matches {
		created = append(created, m.GameCreation)
	}
	plan := PlanDemo(created)
	clk := &Clock{}
	clk.Set(plan[0].At)
	so.Now = clk.Now
	so.Sim = sim.Options{FixturesDir: fixtures, Now: clk.Now, Shift: sim.ShiftNone, DeriveTimelines: true}
	so.demoClock = clk
	return plan, nil
}
