// Command match-fetcher runs riftflow's match-fetcher service (see package fetcher).
package main

import (
	"github.com/riftflow/riftflow/pkg/app"
	fetcher "github.com/riftflow/riftflow/services/match-fetcher"
)

func main() { app.Main("match-fetcher", app.Needs{Riot: true}, app.Stage(fetcher.FromInfra)) }
