// Command persister runs riftflow's persister service (see package persister).
package main

import (
	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/services/persister"
)

func main() { app.Main("persister", app.Needs{DB: true}, app.Stage(persister.FromInfra)) }
