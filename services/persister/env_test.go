package persister_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/natstest"
	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/services/persister"
	"github.com/riftflow/riftflow/streams"
)

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
	stagetest.Declare(t, js, streams.Options{}, slog.New(slog.DiscardHandler))
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
		Base: app.Base{Subjects: e.subj, Logger: slog.New(slog.NewTextHandler(stagetest.Writer(e.t), nil))}})
	if err != nil {
		e.t.Fatal(err)
	}
	(&stagetest.Env{T: e.t}).Run(svc)
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

// firstDeadLetter waits until the DEAD stream holds exactly one message
// (what names it) and returns it.
func (e *env) firstDeadLetter(what string) *jetstream.RawStreamMsg {
	e.t.Helper()
	e.waitFor(what, func() bool {
		info, err := e.dead.Info(e.t.Context())
		return err == nil && info.State.Msgs == 1
	})
	m, err := e.dead.GetMsg(e.t.Context(), 1)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
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

// count runs sql (one row, one integer column) on the test's own
// connection (pgtest.Count).
func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	return pgtest.Count(e.t, e.admin, sql, args...)
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
