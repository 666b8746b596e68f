package retrysweeper_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/syncjob"
	retrysweeper "github.com/riftflow/riftflow/services/retry-sweeper"
	"github.com/riftflow/riftflow/streams"
)

// errNATSDown is what the wrappers below answer while the test holds NATS
// "down" for them.
var errNATSDown = errors.New("test: nats: no response from stream")

// hookJS is a JetStream whose publishes call fail first (an error fails
// the publish, as when a NATS cluster has just come back and JetStream
// does not answer yet) and, once published, after (nil: nothing).
type hookJS struct {
	jetstream.JetStream
	fail  func() error
	after func(*nats.Msg)
}

func (j hookJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if j.fail != nil {
		if err := j.fail(); err != nil {
			return nil, err
		}
	}
	ack, err := j.JetStream.PublishMsg(ctx, m, opts...)
	if err == nil && j.after != nil {
		j.after(m)
	}
	return ack, err
}

// downKV is a KV bucket whose reads fail while down is set.
type downKV struct {
	jetstream.KeyValue
	down *atomic.Bool
}

func (k downKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if k.down.Load() {
		return nil, errNATSDown
	}
	return k.KeyValue.Get(ctx, key)
}

// TestStuckSyncRecoveryOutlivesNATSFailures: a sync stuck in syncing (no
// progress for StuckAfter, no lock, nothing queued) is recovered only once
// its recovery command is on SYNC. While the sync-locks bucket cannot be
// read, or the command cannot be published (JetStream not answering yet,
// as just after a NATS cluster outage), the sweep fails and the account
// stays syncing; the next sweep recovers it: one command, the account
// pending. Before, a failed lock read was taken for a missing lock, and
// the account was moved to pending before the publish: with the publish
// failed, no sweep looked at it again and its job stayed running for good
// (the 60-minute soak on c68f7a6).
func TestStuckSyncRecoveryOutlivesNATSFailures(t *testing.T) {
	e := stagetest.New(t, stagetest.Options{DB: true})
	ctx, inf := t.Context(), e.Process
	const puuid, req = "puuid-recover", "sync-recover"
	runningSync(e, puuid, req, "NA1_9900", "20 minutes")
	locks, err := inf.Lock(ctx, streams.BucketSyncLocks)
	if err != nil {
		t.Fatal(err)
	}
	kvDown, pubDown := &atomic.Bool{}, &atomic.Bool{}
	js := hookJS{JetStream: inf.JS, fail: func() error {
		if pubDown.Load() {
			return errNATSDown
		}
		return nil
	}}
	locks.KV = downKV{KeyValue: locks.KV, down: kvDown}
	s := sweeperWith(e, syncHealthConfig,
		retrysweeper.Deps{JS: js, Locks: locks})
	syncSubject := inf.Subjects.SyncFor("na1", bus.Background)
	syncs, err := inf.JS.Stream(ctx, streams.StreamSync)
	if err != nil {
		t.Fatal(err)
	}
	commands := func() (n uint64, last bus.SyncCommand) {
		t.Helper()
		info, err := syncs.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 {
			return 0, last
		}
		m, err := syncs.GetLastMsgForSubject(ctx, syncSubject)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(m.Data, &last); err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs, last
	}
	status := func() syncjob.Status {
		t.Helper()
		a, err := e.Store.AccountStatus(ctx, puuid)
		if err != nil {
			t.Fatal(err)
		}
		return a.SyncStatus
	}

	for _, step := range []struct {
		name            string
		kvDown, pubDown bool
	}{
		{"the sync-locks bucket does not answer", true, false},
		{"the recovery command cannot be published", false, true},
	} {
		kvDown.Store(step.kvDown)
		pubDown.Store(step.pubDown)
		rep, err := s.Sweep(ctx)
		if !errors.Is(err, errNATSDown) || rep.Recovered != 0 {
			t.Fatalf("%s: sweep %+v, %v; want it to fail with %v, nothing recovered", step.name, rep, err, errNATSDown)
		}
		if n, _ := commands(); n != 0 || status() != syncjob.Syncing {
			t.Fatalf("%s: %d commands on SYNC, account %s; want none, still syncing (found again by the next sweep)", step.name, n, status())
		}
	}

	kvDown.Store(false)
	pubDown.Store(false)
	rep, err := s.Sweep(ctx)
	if err != nil || rep.Recovered != 1 {
		t.Fatalf("sweep with NATS back: %+v, %v; want 1 recovered", rep, err)
	}
	n, cmd := commands()
	if n != 1 || cmd.RequestID != "recover-"+req || cmd.PUUID != puuid || cmd.Trigger != bus.TriggerRecovery {
		t.Fatalf("SYNC holds %d commands, the last %+v; want one recovery of %s", n, cmd, req)
	}
	if got := status(); got != syncjob.Pending {
		t.Fatalf("account %s after the recovery command, want pending", got)
	}
}

// TestStuckSyncRecoveryCountedWhenTheListerIsFirst: the recovery command
// is published before the account is moved to pending, so a lister can
// begin the recovery sync before that write, which then finds the account
// taken by the new request. The sync is still recovered, once: the sweep
// counts it (the job log's "recovered") and the account stays with the
// recovery sync. Before, the sweep counted 0 (the e2e
// TestSyncKilledListerRecovers failed in CI on 1236285).
func TestStuckSyncRecoveryCountedWhenTheListerIsFirst(t *testing.T) {
	e := stagetest.New(t, stagetest.Options{DB: true})
	ctx, inf := t.Context(), e.Process
	const puuid, req = "puuid-fast", "sync-fast"
	runningSync(e, puuid, req, "NA1_9901", "20 minutes")
	began := 0
	// Every publish is followed at once by BeginSync, as if a lister took
	// the command before the sweeper's next write.
	js := hookJS{JetStream: inf.JS, after: func(m *nats.Msg) {
		var cmd bus.SyncCommand
		if err := json.Unmarshal(m.Data, &cmd); err != nil {
			t.Error(err)
			return
		}
		if _, err := e.Store.BeginSync(ctx, store.SyncStart{RequestID: cmd.RequestID, PUUID: cmd.PUUID, Platform: cmd.Platform,
			Region: cmd.Region, Mode: string(cmd.Mode), Trigger: string(cmd.Trigger)}); err != nil {
			t.Error(err)
		}
		began++
	}}
	s := sweeperWith(e, syncHealthConfig, retrysweeper.Deps{JS: js})
	rep, err := s.Sweep(ctx)
	if err != nil || rep.Recovered != 1 || began != 1 {
		t.Fatalf("sweep: %+v, %v, %d recovery syncs begun; want 1 recovered, 1 begun", rep, err, began)
	}
	a, err := e.Store.AccountStatus(ctx, puuid)
	if err != nil {
		t.Fatal(err)
	}
	if a.SyncStatus != syncjob.Syncing || a.SyncRequestID != "recover-"+req {
		t.Fatalf("account %s by %q; want syncing by the recovery sync", a.SyncStatus, a.SyncRequestID)
	}
}
