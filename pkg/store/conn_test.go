package store_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/pgtest"
	"github.com/riftflow/riftflow/internal/tcpproxy"
	"github.com/riftflow/riftflow/pkg/fault"
	"github.com/riftflow/riftflow/pkg/store"
)

// Issue 27 finding 8: Postgres behind a black-holed TCP path (the proxy
// keeps the connections open and acknowledges bytes, as a dropped route
// does, so TCP itself notices nothing for about 15 minutes). A call
// without a deadline of its own fails within the call timeout with a
// Transient error wrapping store.ErrNoAnswer, so the consumer's probe takes
// over; the probe (Ping) fails too; and once the path heals, the store
// works again on fresh connections.
func TestBlackholedPostgresFailsFast(t *testing.T) {
	raw := pgtest.NewDatabase(t)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := tcpproxy.Start(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	u.Host = proxy.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, u.String(), store.WithCallTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if _, err := st.Accounts(ctx); err != nil {
		t.Fatal(err)
	}

	proxy.Blackhole(true)
	// context.Background(): no deadline but the store's own. The result
	// arrives long before the hang guard unless nothing bounds the wait.
	errc := make(chan error, 1)
	go func() {
		_, err := st.Accounts(context.Background())
		errc <- err
	}()
	select {
	case err = <-errc:
	case <-time.After(2 * time.Minute):
		t.Fatal("a call on a black-holed path did not return: no client-side deadline")
	}
	if kind, ok := classifiedKind(err); !errors.Is(err, store.ErrNoAnswer) || !ok || kind != fault.Transient {
		t.Fatalf("call on a black-holed path: %v (kind %v, classified %v), want a Transient ErrNoAnswer", err, kind, ok)
	}
	if err := st.Ping(context.Background()); err == nil {
		t.Fatal("Ping passed on a black-holed path")
	}

	proxy.Blackhole(false)
	if err := st.Ping(ctx); err != nil {
		t.Fatalf("after the path healed: %v", err)
	}
}
