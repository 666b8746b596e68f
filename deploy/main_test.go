package deploy_test

import (
	"testing"

	"github.com/riftflow/riftflow/internal/pgtest"
)

// TestMain gives the process test a Postgres (DATABASE_URL, or a throwaway
// cluster); under CI=true a missing one fails instead of skipping.
func TestMain(m *testing.M) { pgtest.Main(m) }
