package stack

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/riotclient"
	"github.com/riftflow/riftflow/pkg/store"
)

// Infra is what `riftflow up` builds the five stages on and `riftflow
// serve` the HTTP API: a process (app.Process) with the Postgres pool and
// the Riot client they share. Store and Riot may be nil (a process that
// was not given them).
type Infra struct {
	*app.Process
	Store     *store.Store
	Riot      *riot.Client
	Limiter   riot.Limiter
	RiotStats *riotclient.Stats
}

// InfraOptions says what OpenInfra sets up.
type InfraOptions struct {
	Service  string
	NeedDB   bool // the pool of DATABASE_URL, with the "postgres" readiness check
	NeedRiot bool // the Riot client on its limiter (riotclient.Open)
	Log      *slog.Logger
	// NATSServer, when set, is used in-process instead of NATS_URL.
	NATSServer nats.InProcessConnProvider
}

// OpenInfra makes the process (app.NewProcess) and what o asks for on
// it. The returned func closes everything.
func OpenInfra(ctx context.Context, env config.Env, o InfraOptions) (*Infra, func(), error) {
	p, err := app.NewProcess(ctx, env, app.Options{Service: o.Service, Log: o.Log, NATSServer: o.NATSServer})
	if err != nil {
		return nil, nil, err
	}
	inf := &Infra{Process: p}
	if o.NeedDB {
		if inf.Store, err = store.ConnectFor(ctx, env.Postgres, p); err != nil {
			p.Close()
			return nil, nil, err
		}
	}
	if o.NeedRiot {
		if inf.Riot, inf.Limiter, inf.RiotStats, err = riotclient.Open(ctx, p); err != nil {
			p.Close()
			return nil, nil, err
		}
	}
	return inf, p.Close, nil
}
