package ratelimit

import (
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/riftflow/riftflow/internal/natstest"
	"github.com/riftflow/riftflow/internal/streamstest"
	"github.com/riftflow/riftflow/pkg/riot"
)

// natsOnPort starts a JetStream server listening on 127.0.0.1:port (0:
// any free port) with its store in dir.
func natsOnPort(t *testing.T, port int, dir string) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats not ready")
	}
	return s
}

// TestSharedStoreLossFailsClosed: while the KV bucket cannot be reached,
// the processes together grant no more than the tokens they had already
// leased, which KV counted (no fallback share of a window on top). When
// the store is back they grant again.
func TestSharedStoreLossFailsClosed(t *testing.T) {
	dir := t.TempDir()
	s1 := natsOnPort(t, -1, dir)
	url, port := s1.ClientURL(), s1.Addr().(*net.TCPAddr).Port
	o := SharedOptions{KeyID: "loss", MaxLease: 4, LeaseDivisor: 1, KVTimeout: 300 * time.Millisecond, StatsEvery: -1,
		Options: Options{MaxWait: 100 * time.Millisecond}}
	var lims []*Shared
	for _, id := range []string{"a", "b"} {
		nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		js := natstest.Handle(t, nc)
		if id == "a" {
			streamstest.Bucket(t, js, "ratelimit")
		}
		o.ProcID = id
		lims = append(lims, newShared(t, js, o))
	}
	a, b := lims[0], lims[1]
	const app, meth = "30:60", "1000:60"
	teach(t, a, b, riotHeaders(app, "1:60", meth, "1:60"))
	before := 1
	for _, l := range lims {
		for range 2 {
			ps := grants(t, l, 1)
			if len(ps) != 1 {
				t.Fatal("no grant before the outage")
			}
			before++
			ps[0].Done(200, riotHeaders(app, "1:60", meth, "1:60"))
		}
	}
	wv, ok := readKVWindow(a, "loss.asia.win.app.60")
	if !ok {
		t.Fatal("cannot read the KV window loss.asia.win.app.60")
	}
	leased := wv.Granted // every token handed out so far, sent or held

	s1.Shutdown()
	s1.WaitForShutdown()
	during := 0
	for range 20 {
		for _, l := range lims {
			if ps := grants(t, l, 1); len(ps) == 1 {
				during++
				ps[0].Done(200, riotHeaders(app, "1:60", meth, "1:60"))
			}
		}
	}
	if before+during > leased {
		t.Fatalf("store down: %d granted before + %d during the outage > %d tokens KV had counted", before, during, leased)
	}
	t.Logf("granted %d before, %d during the outage; KV had counted %d", before, during, leased)

	s2 := natsOnPort(t, port, dir)
	t.Cleanup(func() { s2.Shutdown(); s2.WaitForShutdown() })
	waitFor(t, "a grants again once the store is back", func() bool {
		ps := grants(t, a, 1)
		for _, p := range ps {
			p.Done(200, riotHeaders(app, "1:60", meth, "1:60"))
		}
		return len(ps) == 1
	})
}

var _ riot.Limiter = (*Shared)(nil)
