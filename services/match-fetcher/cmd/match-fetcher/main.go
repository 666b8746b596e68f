// Command match-fetcher runs riftflow's match-fetcher service (see package fetcher).
package main

import (
	"context"

	"github.com/riftflow/riftflow/pkg/app"
	fetcher "github.com/riftflow/riftflow/services/match-fetcher"
)

func main() {
	app.Main("match-fetcher", false, true, func(ctx context.Context, inf *app.Infra) error {
		s, err := fetcher.FromInfra(ctx, inf)
		if err != nil {
			return err
		}
		return s.Run(ctx)
	})
}
