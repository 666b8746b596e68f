// Command match-fetcher runs riftflow's match-fetcher service (see package fetcher).
package main

import (
	"context"

	"github.com/riftflow/riftflow/pkg/app"
	fetcher "github.com/riftflow/riftflow/services/match-fetcher"
)

func main() { app.Exit(run(app.Start("match-fetcher"))) }

// run is the match-fetcher process: NATS and the Riot client, one fetcher
// per region in FETCHER_REGIONS on the FETCH stream, the ops endpoints,
// until ctx ends and the stage has drained.
func run(ctx context.Context, cfg app.Config) error {
	return app.Run(ctx, cfg, app.Needs{Riot: true}, app.Stage(fetcher.FromInfra))
}
