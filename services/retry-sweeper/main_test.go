package retrysweeper_test

import (
	"testing"

	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/store"
)

// TestMain gives the package's tests (the sweeper's and the scheduler's)
// their Postgres (pgtest.Main).
func TestMain(m *testing.M) { pgtest.Main(m) }

// infra is a stage test's process with its own store, as the tests here
// use them together.
type infra struct {
	*app.Process
	Store *store.Store
}

func stageInfra(e *stagetest.Env) infra { return infra{e.Process, e.Store} }
