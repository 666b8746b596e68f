// Command matchid-lister runs riftflow's matchid-lister service (see package
// lister): NATS, Postgres and the Riot client, the lister stage on the SYNC
// stream with the sync-lock and cursor buckets, the ops endpoints, until
// SIGTERM and the stage has drained.
package main

import (
	"github.com/riftflow/riftflow/pkg/app"
	matchidlister "github.com/riftflow/riftflow/services/matchid-lister"
)

func main() { app.Main("matchid-lister", matchidlister.Connect) }
