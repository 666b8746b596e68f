package riftflow

// Secrets: no log line of `riftflow up` and the CLI, run as processes as a
// user runs them, holds a secret (TestUpRunLogsNoSecret). e2e's
// TestSecretsNeverLeak searches every output of the five services run as
// OS processes (logs, spans, /metrics, the simulator's requests, the
// database, the JetStream store) for the Riot API key and the Postgres
// password.
//
// NATS credentials and TLS through configuration are covered by
// pkg/natsx TestConnectUserPassword and TestConnectTLS (NATS_USER,
// NATS_PASSWORD, NATS_TOKEN, NATS_NKEY_SEED_FILE, NATS_CREDS_FILE,
// NATS_TLS_CA/CERT/KEY in pkg/config); Postgres credentials come only from
// DATABASE_URL (pkg/config.Postgres has no other source).

import (
	"bufio"
	"bytes"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/internal/testenv"
	"github.com/riftflow/riftflow/services/riftflow/stack/stacktest"
)

// passwordDatabase is a fresh database and a URL to it with a password in
// it (the test server lets anyone in), for tests that look for the
// password where it must not be.
func passwordDatabase(t *testing.T) (dbURL, password string) {
	t.Helper()
	password = "pg-s3cret-" + randHex(8)
	dbURL = strings.Replace(pgtest.NewDatabase(t), "postgres://postgres@", "postgres://postgres:"+password+"@", 1)
	if !strings.Contains(dbURL, password) {
		t.Fatalf("no password in %s", dbURL)
	}
	return dbURL, password
}

// noSecretInLines fails the test for each line of logs that holds one of
// secrets (what it is → the secret, each long enough that a match means
// something), and returns the number of lines.
func noSecretInLines(t *testing.T, logs string, secrets map[string]string) int {
	t.Helper()
	lines := strings.Split(logs, "\n")
	for what, secret := range secrets {
		if len(secret) < 8 {
			t.Fatalf("%s %q is too short to scan for", what, secret)
		}
		for i, l := range lines {
			if strings.Contains(l, secret) {
				t.Errorf("%s in log line %d: %s", what, i+1, l)
			}
		}
	}
	return len(lines)
}

