// Command resolver runs riftflow's resolver service (see package resolver).
package main

import (
	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/services/resolver"
)

func main() { app.Main("resolver", app.Needs{Riot: true}, app.Stage(resolver.FromInfra)) }
