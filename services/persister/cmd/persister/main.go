// Command persister runs riftflow's persister service (see package
// persister): NATS and Postgres, the persister stage on the FETCHED stream,
// the ops endpoints, until SIGTERM and the stage has drained.
package main

import (
	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/services/persister"
)

func main() { app.Main("persister", persister.Connect) }