// TestUpRunLogsNoSecret runs a full `riftflow up` as a process, as a user
// does: the binary, a DATABASE_URL with a password, the Riot key of a
// `riftflow sim` process, debug JSON logs. While it runs, the CLI ingests
// the demo player (as the CLI user of .data/nats.url) and replays dead
// letters (as the admin of .data/nats-admin.url), and the API is called
// with the printed token, with a wrong token and without one. Then `up` is
// interrupted and drains. No line `up` or the CLI wrote to stderr (their
// logs) holds the Riot key, the Postgres password, a NATS password or the
// API token (S5; issue 15's "no secret in any log line of a full `riftflow
// up` run"). The token is printed once on stdout, by design.
func TestUpRunLogsNoSecret(t *testing.T) {
	testenv.SkipShort(t, "builds the binary and runs `riftflow up` as a process")
	bin := filepath.Join(t.TempDir(), "riftflow")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/riftflow").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	dbURL, dbPassword := passwordDatabase(t)
	riotKey := "RGAPI-uptest-" + randHex(8)

	// The Riot API: `riftflow sim` with a key we know.
	simAddr := freeAddr(t)
	sim := exec.Command(bin, "sim", "--addr", simAddr, "--key", riotKey)
	sim.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	sim.Dir = filepath.Join("..", "..") // the recorded responses
	var simOut stagetest.Logs
	sim.Stdout, sim.Stderr = &simOut, &simOut
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Process.Kill(); sim.Wait() })
	stacktest.WaitFor(t, "riftflow sim", 30*time.Second, func() bool {
		resp, err := http.Get("http://" + simAddr + "/sim/players")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})

	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "RIFTFLOW_DATA_DIR=" + dir,
		"DATABASE_URL=" + dbURL, "RIOT_API_KEY=" + riotKey, "RIOT_API_BASE_URL=http://" + simAddr + "/{route}",
		"LOG_FORMAT=json", "SCHEDULE_ENABLE=false", "OTEL_TRACES_EXPORTER=none"}
	for k, v := range stacktest.FastEnv {
		env = append(env, k+"="+v)
	}
	httpAddr := freeAddr(t)
	up := exec.Command(bin, "up", "--http-addr", httpAddr)
	up.Env = env
	var upErr stagetest.Logs
	up.Stderr = &upErr
	stdout, err := up.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{}) // closed when up has exited, with upExit
	var upExit error
	go func() { upExit = up.Wait(); close(exited) }()
	t.Cleanup(func() {
		up.Process.Kill()
		<-exited
	})
	// The token is the line after "API token for …".
	tokens := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		next := false
		for sc.Scan() {
			if next {
				tokens <- strings.TrimSpace(sc.Text())
				next = false
			}
			next = next || strings.HasPrefix(sc.Text(), "API token for")
		}
	}()
	var token string
	select {
	case token = <-tokens:
	case <-exited:
		t.Fatalf("riftflow up exited: %v\n%s", upExit, upErr.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("riftflow up printed no token:\n%s", upErr.String())
	}
	if !strings.HasPrefix(token, "rft_") {
		t.Fatalf("riftflow up printed %q as its token", token)
	}

	// The CLI against this `up`.
	var cliErr bytes.Buffer
	for _, args := range [][]string{
		{"ingest", "--riot-id", "LugnutsK#000", "--platform", "na1", "--mode", "full", "--wait", "--timeout", "2m"},
		{"retry", "--dead"},
		{"status", "--ratelimit"},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &cliErr
		if err := cmd.Run(); err != nil {
			t.Errorf("riftflow %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), cliErr.String())
		}
		if args[0] == "ingest" && !strings.Contains(out.String(), "completed:") {
			t.Errorf("riftflow ingest --wait did not complete:\n%s", out.String())
		}
	}
	// The API with the token, with a wrong one and without one.
	base := "http://" + httpAddr
	for _, c := range []struct {
		token string
		want  int
	}{{token, http.StatusOK}, {"rft_0123456789abcdef_" + strings.Repeat("A", 43), http.StatusUnauthorized}, {"", http.StatusUnauthorized}} {
		if got := call(t, http.MethodGet, base+"/v1/jobs", c.token, ""); got.Code != c.want {
			t.Errorf("GET /v1/jobs: %d, want %d", got.Code, c.want)
		}
	}

	up.Process.Signal(os.Interrupt)
	select {
	case <-exited:
		if upExit != nil {
			t.Errorf("riftflow up after SIGINT: %v", upExit)
		}
	case <-time.After(time.Minute):
		t.Error("riftflow up did not drain within a minute of SIGINT")
	}

	secrets := map[string]string{"Riot API key": strings.TrimPrefix(riotKey, "RGAPI-"), "Postgres password": dbPassword, "API token": token}
	for _, f := range []string{"nats.url", "nats-admin.url"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		u, err := url.Parse(strings.TrimSpace(string(b)))
		if err != nil || u.User == nil {
			t.Fatalf("%s holds no user: %v", f, err)
		}
		pw, _ := u.User.Password()
		secrets["NATS password of "+u.User.Username()] = pw
	}
	logs := upErr.String() + cliErr.String()
	if !strings.Contains(logs, `"msg":"nats connected"`) || !strings.Contains(logs, "http request") {
		t.Fatalf("the run's logs lack what it must have logged (%d bytes):\n%s", len(logs), logs)
	}
	lines := noSecretInLines(t, logs, secrets)
	t.Logf("%d log lines of `riftflow up` and the CLI scanned for %d secrets", lines, len(secrets))
}
