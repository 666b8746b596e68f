// Package testenv holds what the test tiers share: how a test too slow for
// the edit loop (make test-short, go test -short) says so. make test runs
// without -short, so CI runs every test this skips.
package testenv

import "testing"

// SkipShort skips t under -short, saying why in the skip message ("<why>:
// skipped under -short"): what the test builds, starts or waits out.
func SkipShort(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip(why + ": skipped under -short")
	}
}
