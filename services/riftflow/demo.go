package riftflow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/syncjob"
	"github.com/riftflow/riftflow/services/riftflow/stack"
)

// The demo (`riftflow up --demo`, make run) against the simulator runs
// the syncs of stack.SimDemo's plan, the clock at each phase's date
// (stack/demo.go); against the real Riot API, one full sync of
// RIFTFLOW_DEMO_RIOT_ID.

// runDemo ingests the demo player, one sync per phase of plan (the
// simulator), or once (a real RIOT_API_KEY), and prints a summary.
func runDemo(ctx context.Context, st *stack.Stack, plan []stack.Phase, out io.Writer, timeout time.Duration, started time.Time) error {
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
		plan = []stack.Phase{{Mode: bus.ModeFull}}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var final bus.ProgressEvent
	for i, ph := range plan {
		if st.DemoClock != nil {
			st.DemoClock.Set(ph.At)
			fmt.Fprintf(out, "sync %d/%d: clock at %s, mode %s (%d recorded matches up to then)\n",
				i+1, len(plan), ph.At.Format(time.DateOnly), ph.Mode, ph.Matches)
		}
		req.Mode, req.RequestID = ph.Mode, "demo-"+randHex(6)
		ev, err := stack.IngestAndWait(ctx, st.Infra.NC, st.Infra.Subjects, req, out)
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
func printDemoSummary(ctx context.Context, st *stack.Stack, puuid string, out io.Writer, started time.Time) error {
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

func ephemeralFlag(st *stack.Stack) string {
	if st.EphemeralDB {
		return " --ephemeral-db"
	}
	return ""
}
