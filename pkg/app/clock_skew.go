//go:build chaosclock

package app

import (
	"fmt"
	"os"
	"time"
)

// Test-only clock skew: compiled in only with `go build -tags chaosclock`
// (the chaos suite builds its service binaries so), never in a production
// build. RIFTFLOW_TEST_CLOCK_SKEW (a Go duration, e.g. "-500ms") shifts
// this process's clock, as a host clock off by that much would; Go's
// monotonic clock, hence timers and sleeps, is not shifted.
func init() {
	v := os.Getenv("RIFTFLOW_TEST_CLOCK_SKEW")
	if v == "" {
		return
	}
	skew, err := time.ParseDuration(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "RIFTFLOW_TEST_CLOCK_SKEW=%q: %v\n", v, err)
		os.Exit(2)
	}
	processClock = func() time.Time { return time.Now().Add(skew) }
}
