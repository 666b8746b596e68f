// Command retry-sweeper runs riftflow's retry-sweeper service (see package sweeper).
package main

import (
	"github.com/riftflow/riftflow/pkg/app"
	sweeper "github.com/riftflow/riftflow/services/retry-sweeper"
)

func main() { app.Main("retry-sweeper", app.Needs{DB: true}, app.Stage(sweeper.FromInfra)) }
