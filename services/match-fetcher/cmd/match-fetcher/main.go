// Command match-fetcher runs riftflow's match-fetcher service (see package
// fetcher): NATS and the Riot client, one fetcher per region in
// FETCHER_REGIONS on the FETCH stream, the ops endpoints, until SIGTERM and
// the stage has drained.
package main

import (
	"github.com/riftflow/riftflow/pkg/app"
	matchfetcher "github.com/riftflow/riftflow/services/match-fetcher"
)

func main() { app.Main("match-fetcher", matchfetcher.Connect) }
