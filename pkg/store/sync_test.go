package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/riftflow/riftflow/pkg/store"
)

func begin(t *testing.T, s *testStore, req, puuid string) {
	t.Helper()
	if _, err := s.BeginSync(context.Background(), store.SyncStart{RequestID: req, PUUID: puuid, GameName: "Faker",
		TagLine: "KR1", Platform: "KR", Region: "asia", Mode: "full", Trigger: "api", RequestedAt: t0}); err != nil {
		t.Fatal(err)
	}
}

func TestClaimMatchesConcurrentRequestsPublishEachIDOnce(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	for round := 0; round < 5; round++ {
		reqA, reqB := fmt.Sprintf("a%d", round), fmt.Sprintf("b%d", round)
		begin(t, s, reqA, fmt.Sprintf("puuid-a%d", round))
		begin(t, s, reqB, fmt.Sprintf("puuid-b%d", round))
		var ids []string
		for i := 0; i < 300; i++ {
			ids = append(ids, fmt.Sprintf("KR_%d_%d", round, i))
		}
		// B lists them in reverse order: lock order must not matter.
		rev := make([]string, len(ids))
		for i, id := range ids {
			rev[len(ids)-1-i] = id
		}
		var wg sync.WaitGroup
		res := make([]store.ClaimResult, 2)
		errs := make([]error, 2)
		wg.Add(2)
		go func() { defer wg.Done(); res[0], errs[0] = s.ClaimMatches(ctx, reqA, "puuid-a"+reqA[1:], ids) }()
		go func() { defer wg.Done(); res[1], errs[1] = s.ClaimMatches(ctx, reqB, "puuid-b"+reqB[1:], rev) }()
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("claims: %v, %v", errs[0], errs[1])
		}
		seen := map[string]int{}
		for _, r := range res {
			for _, id := range r.Publish {
				seen[id]++
			}
			if r.Total != len(ids) || r.Done != 0 || r.Completed {
				t.Errorf("claim result total %d done %d completed %v; want %d, 0, false", r.Total, r.Done, r.Completed, len(ids))
			}
		}
		for _, id := range ids {
			if seen[id] != 1 {
				t.Fatalf("round %d: %s published %d times, want exactly 1 (A %d ids, B %d ids)",
					round, id, seen[id], len(res[0].Publish), len(res[1].Publish))
			}
		}
		// A redelivered claim re-publishes exactly its own still-unfetched ids.
		again, err := s.ClaimMatches(ctx, reqA, "puuid-a"+reqA[1:], ids)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(again.Publish) != fmt.Sprint(res[0].Publish) {
			t.Errorf("redelivered claim published %d ids, first claim %d", len(again.Publish), len(res[0].Publish))
		}
	}
}

