// Command resolver runs riftflow's resolver service (see package resolver).
package main

import (
	"context"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/services/resolver"
)

func main() { app.Exit(run(app.Start("resolver"))) }

// run is the resolver process: NATS and the Riot client (with the
// shared rate limiter), the resolver stage on the INGEST stream, the ops
// endpoints, until ctx ends and the stage has drained.
func run(ctx context.Context, cfg app.Config) error {
	return app.Run(ctx, cfg, app.Needs{Riot: true}, app.Stage(resolver.FromInfra))
}
