package matchidlister_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/sim"
	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/riotclient"
	matchidlister "github.com/riftflow/riftflow/services/matchid-lister"
	"github.com/riftflow/riftflow/streams"
)

// TestCursorOnTheServerClock: a lister on a host whose clock is 3 h ahead
// of the NATS server's (both its Now and the host clock it measures the
// server against, as on a real host) writes the account's cursor at the
// server's time, not 3 h in the future, where the next latest sync would
// start past every game that ends in those 3 h.
func TestCursorOnTheServerClock(t *testing.T) {
	e := stagetest.New(t, stagetest.Options{DB: true, Riot: &sim.Options{}})
	ctx, inf := t.Context(), e.Process
	rc, _, _, err := riotclient.Open(ctx, inf)
	if err != nil {
		t.Fatal(err)
	}
	p := e.DemoPlayer()
	const skew = 3 * time.Hour
	host := func() time.Time { return time.Now().Add(skew) }
	cons, err := inf.JS.Consumer(ctx, streams.StreamSync, streams.ConsumerMatchIDListerInteractive)
	if err != nil {
		t.Fatal(err)
	}
	bg, err := inf.JS.Consumer(ctx, streams.StreamSync, streams.ConsumerMatchIDLister)
	if err != nil {
		t.Fatal(err)
	}
	locks, err := inf.Lock(ctx, streams.BucketSyncLocks)
	if err != nil {
		t.Fatal(err)
	}
	cursors, err := inf.KV(ctx, streams.BucketCursors)
	if err != nil {
		t.Fatal(err)
	}
	s, err := matchidlister.New(matchidlister.Config{}, matchidlister.Deps{JS: inf.JS, Consumer: bg, Interactive: cons, Locks: locks, Cursors: cursors,
		Riot: rc, Store: e.Store, Host: host, Base: app.Base{Subjects: inf.Subjects, Now: host}})
	if err != nil {
		t.Fatal(err)
	}
	e.Run(s)
	before := time.Now()
	e.Publish(inf.Subjects.SyncFor(p.Platform, bus.Interactive), syncOf(p, "skewed-host", 3))
	var cur matchidlister.Cursor
	e.Wait("the account's cursor", func() bool {
		ent, err := cursors.Get(ctx, p.PUUID)
		return err == nil && json.Unmarshal(ent.Value(), &cur) == nil && cur.ListedUntilS > 0
	})
	after := time.Now()
	if end := time.Unix(cur.ListedUntilS, 0); end.Before(before.Add(-time.Minute)) || end.After(after.Add(time.Minute)) {
		t.Errorf("cursor end %v on a host %v ahead; want the server's time, between %v and %v", end, skew, before, after)
	}
}
