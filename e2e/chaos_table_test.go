package e2e

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
)

// printChaosTable prints, after every test of the binary has run
// (TestMain), one row per chaos case that ran: matches lost, duplicated
// and wrongly marked gone (judged against the simulator's truth by
// checkEnd), extra Riot calls (getMatch and getTimeline calls beyond each
// match's Riot failures + 1), the most getMatch calls of one match, and
// 429s (application/method rate-limit violations the simulator counted).
// Each case fails on its own (check, checkCalls); the table only reports.
func printChaosTable() {
	chaosResults.Lock()
	rs := append([]chaosResult(nil), chaosResults.list...)
	chaosResults.Unlock()
	if len(rs) == 0 {
		return
	}
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "scenario\tmatches\tlost\tduplicated\twrongly gone\textra calls\tover bound\tmax getMatch/match\t429s\tseconds\t")
	for _, r := range rs {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f\t\n", r.Case, r.Listed, r.Losses, r.Duplicates, r.WronglyGone,
			r.ExtraCalls, r.OverBound, r.MaxCalls, r.Violations, r.ElapsedSecond)
	}
	w.Flush()
	fmt.Fprintf(os.Stdout, "\nCHAOS TABLE\n%s\n", b.String())
}
