// Command matchid-lister runs riftflow's matchid-lister service (see package lister).
package main

import (
	"context"

	"github.com/riftflow/riftflow/pkg/app"
	lister "github.com/riftflow/riftflow/services/matchid-lister"
)

func main() { app.Exit(run(app.Start("matchid-lister"))) }

// run is the matchid-lister process: NATS, Postgres and the Riot client,
// the lister stage on the SYNC stream with the sync-lock and cursor
// buckets, the ops endpoints, until ctx ends and the stage has drained.
func run(ctx context.Context, cfg app.Config) error {
	return app.Run(ctx, cfg, app.Needs{DB: true, Riot: true}, app.Stage(lister.FromInfra))
}
