package persister_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/pkg/natsx"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Transient Postgres errors (a lock held past lock_timeout, SQLSTATE 55P03;
// a read-only database, 25006) never mark a match unfetchable: every match
// is stored once the database is writable again, and nothing is
// dead-lettered: neither is poison.
func TestTransientPostgresErrorsLoseNothing(t *testing.T) {
	e := newEnv(t, "lock_timeout=200ms")
	doc := recorded(t)
	e.run()

	// A maintenance lock on matches: every write waits out lock_timeout.
	tx, err := e.admin.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), `LOCK TABLE matches IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	const n = 10
	for i := range n {
		e.publishMatch(doc, fmt.Sprintf("JP1_%d", 9000000000+i), nil)
	}
	// Hold the lock until every message has failed on it at least once.
	e.waitFor("lock timeouts", func() bool { return e.redeliveries() >= n })
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the first matches stored", func() bool { return e.count(`SELECT count(*) FROM matches`) == n })

	// A read-only database (a failover to a standby, or maintenance).
	var db string
	_ = e.admin.QueryRow(t.Context(), `SELECT current_database()`).Scan(&db)
	if _, err := e.admin.Exec(t.Context(), `ALTER DATABASE `+pgx.Identifier{db}.Sanitize()+` SET default_transaction_read_only = on`); err != nil {
		t.Fatal(err)
	}
	e.terminateOthers()
	for i := n; i < 2*n; i++ {
		e.publishMatch(doc, fmt.Sprintf("JP1_%d", 9000000000+i), nil)
	}
	// New sessions cannot even create their staging tables: the persister's
	// probe fails and it pauses, so the other messages are not even
	// delivered. Keep the database read-only past the first failure.
	e.waitFor("a read-only failure", func() bool { return e.delivered() > n })
	time.Sleep(2 * time.Second) // the fault lasts a little longer (not an assertion)
	if got := e.count(`SELECT count(*) FROM matches`); got != n {
		t.Fatalf("%d matches stored in a read-only database, want %d", got, n)
	}
	if _, err := e.admin.Exec(t.Context(), `ALTER DATABASE `+pgx.Identifier{db}.Sanitize()+` RESET default_transaction_read_only`); err != nil {
		t.Fatal(err)
	}
	e.terminateOthers()

	e.waitFor("every match stored", func() bool { return e.count(`SELECT count(*) FROM matches`) == 2*n })
	if u := e.count(`SELECT count(*) FROM match_fetches WHERE status <> 'success'`); u != 0 {
		t.Errorf("%d ledger rows not success after transient errors, want 0", u)
	}
	if s := e.count(`SELECT count(*) FROM match_fetches WHERE status = 'success' AND kind = 'match'`); s != 2*n {
		t.Errorf("%d match ledger rows success, want %d", s, 2*n)
	}
	if info, _ := e.dead.Info(t.Context()); info.State.Msgs != 0 {
		t.Errorf("%d messages dead-lettered, want 0", info.State.Msgs)
	}
}

// A NUL byte in a Riot ID (text Postgres cannot hold, SQLSTATE 22021) is
// stripped and the match stored; a payload from Riot that is not a MatchDto
// is recorded as permanently unfetchable; a message that is not a
// FetchResult at all is dead-lettered with its payload and reason.
func TestBadRowsRepairedOrIsolated(t *testing.T) {
	e := newEnv(t, "")
	doc := recorded(t)
	e.run()
	e.publishMatch(doc, "JP1_9100000001", func(m map[string]any) {
		p := m["info"].(map[string]any)["participants"].([]any)[0].(map[string]any)
		p["riotIdGameName"] = "nul\x00name"
	})
	e.publishMatch(doc, "JP1_9100000002", nil)
	// Not a MatchDto: info is a string.
	e.publishMatch(doc, "JP1_9100000003", func(m map[string]any) { m["info"] = "garbage" })

	e.waitFor("two matches stored", func() bool { return e.count(`SELECT count(*) FROM matches`) == 2 })
	e.waitFor("the poison recorded", func() bool {
		return e.count(`SELECT count(*) FROM match_fetches WHERE match_id = 'JP1_9100000003' AND status = 'permanently_unfetchable'`) == 1
	})
	if n := e.count(`SELECT count(*) FROM match_participants WHERE riot_id_game_name = 'nulname'`); n != 1 {
		t.Errorf("%d participants with the NUL stripped, want 1", n)
	}
	if _, err := e.js.Publish(t.Context(), e.subj.Fetched("asia"), []byte(`{"match_id": 7}`)); err != nil {
		t.Fatal(err)
	}
	m := e.firstDeadLetter("the poison dead-lettered")
	if m.Header.Get(natsx.DeadKindHeader) != "invalid" || !strings.Contains(m.Header.Get(natsx.DeadReasonHeader), "invalid fetch result") ||
		m.Header.Get(natsx.DeadSubjectHeader) != e.subj.Fetched("asia") {
		t.Errorf("dead letter headers %v", m.Header)
	}
	if string(m.Data) != `{"match_id": 7}` {
		t.Errorf("dead letter payload %q is not the original message", m.Data)
	}
}

// recorded is a recorded MatchDto from pkg/riot's test data.
func recorded(t *testing.T) map[string]any {
	t.Helper()
	raw, err := os.ReadFile("../../pkg/riot/testdata/match_JP1_456819992.json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}