func TestSyncCompletes(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	// m1 was fully fetched by an earlier sync; m2, m3 are new.
	if _, err := s.PersistBatch(ctx, store.Batch{Ledger: []store.LedgerUpdate{
		lu("EUW1_1", "success", 1, 200), {MatchID: "EUW1_1", Kind: "timeline", Status: "success", Attempt: 1}}}); err != nil {
		t.Fatal(err)
	}
	begin(t, s, "req", "me")
	begin(t, s, "req", "me") // idempotent
	claim, err := s.ClaimMatches(ctx, "req", "me", []string{"EUW1_3", "EUW1_2", "EUW1_1", "EUW1_2"})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(claim.Publish) != "[EUW1_2 EUW1_3]" || claim.Total != 3 || claim.Done != 1 || claim.Completed {
		t.Fatalf("claim = %+v, want publish [EUW1_2 EUW1_3], total 3, done 1", claim)
	}
	st, err := s.AccountStatus(ctx, "me")
	if err != nil {
		t.Fatal(err)
	}
	if st.SyncStatus != "syncing" || st.SyncProgress != 1 || st.SyncTotal != 3 || st.SyncRequestID != "req" {
		t.Fatalf("account = %+v", st.Account)
	}

	step := func(ups []store.LedgerUpdate, want []store.SyncProgress) {
		t.Helper()
		res, err := s.PersistBatch(ctx, store.Batch{Ledger: ups})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(res.Progress) != fmt.Sprint(want) {
			t.Fatalf("progress = %+v, want %+v", res.Progress, want)
		}
	}
	// m2's match succeeded but its timeline is pending: not done yet.
	step([]store.LedgerUpdate{lu("EUW1_2", "success", 1, 200)}, nil)
	step([]store.LedgerUpdate{{MatchID: "EUW1_2", Kind: "timeline", Status: "success", Attempt: 1}},
		[]store.SyncProgress{{RequestID: "req", PUUID: "me", Progress: 2, Total: 3, Status: "syncing"}})
	// A temporary failure is not done; a permanent one is.
	step([]store.LedgerUpdate{lu("EUW1_3", "temporary_failure", 1, 503)}, nil)
	step([]store.LedgerUpdate{lu("EUW1_3", "permanently_unfetchable", 2, 404)},
		[]store.SyncProgress{{RequestID: "req", PUUID: "me", Progress: 3, Total: 3, Status: "completed"}})
	step([]store.LedgerUpdate{lu("EUW1_3", "permanently_unfetchable", 2, 404)}, nil) // replay

	st, err = s.AccountByRiotID(ctx, "faker", "kr1")
	if err != nil {
		t.Fatal(err)
	}
	if st.SyncStatus != "completed" || st.SyncProgress != 3 || st.LastSyncedAt.IsZero() {
		t.Errorf("account after sync = %+v", st.Account)
	}
	if st.Ledger["match/success"] != 2 || st.Ledger["match/permanently_unfetchable"] != 1 || st.Ledger["timeline/success"] != 2 {
		t.Errorf("ledger counts = %v", st.Ledger)
	}
	jobs, err := s.Jobs(ctx, store.JobFilter{PUUID: "me"})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].ID != "req" || jobs[0].Status != "completed" || jobs[0].FinishedAt.IsZero() {
		t.Errorf("jobs = %+v, want req completed", jobs)
	}

	// A sync whose matches are all done already completes in ClaimMatches.
	begin(t, s, "req2", "me")
	claim, err = s.ClaimMatches(ctx, "req2", "me", []string{"EUW1_1", "EUW1_3"})
	if err != nil {
		t.Fatal(err)
	}
	if !claim.Completed || len(claim.Publish) != 0 || claim.Done != 2 {
		t.Errorf("claim of done matches = %+v, want completed", claim)
	}
	if st, _ := s.AccountStatus(ctx, "me"); st.SyncStatus != "completed" || st.SyncRequestID != "req2" {
		t.Errorf("account = %+v", st.Account)
	}
	// Claims for a sync that was never begun are refused.
	if _, err := s.ClaimMatches(ctx, "nope", "me", []string{"EUW1_9"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("claim without BeginSync: err = %v, want ErrNotFound", err)
	}
}

