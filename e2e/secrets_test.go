package e2e

// Secrets: the Riot API key must appear nowhere but the
// X-Riot-Token request header. The five services run as OS processes with a
// distinctive key and a Postgres password; every output of the run is
// collected and searched: process stderr (logs, error strings), spans
// exported over OTLP, /metrics of every process, the URLs the simulator
// received, the database (ledger reasons, job errors) and the JetStream
// store files on disk. TestUpRunLogsNoSecret (services/riftflow) does the
// same for every log line of `riftflow up` and the CLI, run as processes as
// a user runs them.
//
// NATS credentials and TLS through configuration are covered by
// pkg/natsx TestConnectUserPassword and TestConnectTLS (NATS_USER,
// NATS_PASSWORD, NATS_TOKEN, NATS_NKEY_SEED_FILE, NATS_CREDS_FILE,
// NATS_TLS_CA/CERT/KEY in pkg/config); Postgres credentials come only from
// DATABASE_URL (pkg/config.Postgres has no other source).

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/pkg/telemetry/telemetrytest"
	"github.com/riftflow/riftflow/services/riftflow/stack"
)

// requestLog records what the simulator received.
type requestLog struct {
	mu       sync.Mutex
	urls     []string
	headers  bytes.Buffer // every header except X-Riot-Token
	tokenUse int          // requests carrying X-Riot-Token == key
	key      string
}

func (l *requestLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.urls = append(l.urls, r.URL.String())
		for k, vs := range r.Header {
			if http.CanonicalHeaderKey(k) == "X-Riot-Token" {
				if len(vs) == 1 && vs[0] == l.key {
					l.tokenUse++
				}
				continue
			}
			l.headers.WriteString(k + ": " + strings.Join(vs, ",") + "\n")
		}
		l.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

func TestSecretsNeverLeak(t *testing.T) {
	t.Parallel()
	key := "RGAPI-" + stack.RandHex(4) + "-" + "5ec7e7" + stack.RandHex(10) // distinctive
	secretPart := key[len("RGAPI-"):]
	dbPassword := "pg-s3cret-" + stack.RandHex(8)
	recv := telemetrytest.NewReceiver(t)
	reqs := &requestLog{key: key}
	players, per := 2, 20
	e := startChaos(t, chaosOptions{players: players, perPlayer: per, apiKey: key, dbPassword: dbPassword,
		simHandler: reqs.wrap, otlp: recv.URL(),
		// Errors on purpose, so error strings are produced and logged:
		// 5xx, service 429s, a poisoned body and timeouts.
		faults: sim.Faults{Seed: 3, Error5xx: 0.1, Service429: 0.05, Slow: 0.02, SlowDelay: 2 * time.Second,
			Match: map[string]sim.MatchFault{"NA1_9000000001": {Kind: sim.FaultPoison}}},
		env: map[string]string{"LOG_LEVEL": "debug", "RIOT_HTTP_TIMEOUT_MS": "500"}})
	start := time.Now()
	e.ingestAll(1, players)
	e.waitSettled(settleTimeout())
	e.check("secrets run", start, "10% 5xx, 5% 429, 2% slow, 1 poison")

	// /metrics of every process, while running.
	var metrics bytes.Buffer
	for _, name := range chaosServices {
		body := chaosScrape("http://" + e.procs[name].ops + "/metrics")
		if body == "" {
			t.Errorf("%s: no /metrics", name)
		}
		metrics.WriteString(body)
	}
	// Stop gracefully so every process flushes its spans.
	e.stopAll()
	spans, _ := json.Marshal(recv.Spans())
	logs := e.allLogs()

	// The database: everything a reason or an error can be written to.
	var db bytes.Buffer
	for _, q := range []string{
		`SELECT coalesce(string_agg(t::text, '|'), '') FROM match_fetches t`,
		`SELECT coalesce(string_agg(t::text, '|'), '') FROM accounts t`,
		`SELECT coalesce(string_agg(t::text, '|'), '') FROM jobs t`,
	} {
		var s string
		if err := e.pool.QueryRow(context.Background(), q).Scan(&s); err != nil {
			t.Fatal(err)
		}
		db.WriteString(s)
	}
	// The JetStream store on disk (every stream and KV bucket).
	var jsFiles bytes.Buffer
	filepath.WalkDir(filepath.Join(e.dir, "nats"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := os.ReadFile(p)
			jsFiles.Write(b)
		}
		return nil
	})
	reqs.mu.Lock()
	urls := strings.Join(reqs.urls, "\n")
	headers := reqs.headers.String()
	tokenUse := reqs.tokenUse
	reqs.mu.Unlock()

	// The outputs are real: each source holds what it should.
	for name, ok := range map[string]bool{
		"logs":          bytes.Contains(logs, []byte("fetch outcome")) || bytes.Contains(logs, []byte("err=")),
		"spans":         bytes.Contains(spans, []byte("match-fetcher")),
		"metrics":       strings.Contains(metrics.String(), "# TYPE"),
		"urls":          strings.Contains(urls, "/lol/match/v5/matches/"),
		"ledger errors": strings.Contains(db.String(), "match-v5.getMatch"), // the poisoned match's reason
		"nats store":    jsFiles.Len() > 0,
	} {
		if !ok {
			t.Errorf("output %q is empty or lacks what the run must have produced", name)
		}
	}
	if tokenUse == 0 || tokenUse != len(reqs.urls) {
		t.Errorf("X-Riot-Token carried the key on %d of %d requests", tokenUse, len(reqs.urls))
	}

	sources := map[string][]byte{"process logs (stderr)": logs, "OTLP spans": spans, "/metrics": metrics.Bytes(),
		"request URLs": []byte(urls), "request headers other than X-Riot-Token": []byte(headers),
		"database rows": db.Bytes(), "JetStream store files": jsFiles.Bytes()}
	for name, b := range sources {
		for what, secret := range map[string]string{"Riot API key": secretPart, "Postgres password": dbPassword} {
			if i := bytes.Index(b, []byte(secret)); i >= 0 {
				lo, hi := max(0, i-120), min(len(b), i+len(secret)+40)
				t.Errorf("%s leaked in %s: …%s…", what, name, b[lo:hi])
			}
		}
		t.Logf("%-42s %8d bytes searched: no key, no password", name, len(b))
	}
}
