package persister_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/natstest"
	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/services/persister"
	"github.com/riftflow/riftflow/streams"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// env is a persister on a fresh database and an embedded JetStream with the
// declared streams.
type env struct {
	t     *testing.T
	js    jetstream.JetStream
	dbURL string
	st    *store.Store
	admin *pgx.Conn // a connection of the test's own, for injecting faults
	dead  jetstream.Stream
	subj  bus.Subjects
}

func newEnv(t *testing.T, urlParams string) *env {
	t.Helper()
	_, _, js := natstest.JetStream(t)
	set, err := streams.Load(streams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Apply(t.Context(), js, set, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	dbURL := pgtest.NewDatabase(t)
	sep := "?"
	if strings.Contains(dbURL, "?") {
		sep = "&"
	}
	st, err := store.Open(t.Context(), dbURL+sep+urlParams)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	admin, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	dead, err := js.Stream(t.Context(), streams.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, js: js, dbURL: dbURL, st: st, admin: admin, dead: dead}
}

// run starts the persister on the FETCHED consumer until the test ends.
func (e *env) run() {
	e.t.Helper()
	cons, err := e.js.Consumer(e.t.Context(), streams.StreamFetched, streams.ConsumerPersister)
	if err != nil {
		e.t.Fatal(err)
	}
	kv, err := e.js.KeyValue(e.t.Context(), streams.BucketSyncLocks)
	if err != nil {
		e.t.Fatal(err)
	}
	svc, err := persister.New(persister.Config{MaxWait: 50 * time.Millisecond}, persister.Deps{JS: e.js, Consumer: cons, Store: e.st,
		Locks: natsx.Lock{KV: kv, JS: e.js, Bucket: streams.BucketSyncLocks}, Dead: &natsx.DeadLetter{JS: e.js, Prefix: e.subj.Dead()},
		Base: app.Base{Subjects: e.subj, Logger: slog.New(slog.NewTextHandler(testWriter{e.t}, nil))}})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("persister: %v", err)
		}
	})
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

// publishMatch publishes a successful FetchResult for a copy of the recorded
// match under matchID, after edit changes its decoded JSON.
func (e *env) publishMatch(doc map[string]any, matchID string, edit func(map[string]any)) {
	e.t.Helper()
	raw, _ := json.Marshal(doc)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	m["metadata"].(map[string]any)["matchId"] = matchID
	if edit != nil {
		edit(m)
	}
	raw, _ = json.Marshal(m)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(raw)
	zw.Close()
	r := bus.FetchResult{MatchID: matchID, Kind: bus.KindMatch, Region: "asia", Outcome: bus.Success, Attempt: 1,
		Status: 200, Payload: gz.Bytes(), AttemptedAt: time.Now()}
	if _, err := natsx.Publish(e.t.Context(), e.js, e.subj.Fetched("asia"), r, jetstream.WithMsgID(matchID)); err != nil {
		e.t.Fatal(err)
	}
}

// consumerInfo is the persister consumer's state.
func (e *env) consumerInfo() *jetstream.ConsumerInfo {
	e.t.Helper()
	c, err := e.js.Consumer(e.t.Context(), streams.StreamFetched, streams.ConsumerPersister)
	if err != nil {
		e.t.Fatal(err)
	}
	ci, err := c.Info(e.t.Context())
	if err != nil {
		e.t.Fatal(err)
	}
	return ci
}

// redeliveries is how many deliveries of the persister's consumer were
// redeliveries (its consumer sequence runs ahead of the stream sequence).
func (e *env) redeliveries() int {
	ci := e.consumerInfo()
	return int(ci.Delivered.Consumer) - int(ci.Delivered.Stream)
}

// delivered is the last stream sequence the persister's consumer delivered.
func (e *env) delivered() int { return int(e.consumerInfo().Delivered.Stream) }

func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.admin.QueryRow(e.t.Context(), sql, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// waitFor polls cond (a hang guard, not a timing assertion).
func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.t.Fatalf("gave up waiting for %s", what)
}

// terminateOthers closes every other session of the test database, so the
// store's pool reconnects and picks up database-level settings.
func (e *env) terminateOthers() {
	e.t.Helper()
	if _, err := e.admin.Exec(e.t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`); err != nil {
		e.t.Fatal(err)
	}
}

// Transient Postgres errors (a lock held past lock_timeout, SQLSTATE 55P03;
// a read-only database, 25006) never mark a match unfetchable: every match
// is stored once the database is writable again, and nothing is
// dead-lettered. The old persister treated both as poison and lost the
// matches.
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
	e.waitFor("the poison dead-lettered", func() bool {
		info, err := e.dead.Info(t.Context())
		return err == nil && info.State.Msgs == 1
	})
	m, err := e.dead.GetMsg(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get(natsx.DeadKindHeader) != "invalid" || !strings.Contains(m.Header.Get(natsx.DeadReasonHeader), "invalid fetch result") ||
		m.Header.Get(natsx.DeadSubjectHeader) != e.subj.Fetched("asia") {
		t.Errorf("dead letter headers %v", m.Header)
	}
	if string(m.Data) != `{"match_id": 7}` {
		t.Errorf("dead letter payload %q is not the original message", m.Data)
	}
}

// testWriter sends the persister's logs to the test log (shown with -v or on
// failure).
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
