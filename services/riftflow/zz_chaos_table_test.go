package riftflow

// This file sorts last, so TestChaosTable runs after every chaos case of
// the same `go test` run (`make chaos`, or the short suite in make test).

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"text/tabwriter"
)

// TestChaosTable prints one row per chaos case that ran in this test
// binary: matches lost, duplicated and wrongly marked gone (judged against
// the simulator's truth by checkEnd), extra Riot getMatch calls (answered
// 200 beyond one per stored match) and 429s (application/method rate-limit
// violations the simulator counted). It fails if any loss, duplicate,
// wrongly-gone, content-mismatch or 429 cell is not 0, or if a match took
// more getMatch calls than its scenario's bound.
func TestChaosTable(t *testing.T) {
	chaosResults.Lock()
	rs := append([]chaosResult(nil), chaosResults.list...)
	chaosResults.Unlock()
	if len(rs) == 0 {
		t.Skip("no chaos case ran")
	}
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "scenario\tmatches\tlost\tduplicated\twrongly gone\textra Riot calls\tmax calls/match\t429s\tseconds\t")
	for _, r := range rs {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f\t\n", r.Case, r.Listed, r.Losses, r.Duplicates, r.WronglyGone,
			r.MatchFetches-int64(r.Stored), r.MaxCalls, r.Violations, r.ElapsedSecond)
		if r.CallBound > 0 && r.MaxCalls > r.CallBound {
			t.Errorf("%s: a match took %d getMatch calls, bound %d", r.Case, r.MaxCalls, r.CallBound)
		}
		if r.Losses+r.Duplicates+r.WronglyGone+r.Wrong != 0 || r.Violations != 0 {
			t.Errorf("%s: %d lost, %d duplicated, %d wrongly gone, %d 429s", r.Case, r.Losses, r.Duplicates, r.WronglyGone, r.Violations)
		}
	}
	w.Flush()
	fmt.Fprintf(os.Stdout, "\nCHAOS TABLE\n%s\n", b.String())
}
