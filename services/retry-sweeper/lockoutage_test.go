package retrysweeper_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/internal/tcpproxy"
	"github.com/riftflow/riftflow/internal/testenv"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/synclock"
	retrysweeper "github.com/riftflow/riftflow/services/retry-sweeper"
	"github.com/riftflow/riftflow/streams"
)

// TestLockHeldThroughPostgresOutage: a running sync's lock is kept by the
// sweeper's heartbeat through a Postgres outage (a black-holed link, no
// error and no answer) several times longer than the lock's TTL, so a
// second sync of the same account is still refused (the lister's claim,
// behind the API's 409) instead of getting in beside the first.
func TestLockHeldThroughPostgresOutage(t *testing.T) {
	testenv.SkipShort(t, "slow")
	e := stagetest.New(t, stagetest.Options{DB: true})
	ctx, inf := t.Context(), e.Process
	const puuid, first, second = "puuid-outage", "sync-first", "sync-second"
	runningSync(e, puuid, first, "NA1_9700", "")
	const ttl = 3 * time.Second // the server's minimum TTL is 1 s
	locks, err := inf.Lock(ctx, streams.BucketSyncLocks)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := synclock.Claim(ctx, locks, puuid, first, ttl, time.Now()); err != nil {
		t.Fatal(err)
	}

	// The sweeper reaches Postgres through a proxy the test black-holes.
	u, err := url.Parse(e.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	host := u.Host
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(host, "5432")
	}
	proxy, err := tcpproxy.Start(host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	u.Host = proxy.Addr()
	st, err := store.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	s := sweeperWith(e, retrysweeper.Config{SyncLock: config.SyncLock{LockTTL: ttl}, Interval: time.Hour}, retrysweeper.Deps{Store: st})
	// The first sweep runs at start; let it finish before the outage.
	if _, err := s.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); s.Run(runCtx) }()
	t.Cleanup(func() { proxy.Blackhole(false); stop(); <-done })

	proxy.Blackhole(true)
	// Four TTLs of outage, checked on every beat: the lock never lapses.
	for i := range 4 * 6 {
		time.Sleep(ttl / 6)
		v, err := synclock.Get(ctx, locks, puuid)
		if err != nil || v.RequestID != first {
			t.Fatalf("%v into a Postgres outage: the lock is %+v, %v; want still held by %s", time.Duration(i+1)*ttl/6, v, err, first)
		}
	}
	if _, err := synclock.Claim(ctx, locks, puuid, second, ttl, time.Now()); !errors.Is(err, natsx.ErrLocked) {
		t.Fatalf("a second sync's claim during the outage: %v, want natsx.ErrLocked (409)", err)
	}
}
