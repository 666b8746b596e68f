package riftflow

import (
	"fmt"
	"slices"
	"strings"
)

// countsLine formats counts by key as "a 1, b 2", keys sorted; none when
// m is empty.
func countsLine[V int | int64](m map[string]V, none string) string {
	if len(m) == 0 {
		return none
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// ledgerLine formats fetch-ledger counts ("kind/status n").
func ledgerLine(m map[string]int) string { return countsLine(m, "(nothing new)") }
