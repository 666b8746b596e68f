package riftflow

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/telemetry"
)

// cmdSim is `riftflow sim`: the Riot API simulator on --addr until ctx
// ends.
func cmdSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("sim", stderr)
	addr := fs.String("addr", "127.0.0.1:8099", "listen address (loopback unless --expose)")
	expose := fs.Bool("expose", false, "allow a listen address beyond loopback (a simulator in a pod, behind a Service)")
	key := fs.String("key", "", "API key clients must send (default: generated and printed)")
	fixtures := fs.String("fixtures", sim.FindFixtures(), "recorded Riot responses, laid out like testdata/riot-fixtures")
	app := fs.String("app-limit", sim.DefaultAppLimit, "application rate limit, Riot's header format")
	synthetic := fs.Int("synthetic-players", 0, "add synthetic players (clones of recorded matches)")
	perPlayer := fs.Int("synthetic-matches", 500, "matches per synthetic player")
	derive := fs.Bool("derive-timelines", false, "serve a timeline for every match, re-keyed from a recorded one (sim.Options.DeriveTimelines)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *key == "" {
		*key = "RGAPI-sim-" + randHex(8)
	}
	s, err := sim.New(sim.Options{APIKey: *key, FixturesDir: *fixtures, Limits: sim.RateLimits{App: *app},
		Synthetic: sim.Synthetic{Players: *synthetic, MatchesPerPlayer: *perPlayer}, DeriveTimelines: *derive,
		Logger: telemetry.NewLogger(stderr, slog.LevelInfo, "text")})
	if err != nil {
		return err
	}
	defer s.Close()
	var base string
	if *expose {
		ln, lerr := net.Listen("tcp", *addr)
		if lerr != nil {
			return fmt.Errorf("sim: %w", lerr)
		}
		base, err = s.Serve(ln)
	} else {
		base, err = s.Start(*addr)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Riot API simulator on %s\nexport RIOT_API_BASE_URL='%s' RIOT_API_KEY='%s'\n", strings.TrimSuffix(base, "/{route}"), base, *key)
	fmt.Fprintf(stdout, "%d players; admin: GET /sim/stats, GET /sim/truth, POST /sim/faults\n", len(s.Players()))
	<-ctx.Done()
	return nil
}
