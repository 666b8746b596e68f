// Command persister runs riftflow's persister service (see package persister).
package main

import (
	"context"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/services/persister"
)

func main() { app.Exit(run(app.Start("persister"))) }

// run is the persister process: NATS and Postgres, the persister
// stage on the FETCHED stream, the ops endpoints, until ctx ends and the
// stage has drained.
func run(ctx context.Context, cfg app.Config) error {
	return app.Run(ctx, cfg, app.Needs{DB: true}, app.Stage(persister.FromInfra))
}
