package retrysweeper_test

import (
	"testing"

	"github.com/riftflow/riftflow/internal/pgtest"
)

// TestMain gives the package's tests (the sweeper's and the scheduler's)
// their Postgres (pgtest.Main).
func TestMain(m *testing.M) { pgtest.Main(m) }
