// Command retry-sweeper runs riftflow's retry-sweeper service (see package sweeper).
package main

import (
	"context"

	"github.com/riftflow/riftflow/pkg/app"
	sweeper "github.com/riftflow/riftflow/services/retry-sweeper"
)

func main() { app.Exit(run(app.Start("retry-sweeper"))) }

// run is the retry-sweeper process: NATS and Postgres, the sweeper on
// the ADVISORIES stream and the scheduler, the ops endpoints, until ctx
// ends and both have drained.
func run(ctx context.Context, cfg app.Config) error {
	return app.Run(ctx, cfg, app.Needs{DB: true}, app.Stage(sweeper.FromInfra))
}