func TestSweeperQueries(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	begin(t, s, "req", "me")
	if _, err := s.ClaimMatches(ctx, "req", "me", []string{"NA1_1", "NA1_2", "NA1_3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PersistBatch(ctx, store.Batch{Ledger: []store.LedgerUpdate{
		lu("NA1_1", "temporary_failure", 1, 503), lu("NA1_2", "success", 1, 200)}}); err != nil {
		t.Fatal(err)
	}
	due, err := s.DueRetries(ctx, time.Now().Add(time.Hour), 10)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range due {
		got[d.MatchID+"/"+d.Kind] = d.Status
	}
	// NA1_2 is stored but its timeline was never queued: due as an
	// unfetched timeline, so its sync cannot wait for ever.
	if len(due) != 3 || got["NA1_1/match"] != "temporary_failure" || got["NA1_3/match"] != "unfetched" ||
		got["NA1_2/timeline"] != "unfetched" {
		t.Errorf("due = %+v", due)
	}
	if due, _ := s.DueRetries(ctx, t0, 10); len(due) != 0 {
		t.Errorf("nothing is older than t0, got %+v", due)
	}

	stuck, err := s.StuckSyncs(ctx, time.Now(), time.Now().Add(time.Hour))
	if err != nil || len(stuck) != 1 || stuck[0].PUUID != "me" {
		t.Fatalf("stuck = %+v, %v", stuck, err)
	}
	if err := s.ResetSync(ctx, "me", "other"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("reset of another request: %v, want ErrNotFound", err)
	}

	res, err := s.MarkPermanent(ctx, "NA1_1", "match", "gave up", 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Progress) != 1 || res.Progress[0].Progress != 1 {
		t.Errorf("mark permanent progress = %+v", res.Progress)
	}
	fails, err := s.Failures(ctx, 10)
	if err != nil || len(fails) != 1 || fails[0].Status != "permanently_unfetchable" || fails[0].LastError != "gave up" ||
		fails[0].RetryCount != 2 {
		t.Errorf("failures = %+v, %v", fails, err)
	}
	counts, err := s.LedgerCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if counts["match/permanently_unfetchable"] != 1 || counts["match/success"] != 1 || counts["match/unfetched"] != 1 {
		t.Errorf("counts = %v", counts)
	}
	if err := s.ResetSync(ctx, "me", "req"); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.AccountStatus(ctx, "me"); st.SyncStatus != "pending" {
		t.Errorf("after reset status = %s", st.SyncStatus)
	}
	known, err := s.KnownMatchIDs(ctx, []string{"NA1_1", "NA1_9"})
	if err != nil || !known["NA1_1"] || known["NA1_9"] {
		t.Errorf("known = %v, %v", known, err)
	}
	if err := s.FailSync(ctx, "req", "me", "boom"); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.AccountStatus(ctx, "me"); st.SyncStatus != "failed" || st.SyncError != "boom" {
		t.Errorf("after fail: %+v", st.Account)
	}
}

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

