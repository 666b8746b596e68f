package riftflow

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// printAs writes a command's answer to out: v as one line of JSON when
// asJSON (the commands' --json), else what text writes, the answer for a
// reader (often a newTable).
func printAs(out io.Writer, asJSON bool, v any, text func() error) error {
	if asJSON {
		return json.NewEncoder(out).Encode(v)
	}
	return text()
}

// printIndented writes v to out as JSON indented by two spaces, a line at
// the end (what show and forget print).
func printIndented(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newTable is the writer of the CLI's tables: tab-separated cells aligned
// in columns two spaces apart, written out by Flush.
func newTable(out io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(out, 0, 0, 2, ' ', 0) }

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

// fmtTime is t in local time to the second, or "never" when it is zero.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Local().Format(time.DateTime)
}

// orDash is s, or "-" when it is empty (an empty table cell).
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
