package riftflow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/syncjob"
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

// demoPhase is one sync of the demo.
type demoPhase struct {
	At      time.Time // the clock during the sync
	Mode    bus.Mode
	Matches int // recorded matches the sync should add
}

// demoClock is the demo's shared clock: real time moved by an offset.
type demoClock struct{ offset atomic.Int64 }

func (c *demoClock) Now() time.Time   { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *demoClock) Set(at time.Time) { c.offset.Store(int64(time.Until(at))) }

// planDemo groups match creation times (epoch ms) into syncs: a group
// spans less than the timeline retention minus two days, and its sync runs
// one day after its newest match.
func planDemo(created []int64) []demoPhase {
	created = slices.Clone(created)
	slices.Sort(created)
	span := (sim.TimelineRetention - 48*time.Hour).Milliseconds()
	var plan []demoPhase
	for i := 0; i < len(created); {
		j := i
		for j+1 < len(created) && created[j+1]-created[i] < span {
			j++
		}
		mode := bus.ModeLatest
		if len(plan) == 0 {
			mode = bus.ModeFull
		}
		plan = append(plan, demoPhase{At: time.UnixMilli(created[j]).Add(24 * time.Hour).UTC(), Mode: mode, Matches: j - i + 1})
		i = j + 1
	}
	return plan
}

// simDemo sets so up for a demo against the simulator (recorded dates
// served as they are, derived timelines, one clock for the simulator and
// the services) and returns the demo player's syncs.
func simDemo(so *StackOptions) ([]demoPhase, error) {
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
	plan := planDemo(created)
	clk := &demoClock{}
	clk.Set(plan[0].At)
	so.Now = clk.Now
	so.Sim = sim.Options{FixturesDir: fixtures, Now: clk.Now, Shift: sim.ShiftNone, DeriveTimelines: true}
	so.demoClock = clk
	return plan, nil
}

// runDemo ingests the demo player, one sync per phase of plan (the
// simulator), or once (a real RIOT_API_KEY), and prints a summary.
func runDemo(ctx context.Context, st *Stack, plan []demoPhase, out io.Writer, timeout time.Duration, started time.Time) error {
	req := bus.IngestRequest{Mode: bus.ModeFull, LookbackDays: 730, Count: 1000, Trigger: "cli", RequestedBy: "make run"}
	if st.Sim != nil {
		p, ok := st.Sim.DemoPlayer()
		if !ok {
			return errors.New("the simulator has no demo player")
		}
		req.RiotID, req.Platform = p.GameName+"#"+p.TagLine, p.Platform
		fmt.Fprintf(out, "ingesting %s on %s: %d recorded matches, %s … %s, in %d syncs at the recorded dates\n",
			req.RiotID, req.Platform, p.Matches, plan[0].At.AddDate(0, 0, -1).Format(time.DateOnly),
			plan[len(plan)-1].At.AddDate(0, 0, -1).Format(time.DateOnly), len(plan))
	} else {
		id := os.Getenv("RIFTFLOW_DEMO_RIOT_ID")
		if id == "" {
			return errors.New("with a real RIOT_API_KEY, set RIFTFLOW_DEMO_RIOT_ID='Name#TAG' and RIFTFLOW_DEMO_PLATFORM for --demo")
		}
		req.RiotID, req.Platform = id, os.Getenv("RIFTFLOW_DEMO_PLATFORM")
		plan = []demoPhase{{Mode: bus.ModeFull}}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var final bus.ProgressEvent
	for i, ph := range plan {
		if st.demoClock != nil {
			st.demoClock.Set(ph.At)
			fmt.Fprintf(out, "sync %d/%d: clock at %s, mode %s (%d recorded matches up to then)\n",
				i+1, len(plan), ph.At.Format(time.DateOnly), ph.Mode, ph.Matches)
		}
		req.Mode, req.RequestID = ph.Mode, "demo-"+randHex(6)
		ev, err := publishAndWait(ctx, st.Infra.NC, st.Infra.Subjects, req, out)
		if err != nil {
			return err
		}
		if syncjob.Status(ev.Status) != syncjob.Completed {
			return fmt.Errorf("sync %s: %s", ev.Status, ev.Error)
		}
		final = ev
	}
	return printDemoSummary(ctx, st, final.PUUID, out, started)
}

// printDemoSummary prints what the demo stored for puuid, the Riot calls
// it took, and where to look further.
func printDemoSummary(ctx context.Context, st *Stack, puuid string, out io.Writer, started time.Time) error {
	s, err := st.Infra.Store.AccountStatus(ctx, puuid)
	if err != nil {
		return err
	}
	rs := st.Infra.RiotStats
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "player\tmatches\tparticipants\ttimelines\tRiot calls\t429s\t5xx\ttime\t")
	fmt.Fprintf(tw, "%s#%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", s.GameName, s.TagLine, s.Matches, s.Participants, s.Timelines,
		rs.Requests.Load(), rs.RateLimited.Load(), rs.ServerErrors.Load(), time.Since(started).Round(10*time.Millisecond))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "fetch ledger: %s\n", ledgerLine(s.Ledger))
	if st.Sim != nil {
		fmt.Fprintln(out, "(the recordings hold 1 timeline of this player's; the simulator derives the others from recorded ones: sim.Options.DeriveTimelines)")
	}
	fmt.Fprintf(out, `
look further: start the same stack again, kept running (it reuses .data/), then in another terminal
  bin/riftflow up%[1]s
  psql "$(cat .data/database.url)" -c 'SELECT match_id, queue_id, game_creation FROM matches ORDER BY game_creation'
  curl -s -H "Authorization: Bearer $(cat .data/api.token)" http://<the HTTP address riftflow up prints>/v1/players/%[2]s   # the read API
  traces: docker run --rm -p 16686:16686 -p 4318:4318 cr.jaegertracing.io/jaegertracing/jaeger:2.15.0
          then OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 make run, and open http://localhost:16686
`, ephemeralFlag(st), puuid)
	return nil
}

func ephemeralFlag(st *Stack) string {
	if st.ephemeralDB {
		return " --ephemeral-db"
	}
	return ""
}