// TestRewritePUUIDs: a key rotation rewrites an account's PUUID in every
// table at once and leaves other players alone.
func TestRewritePUUIDs(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	for _, p := range []string{"old-a", "other"} {
		if err := st.UpsertAccount(ctx, store.Account{PUUID: p, GameName: p, TagLine: "T", Active: true}); err != nil {
			t.Fatal(err)
		}
		if err := st.RecordJob(ctx, store.Job{ID: "j-" + p, Type: "sync", PUUID: p, Status: "completed"}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := st.RewritePUUIDs(ctx, map[string]string{"old-a": "new-a"})
	if err != nil {
		t.Fatal(err)
	}
	if n["accounts"] != 1 || n["jobs"] != 1 {
		t.Errorf("rewritten %v, want 1 account and 1 job", n)
	}
	if _, err := st.AccountStatus(ctx, "new-a"); err != nil {
		t.Errorf("account under the new PUUID: %v", err)
	}
	if _, err := st.AccountStatus(ctx, "old-a"); err == nil {
		t.Error("the old PUUID still has an account")
	}
	if _, err := st.AccountStatus(ctx, "other"); err != nil {
		t.Errorf("another player was touched: %v", err)
	}
	if _, err := st.RewritePUUIDs(ctx, map[string]string{"x": "y", "y": "z"}); err == nil {
		t.Error("a chained rewrite was accepted")
	}
}

// TestBeginSyncEndsTheJobItReplaces: a sync that takes over an account
// whose previous sync is still running (its lock lapsed) ends that job as
// failed with a reason naming the new request and reports it; the same
// request begun again replaces nothing, and a finished job is left alone.
func TestBeginSyncEndsTheJobItReplaces(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	begin(t, s, "first", "puuid-replaced")
	replaced, err := s.BeginSync(ctx, store.SyncStart{RequestID: "second", PUUID: "puuid-replaced", Platform: "KR", Region: "asia", Mode: "latest"})
	if err != nil {
		t.Fatal(err)
	}
	if replaced != "first" {
		t.Errorf("BeginSync(second) replaced %q, want first", replaced)
	}
	j, err := s.JobByID(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != "failed" || j.Error != "replaced by sync second of the same account" || j.FinishedAt.IsZero() {
		t.Errorf("replaced job: status %s, error %q, finished %v; want failed, the reason, a finish time", j.Status, j.Error, j.FinishedAt)
	}
	if again, err := s.BeginSync(ctx, store.SyncStart{RequestID: "second", PUUID: "puuid-replaced", Platform: "KR", Region: "asia"}); err != nil || again != "" {
		t.Errorf("the same sync begun again: replaced %q, %v; want nothing", again, err)
	}
	if _, err := s.ClaimMatches(ctx, "second", "puuid-replaced", nil); err != nil { // nothing to fetch: completed
		t.Fatal(err)
	}
	third, err := s.BeginSync(ctx, store.SyncStart{RequestID: "third", PUUID: "puuid-replaced", Platform: "KR", Region: "asia", ReplaceReason: "custom"})
	if err != nil || third != "" {
		t.Errorf("a sync after a completed one: replaced %q, %v; want nothing", third, err)
	}
	if j, _ := s.JobByID(ctx, "second"); j.Status != "completed" {
		t.Errorf("completed job became %s", j.Status)
	}
}

// TestBeginSyncRefusesARejectedRequest: a request whose job was rejected
// while it waited (it expired in its stream) never begins, even when its
// command is handed on afterwards.
func TestBeginSyncRefusesARejectedRequest(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	if ended, err := s.EndWaitingJob(ctx, store.Job{ID: "expired-req", Type: "sync", Status: "rejected", Error: "expired: waited"}); err != nil || !ended {
		t.Fatalf("EndWaitingJob: %v %v", ended, err)
	}
	_, err := s.BeginSync(ctx, store.SyncStart{RequestID: "expired-req", PUUID: "puuid-expired", Platform: "KR", Region: "asia"})
	if !errors.Is(err, store.ErrRequestEnded) {
		t.Fatalf("BeginSync of a rejected request: %v, want ErrRequestEnded", err)
	}
	if j, _ := s.JobByID(ctx, "expired-req"); j.Status != "rejected" {
		t.Errorf("job became %s", j.Status)
	}
	// A request abandoned by the sweeper (its job failed, a recovery sync
	// resumed it and completed) whose command is delivered again does not
	// take the account back: that left it pending with no command to run
	// it (the Riot-fault chaos case, 2026-11-27).
	begin(t, s, "abandoned-req", "puuid-abandoned")
	if err := s.RecordJob(ctx, store.Job{ID: "abandoned-req", Type: "sync", Status: "failed", Error: "abandoned"}); err != nil {
		t.Fatal(err)
	}
	begin(t, s, "recover-abandoned-req", "puuid-abandoned")
	if _, err := s.ClaimMatches(ctx, "recover-abandoned-req", "puuid-abandoned", nil); err != nil { // nothing to fetch: completed
		t.Fatal(err)
	}
	for _, id := range []string{"abandoned-req", "recover-abandoned-req"} {
		if _, err := s.BeginSync(ctx, store.SyncStart{RequestID: id, PUUID: "puuid-abandoned", Platform: "KR", Region: "asia"}); !errors.Is(err, store.ErrRequestEnded) {
			t.Errorf("BeginSync of ended request %s again: %v, want ErrRequestEnded", id, err)
		}
	}
	if a, err := s.AccountStatus(ctx, "puuid-abandoned"); err != nil || a.SyncStatus != "completed" || a.SyncRequestID != "recover-abandoned-req" {
		t.Errorf("account after the ended requests came again: %+v %v, want completed by recover-abandoned-req", a, err)
	}
	// EndWaitingJob ends a pending job, never a started one.
	if err := s.RecordJob(ctx, store.Job{ID: "queued", Type: "sync", Status: "pending"}); err != nil {
		t.Fatal(err)
	}
	if ended, err := s.EndWaitingJob(ctx, store.Job{ID: "queued", Type: "sync", Status: "rejected", Error: "expired"}); err != nil || !ended {
		t.Errorf("pending job: ended %v %v, want true", ended, err)
	}
	begin(t, s, "started", "puuid-started")
	if ended, err := s.EndWaitingJob(ctx, store.Job{ID: "started", Type: "sync", Status: "rejected", Error: "expired"}); err != nil || ended {
		t.Errorf("running job: ended %v %v, want false", ended, err)
	}
	if j, _ := s.JobByID(ctx, "started"); j.Status != "running" {
		t.Errorf("running job became %s", j.Status)
	}
}
