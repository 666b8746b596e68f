package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/riftflow/riftflow/pkg/store"
)

// TestDueRetriesAfterPages: a caller that leaves the rows unchanged (the
// retry-sweeper only re-publishes them) still reaches every due row, each
// once, page by page; final rows are never due.
func TestDueRetriesAfterPages(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	var ledger []store.LedgerUpdate
	for i := range 7 {
		ledger = append(ledger, lu(fmt.Sprintf("NA1_%d", i), "temporary_failure", 1, 503))
	}
	ledger = append(ledger, lu("NA1_100", "permanently_unfetchable", 5, 404), lu("NA1_101", "success", 1, 200),
		lu("NA1_102", "outside_retention_window", 1, 0))
	tl := lu("NA1_101", "success", 1, 200) // a stored match with its timeline: nothing is due
	tl.Kind = "timeline"
	ledger = append(ledger, tl)
	if _, err := s.PersistBatch(ctx, store.Batch{Ledger: ledger}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	var after *store.DueFetch
	pages := 0
	for {
		due, err := s.DueRetriesAfter(ctx, time.Now(), time.Now().Add(time.Hour), after, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range due {
			seen[d.MatchID+"/"+d.Kind]++
			if d.Status != "temporary_failure" || d.Since.IsZero() {
				t.Errorf("due row %+v", d)
			}
		}
		if len(due) == 0 {
			break
		}
		pages++
		after = &due[len(due)-1]
	}
	if len(seen) != 7 || pages != 3 {
		t.Fatalf("saw %d rows in %d pages, want 7 in 3: %v", len(seen), pages, seen)
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("%s returned %d times", k, n)
		}
	}
}
