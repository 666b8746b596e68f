// Command matchid-lister runs riftflow's matchid-lister service (see package lister).
package main

import (
	"context"

	"github.com/riftflow/riftflow/pkg/app"
	lister "github.com/riftflow/riftflow/services/matchid-lister"
)

func main() {
	app.Main("matchid-lister", true, true, func(ctx context.Context, inf *app.Infra) error {
		s, err := lister.FromInfra(ctx, inf)
		if err != nil {
			return err
		}
		return s.Run(ctx)
	})
}
