package riftflow

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/riftflow/riftflow/internal/natsembed"
	"github.com/riftflow/riftflow/internal/stagetest"
)

// Issue 27 finding 10: `riftflow up` with a database of the user's
// (DATABASE_URL) and no RIOT_API_KEY refuses to fill it with simulated
// matches unless asked (--simulator; --demo is a simulator run), before it
// starts anything; asked, it gets past that check.
func TestUpRefusesSimulatorIntoRealDatabase(t *testing.T) {
	t.Setenv("RIOT_API_KEY", "")
	t.Setenv("NATS_URL", "")
	t.Setenv("DATABASE_URL", "postgres://postgres@127.0.0.1:1/nowhere")
	t.Setenv("RIFTFLOW_DATA_DIR", t.TempDir())
	var out bytes.Buffer
	code := Run(t.Context(), Invocation{Args: []string{"up", "--http-addr", freeAddr(t)}, Stdout: &out, Stderr: &out})
	if code == 0 || !strings.Contains(out.String(), "--simulator") || !strings.Contains(out.String(), "RIOT_API_KEY is not set") {
		t.Fatalf("up with DATABASE_URL and no RIOT_API_KEY: exit %d\n%s", code, out.String())
	}
	out.Reset()
	code = Run(t.Context(), Invocation{Args: []string{"up", "--simulator", "--http-addr", freeAddr(t)}, Stdout: &out, Stderr: &out})
	if code == 0 || strings.Contains(out.String(), "--simulator") {
		t.Fatalf("up --simulator: exit %d, want past the check (then the unreachable database)\n%s", code, out.String())
	}
}

// Issue 27 finding 10: the "riftflow is up" line shows NATS_URL without
// its password.
func TestUpBannerHidesNATSPassword(t *testing.T) {
	const pw = "natsBannerSecret42"
	srv, err := natsembed.StartServer(natsembed.Options{StoreDir: t.TempDir(), NoLog: true,
		Configure: func(o *server.Options) { o.Username, o.Password = "ops", pw }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	db, _ := passwordDatabase(t)
	t.Setenv("NATS_URL", strings.Replace(srv.ClientURL(), "nats://", "nats://ops:"+pw+"@", 1))
	t.Setenv("DATABASE_URL", db)
	t.Setenv("RIOT_API_KEY", "")
	t.Setenv("RIFTFLOW_DATA_DIR", t.TempDir())
	t.Setenv("SCHEDULE_ENABLE", "false")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r, w := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, Invocation{Args: []string{"up", "--simulator", "--http-addr", freeAddr(t)}, Stdout: w, Stderr: stagetest.Writer(t)})
		w.Close()
	}()
	sc := bufio.NewScanner(r)
	var banner string
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "riftflow is up") {
			banner = sc.Text()
			break
		}
	}
	cancel()
	go io.Copy(io.Discard, r)
	<-done
	if banner == "" {
		t.Fatal("no \"riftflow is up\" line")
	}
	if strings.Contains(banner, pw) || !strings.Contains(banner, "ops:xxxxx@") {
		t.Errorf("banner %q shows the NATS password (or no masked URL)", banner)
	}
}
