// Command matchid-lister runs riftflow's matchid-lister service (see package lister).
package main

import (
	"github.com/riftflow/riftflow/pkg/app"
	lister "github.com/riftflow/riftflow/services/matchid-lister"
)

func main() { app.Main("matchid-lister", app.Needs{DB: true, Riot: true}, app.Stage(lister.FromInfra)) }
