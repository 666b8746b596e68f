// Command retry-sweeper runs riftflow's retry-sweeper service (see package sweeper).
package main

import (
	"context"

	"github.com/riftflow/riftflow/pkg/app"
	sweeper "github.com/riftflow/riftflow/services/retry-sweeper"
)

func main() {
	app.Main("retry-sweeper", true, false, func(ctx context.Context, inf *app.Infra) error {
		s, err := sweeper.FromInfra(ctx, inf)
		if err != nil {
			return err
		}
		return s.Run(ctx)
	})
}
