package persister_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riftflow/riftflow/internal/natsembed"
	"github.com/riftflow/riftflow/internal/natstest"
	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/internal/testenv"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/connect"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/telemetry"
	"github.com/riftflow/riftflow/streams"
)

// binaryPkg is the persister's binary, as its image runs it.
const binaryPkg = "github.com/riftflow/riftflow/services/persister/cmd/persister"

// TestServiceBinaryReadyAndDrains builds the persister binary and runs it
// as a pod would: against a NATS server on a TCP port and a test
// database, with HTTP_ADDR and SHUTDOWN_TIMEOUT. /healthz and /readyz
// answer 200 once it is up; a fetch result published to it is stored; on
// SIGTERM it drains and exits 0, leaving no message unacknowledged.
func TestServiceBinaryReadyAndDrains(t *testing.T) {
	testenv.SkipShort(t, "builds a binary")
	bin := filepath.Join(t.TempDir(), "persister")
	build := exec.Command("go", "build", "-o", bin, binaryPkg)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	srv, err := natsembed.StartServer(natsembed.Options{Name: "ops-test", StoreDir: t.TempDir(), Host: "127.0.0.1", Port: 0, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	set, err := streams.Load(streams.Options{MemoryStorage: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	nc, js, err := connect.NATS(ctx, config.NATS{URL: srv.ClientURL()}, nil, "ops-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := streams.Apply(ctx, js, set, nil); err != nil {
		t.Fatal(err)
	}
	dbURL := pgtest.NewDatabase(t)

	addr := "127.0.0.1:" + strconv.Itoa(stagetest.FreePort(t))

	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "NATS_URL="+srv.ClientURL(), "DATABASE_URL="+dbURL, "HTTP_ADDR="+addr,
		"SHUTDOWN_TIMEOUT=20s", "PERSIST_MAX_WAIT=50ms", "OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_TRACES_EXPORTER=none",
		"LOG_FORMAT=json", "RIOT_API_KEY=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	// Ready: poll /readyz until 200 (the process needs a moment to bind).
	base := "http://" + addr
	var ready telemetry.ReadyStatus
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			code := resp.StatusCode
			_ = json.NewDecoder(resp.Body).Decode(&ready)
			resp.Body.Close()
			if code == http.StatusOK {
				break
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("persister exited before ready: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never answered 200 (last %+v)\n%s", ready, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, path := range []string{"/healthz", "/metrics"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s = %d", path, resp.StatusCode)
		}
	}

	// One fetch result: a temporary failure recorded in the ledger.
	subj := bus.Subjects{}
	const matchID = "NA1_4242424242"
	res := bus.FetchResult{MatchID: matchID, Kind: bus.KindMatch, Region: "americas", Outcome: bus.TemporaryFailure,
		Attempt: 1, Status: 503, Error: "service unavailable", AttemptedAt: time.Now().UTC()}
	if _, err := natsx.Publish(ctx, js, subj.Failed("americas"), res); err != nil {
		t.Fatal(err)
	}
	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	status := ""
	for status == "" {
		_ = db.QueryRow(ctx, `SELECT status FROM match_fetches WHERE match_id = $1 AND kind = 'match'`, matchID).Scan(&status)
		if status == "" {
			if time.Now().After(deadline.Add(30 * time.Second)) {
				t.Fatalf("fetch result never stored\n%s", stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if status != string(bus.TemporaryFailure) {
		t.Errorf("ledger status = %q", status)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("persister exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(40 * time.Second):
		t.Fatalf("persister still running 40s after SIGTERM (SHUTDOWN_TIMEOUT=20s)\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "shutting down: draining consumers") {
		t.Errorf("no drain log line:\n%s", stderr.String())
	}
	if n := natstest.Remaining(t, js, streams.StreamFetched, streams.ConsumerPersister); n != 0 {
		t.Errorf("after drain: %d messages pending or unacknowledged, want 0", n)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("ops server still answering after exit")
	}
}
