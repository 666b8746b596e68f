package riftflow

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/natsembed"
	"github.com/riftflow/riftflow/internal/natstest"
	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/internal/testenv"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/streams"
)

// Issue 27 finding 8: `riftflow serve`, what Kubernetes runs, has the API
// server of `riftflow up`: a 64 KiB header is refused (431; Go's default
// limit is 1 MiB), and a client that trickles its body one byte a second
// is cut off by the read timeout instead of holding the connection
// forever.
func TestServeHasTheAPIServerLimits(t *testing.T) {
	testenv.SkipShort(t, "waits out the API read timeout (15 s)")
	srv, err := natsembed.StartServer(natsembed.Options{StoreDir: t.TempDir(), NoLog: true}) // a TCP port, as in a pod
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	_, js := natstest.Connect(t, srv)
	stagetest.Declare(t, js, streams.Options{}, slog.New(slog.DiscardHandler))
	db := pgtest.NewDatabase(t)
	if err := store.Migrate(t.Context(), db, nil); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	t.Setenv("NATS_URL", srv.ClientURL())
	t.Setenv("DATABASE_URL", db)
	t.Setenv("HTTP_ADDR", addr)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, Invocation{Args: []string{"serve"}, Stdout: io.Discard, Stderr: stagetest.Writer(t)})
	}()
	t.Cleanup(func() { cancel(); <-done })
	base := "http://" + addr
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("riftflow serve did not come up")
		}
	}

	req, _ := http.NewRequest(http.MethodGet, base+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 64<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a 64 KiB header: %d, want 431", resp.StatusCode)
	}

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() {
		io.Copy(io.Discard, bufio.NewReader(conn)) // until the server closes it
		close(closed)
	}()
	// A hang guard, not a timing assertion: the read timeout (15 s) ends
	// the connection long before it.
	guard := time.After(2 * time.Minute)
	for tick := time.NewTicker(time.Second); ; {
		select {
		case <-closed:
			return
		case <-guard:
			t.Fatal("a trickled body held the connection for 2 minutes: no read timeout")
		case <-tick.C:
			conn.Write([]byte("x"))
		}
	}
}
