// Command retry-sweeper runs riftflow's retry-sweeper service (see package
// sweeper): NATS and Postgres, the sweeper on the ADVISORIES stream and the
// scheduler, the ops endpoints, until SIGTERM and both have drained.
package main

import (
	"github.com/riftflow/riftflow/pkg/app"
	retrysweeper "github.com/riftflow/riftflow/services/retry-sweeper"
)

func main() { app.Main("retry-sweeper", retrysweeper.Connect) }
