// Command persister runs riftflow's persister service (see package persister).
package main

import (
	"context"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/services/persister"
)

func main() {
	app.Main("persister", true, false, func(ctx context.Context, inf *app.Infra) error {
		s, err := persister.FromInfra(ctx, inf)
		if err != nil {
			return err
		}
		return s.Run(ctx)
	})
}
