package natsx

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/natsembed"
	"github.com/riftflow/riftflow/internal/natstest"
	"github.com/riftflow/riftflow/internal/testenv"
)

func TestClusterFailover(t *testing.T) {
	testenv.SkipShort(t, "cluster test")
	c := natstest.Cluster(t, 3)
	nc, err := Connect(t.Context(), ConnConfig{URL: strings.Join(c.URLs(), ","), Name: "failover", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "r3.a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := -1
	for i := range 3 {
		if c.Server(i).Name() == info.Cluster.Leader {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatalf("leader %q not found", info.Cluster.Leader)
	}
	c.Kill(leader)
	if c.Server(leader) != nil {
		t.Fatal("killed node still listed")
	}
	// Publishing succeeds again once a new stream leader is elected.
	var pubErr error
	for range 100 {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		_, pubErr = js.Publish(pctx, "r3.b", []byte("2"))
		pcancel()
		if pubErr == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if pubErr != nil {
		t.Fatalf("no publish after killing the leader: %v", pubErr)
	}
	if err := c.Restart(leader); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	// The restarted node kept its store and catches up: both messages.
	for range 100 {
		if info, err = st.Info(ctx); err == nil && info.State.Msgs == 2 && len(info.Cluster.Replicas) == 2 {
			allCurrent := true
			for _, r := range info.Cluster.Replicas {
				allCurrent = allCurrent && r.Current
			}
			if allCurrent {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("after restart: msgs %d, cluster %+v, err %v", info.State.Msgs, info.Cluster, err)
}

func TestWebSocketListener(t *testing.T) {
	s, err := natsembed.StartServer(natsembed.Options{StoreDir: t.TempDir(), NoLog: true, Port: -1, WebSocketPort: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	nc, err := Connect(t.Context(), ConnConfig{URL: s.WebsocketURL(), Name: "ws"})
	if err != nil {
		t.Fatalf("connect over %s: %v", s.WebsocketURL(), err)
	}
	defer nc.Close()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}
