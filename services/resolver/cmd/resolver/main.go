// Command resolver runs riftflow's resolver service (see package resolver).
package main

import (
	"context"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/services/resolver"
)

func main() {
	app.Main("resolver", false, true, func(ctx context.Context, inf *app.Infra) error {
		s, err := resolver.FromInfra(ctx, inf)
		if err != nil {
			return err
		}
		return s.Run(ctx)
	})
}
