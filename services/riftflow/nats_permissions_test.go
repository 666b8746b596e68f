package riftflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/internal/testenv"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/connect"
	"github.com/riftflow/riftflow/pkg/riotclient"
	"github.com/riftflow/riftflow/pkg/telemetry"
	"github.com/riftflow/riftflow/services/riftflow/api"
	"github.com/riftflow/riftflow/services/riftflow/stack"
	"github.com/riftflow/riftflow/services/riftflow/stack/stacktest"
	"github.com/riftflow/riftflow/streams"
)

// connectAs connects to the NATS server at url as user, with user's inbox
// prefix, until the test ends; the server's asynchronous errors (a
// permissions violation) arrive on the channel.
func connectAs(t *testing.T, url, user, password string) (*nats.Conn, <-chan error, error) {
	errs := make(chan error, 16)
	nc, err := nats.Connect(url, nats.UserInfo(user, password), nats.CustomInboxPrefix(bus.InboxPrefix(user)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	if err == nil {
		t.Cleanup(nc.Close)
	}
	return nc, errs, err
}

// refusedWithin fails the test unless the server answers what nc just
// sent with a permissions violation on errs within d.
func refusedWithin(t *testing.T, what string, errs <-chan error, nc *nats.Conn, d time.Duration) {
	t.Helper()
	nc.Flush()
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(err.Error(), "Permissions Violation") {
			t.Errorf("%s: %v, want a permissions violation", what, err)
		}
	case <-time.After(d):
		t.Errorf("%s: the server did not refuse it", what)
	}
}

// TestNATSPermissions runs the stack as `riftflow up` does: an embedded
// NATS server on a TCP port with one user per service (streams.Grants),
// each service on its own connection as its user, the API on the CLI user
// with a token from localToken. A sync through the HTTP API completes
// (every service works under its user, the API's event stream under the
// CLI user); the admin routes work as the API's user, except a dead-letter
// replay, which is a clear 403 (only `riftflow retry --dead` as the admin
// may); forged publishes by the wrong users are refused by the server and
// never stored; and no log line of the run holds the Riot key, the
// Postgres password, a NATS password or the API token (S3, S5).
func TestNATSPermissions(t *testing.T) {
	testenv.SkipShort(t, "the whole stack under per-service NATS users")
	for k, v := range stacktest.FastEnv {
		t.Setenv(k, v)
	}
	dir := t.TempDir()
	t.Setenv("RIFTFLOW_DATA_DIR", dir)
	t.Setenv("NATS_URL", "")
	t.Setenv("RIOT_API_KEY", "")
	t.Setenv("SCHEDULE_ENABLE", "false")
	dbURL, dbPassword := passwordDatabase(t)
	t.Setenv("DATABASE_URL", dbURL)
	env, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(env.Postgres.URL.Reveal(), dbPassword) {
		t.Fatalf("DATABASE_URL %q has no password", env.Postgres.URL.Reveal())
	}
	logs := &stagetest.Logs{}
	log := telemetry.NewLogger(logs, slog.LevelDebug, "json")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := stack.Start(ctx, stack.Options{DataDir: dir, Env: env, NATSPort: stagetest.FreePort(t), MemoryStreams: true, Log: log,
		Sim: sim.Options{FixturesDir: sim.FindFixtures(), Synthetic: sim.Synthetic{Players: 1, MatchesPerPlayer: 8},
			// Errors on purpose, so error paths log.
			Faults: sim.Faults{Seed: 5, Error5xx: 0.1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()

	token, err := localToken(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	stacktest.NewAPI(st.Infra).Mount(st.Infra.Ops)
	base := serveLoopback(t, api.NewServer(ctx, st.Infra.Ops.Handler(), log, api.DefaultTimeouts))

	// Local tools' files hold credentials: owner-only.
	for _, f := range []string{"nats.url", "nats-admin.url", "api.token"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v; want 0600", f, err, fi.Mode().Perm())
		}
	}

	// A sync through the API, followed to the end over SSE.
	player := sim.SyntheticPUUID("na1", 1)
	c := call(t, http.MethodPost, base+"/v1/sync", token, fmt.Sprintf(`{"puuid":%q,"platform":"na1","mode":"full","lookback_days":30}`, player))
	if c.Code != http.StatusAccepted {
		t.Fatalf("POST /v1/sync: %d %s", c.Code, c.Body)
	}
	var accepted struct {
		RequestID string `json:"request_id"`
	}
	json.Unmarshal(c.Body, &accepted)
	var last bus.ProgressEvent
	if events := sseEvents(t, base+"/v1/sync/"+accepted.RequestID+"/events", token, 2*time.Minute); len(events) > 0 {
		json.Unmarshal([]byte(events[len(events)-1][1]), &last)
	}
	if last.Status != "completed" || last.Total == 0 || last.Progress != last.Total {
		t.Fatalf("the sync under per-service users ended %+v, want completed", last)
	}
	s, err := st.Infra.Store.AccountStatus(ctx, player)
	if err != nil || s.Matches == 0 {
		t.Fatalf("nothing stored: %+v %v", s, err)
	}

	// The CLI's commands against this `up`, through .data/: ingest and
	// status --ratelimit as the CLI user, retry --dead as the admin.
	for _, args := range [][]string{
		{"ingest", "--puuid", player, "--platform", "na1", "--mode", "latest", "--wait", "--timeout", "1m"},
		{"status", "--ratelimit"},
		{"retry", "--dead"},
	} {
		var cout bytes.Buffer
		if code := Main(args, &cout, &cout); code != 0 {
			t.Errorf("riftflow %s: exit %d: %s", strings.Join(args, " "), code, cout.String())
		}
		if bytes.Contains(cout.Bytes(), []byte("Violation")) {
			t.Errorf("riftflow %s was refused: %s", args[0], cout.String())
		}
	}

	// The API's admin routes run as the API's NATS user (riftflow), as in
	// Kubernetes: the pause switch, a ledger retry and forgetting a player
	// pass its permissions; a dead-letter replay, which republishes other
	// services' messages, is refused with 403 before anything is tried.
	for _, paused := range []string{"true", "false"} {
		if c := call(t, http.MethodPut, base+"/v1/admin/pause", token, `{"paused":`+paused+`,"reason":"permissions test"}`); c.Code != http.StatusOK {
			t.Errorf("PUT /v1/admin/pause %s as the API user: %d %s", paused, c.Code, c.Body)
		}
		if c := call(t, http.MethodGet, base+"/v1/admin/pause", token, ""); c.Code != http.StatusOK || !bytes.Contains(c.Body, []byte(`"paused":`+paused)) {
			t.Errorf("GET /v1/admin/pause: %d %s, want paused %s", c.Code, c.Body, paused)
		}
	}
	if c := call(t, http.MethodPost, base+"/v1/admin/retry", token, `{"all":true}`); c.Code != http.StatusOK {
		t.Errorf("POST /v1/admin/retry all as the API user: %d %s", c.Code, c.Body)
	}
	if c := call(t, http.MethodPost, base+"/v1/admin/retry", token, `{"dead":true}`); c.Code != http.StatusForbidden ||
		!bytes.Contains(c.Body, []byte("riftflow retry --dead")) {
		t.Errorf("POST /v1/admin/retry dead as the API user: %d %s, want 403 naming `riftflow retry --dead`", c.Code, c.Body)
	}
	// The admin CLI commands, as the admin user of .data/nats-admin.url.
	for _, args := range [][]string{{"pause", "--reason", "permissions test"}, {"pause", "--off"}} {
		var cout bytes.Buffer
		if code := Main(args, &cout, &cout); code != 0 {
			t.Errorf("riftflow %s: exit %d: %s", strings.Join(args, " "), code, cout.String())
		}
	}
	// Forgetting the player purges its cursor (the lister wrote one) as
	// the API user; the player is gone afterwards.
	if c := call(t, http.MethodDelete, base+"/v1/admin/accounts/"+player, token, ""); c.Code != http.StatusOK ||
		!bytes.Contains(c.Body, []byte(streams.BucketCursors)) {
		t.Errorf("DELETE /v1/admin/accounts/… as the API user: %d %s, want 200 purging %s", c.Code, c.Body, streams.BucketCursors)
	}
	if c := call(t, http.MethodGet, base+"/v1/players/"+player, token, ""); c.Code != http.StatusNotFound {
		t.Errorf("GET /v1/players/… after forget: %d, want 404", c.Code)
	}

	// Forgeries, each over TCP as a real client would.
	connectAs := func(user string) (*nats.Conn, <-chan error) {
		t.Helper()
		nc, errs, err := connectAs(t, st.NATSURL, user, st.NATSConfig(user).Password.Reveal())
		if err != nil {
			t.Fatalf("connect as %s: %v", user, err)
		}
		return nc, errs
	}
	refused := func(what string, errs <-chan error, nc *nats.Conn) { refusedWithin(t, what, errs, nc, 5*time.Second) }
	admin, _ := connectAs(streams.UserAdmin)
	fetched := func() uint64 {
		m, err := admin.Request("$JS.API.STREAM.INFO."+streams.StreamFetched, nil, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var info struct {
			State struct {
				LastSeq uint64 `json:"last_seq"`
			} `json:"state"`
		}
		json.Unmarshal(m.Data, &info)
		return info.State.LastSeq
	}
	before := fetched()
	forged, _ := json.Marshal(bus.FetchResult{MatchID: "NA1_1", Kind: bus.KindMatch, Outcome: bus.Success, Region: "americas"})

	resolver, rerrs := connectAs(streams.UserResolver)
	resolver.Publish(st.Infra.Subjects.Fetched("americas"), forged)
	refused("the resolver publishing a FetchResult on "+st.Infra.Subjects.Fetched("americas"), rerrs, resolver)
	resolver.Publish("$JS.API.STREAM.CREATE.EVIL", []byte(`{"name":"EVIL","subjects":["lol.>"]}`))
	refused("the resolver creating a stream", rerrs, resolver)

	persister, perrs := connectAs(streams.UserPersister)
	keyRejected := "$KV." + streams.BucketRateLimit + "." + riotclient.KeyID(st.Infra.Env.Riot.APIKey.Reveal()) + ".rejected"
	persister.Publish(keyRejected, []byte("403"))
	refused("the persister forging a rate-limit key rejection", perrs, persister)

	cli, cerrs := connectAs(streams.UserCLI)
	cli.Publish(st.Infra.Subjects.Failed("europe"), forged)
	refused("the CLI user publishing a fetch failure", cerrs, cli)
	if _, err := cli.SubscribeSync("_INBOX_" + streams.UserMatchFetcher + ".>"); err == nil {
		refused("the CLI user reading the fetcher's inbox", cerrs, cli)
	}
	if after := fetched(); after != before {
		t.Errorf("FETCHED went from sequence %d to %d: a forged result was stored", before, after)
	}
	// Without credentials nobody gets in over TCP.
	if nc, err := nats.Connect(st.NATSURL); err == nil {
		nc.Close()
		t.Error("an anonymous client connected")
	}

	// A wrong user is also refused through the JetStream API the services
	// use: the persister cannot put to the rate-limit bucket.
	cfg := st.NATSConfig(streams.UserPersister)
	cfg.URL = st.NATSURL
	pnc, pjs, err := connect.NATS(ctx, cfg, nil, "forger", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer pnc.Close()
	if kv, err := pjs.KeyValue(ctx, streams.BucketRateLimit); err == nil {
		pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
		if _, err := kv.Put(pctx, riotclient.KeyID(st.Infra.Env.Riot.APIKey.Reveal())+".rejected", []byte("403")); err == nil {
			t.Error("the persister's KV put of a key rejection succeeded")
		}
		pcancel()
	}

	cancel()
	select {
	case <-done:
	case <-time.After(45 * time.Second):
		t.Error("services did not drain")
	}

	// No secret in any log line of the run.
	out := []byte(logs.String())
	if !bytes.Contains(out, []byte(`"msg":"nats connected"`)) || !bytes.Contains(out, []byte("http request")) {
		t.Fatalf("the run's logs lack what it must have logged (%d bytes)", len(out))
	}
	// The services never hit their own permissions.
	for i, l := range bytes.Split(out, []byte("\n")) {
		if bytes.Contains(l, []byte("Permissions Violation")) || bytes.Contains(l, []byte("Authorization Violation")) {
			t.Errorf("a service was refused (log line %d): %s", i+1, l)
		}
	}
	secrets := map[string]string{"Riot API key (the simulator's)": strings.TrimPrefix(st.Infra.Env.Riot.APIKey.Reveal(), "RGAPI-"),
		"Postgres password": dbPassword, "API token": token}
	for _, g := range streams.Grants {
		secrets["NATS password of "+g.User] = st.NATSConfig(g.User).Password.Reveal()
	}
	lines := noSecretInLines(t, logs.String(), secrets)
	t.Logf("%d log lines, %d bytes scanned for %d secrets", lines, len(out), len(secrets))
}
