// Command resolver runs riftflow's resolver service (see package resolver):
// NATS and the Riot client (with the shared rate limiter), the resolver
// stage on the INGEST stream, the ops endpoints, until SIGTERM and the stage
// has drained.
package main

import (
	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/services/resolver"
)

func main() { app.Main("resolver", resolver.Connect) }
