package syncjob_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/natstest"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/syncjob"
	"github.com/riftflow/riftflow/pkg/synclock"
)

func TestRefusalJob(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := syncjob.Refusal{RequestID: "r1", PUUID: "p1", Mode: "latest", Trigger: "http", Code: 409,
		Reason: errors.New("busy"), At: at, Detail: map[string]any{"force": true}}
	j := r.Job()
	if j.Status != syncjob.Rejected || j.Type != syncjob.TypeSync || j.Error != "busy" || j.PUUID != "p1" {
		t.Fatalf("job %+v", j)
	}
	if !j.RequestedAt.Equal(at) || !j.FinishedAt.Equal(at) {
		t.Errorf("requested %v finished %v, want both %v (no RequestedAt given)", j.RequestedAt, j.FinishedAt, at)
	}
	var d map[string]any
	if err := json.Unmarshal(j.Detail, &d); err != nil {
		t.Fatal(err)
	}
	if d["mode"] != "latest" || d["trigger"] != "http" || d["force"] != true {
		t.Errorf("detail %v", d)
	}
	if rej := r.Rejection(); rej.Code != 409 || rej.Reason != "busy" || rej.RequestID != "r1" {
		t.Errorf("rejection %+v", rej)
	}
}

func TestStatusFinished(t *testing.T) {
	for s, want := range map[syncjob.Status]bool{syncjob.Completed: true, syncjob.Failed: true, syncjob.Syncing: false,
		syncjob.Pending: false, syncjob.Rejected: false, syncjob.Running: false} {
		if s.Finished() != want {
			t.Errorf("%s.Finished() = %v", s, !want)
		}
	}
}

// TestAdvance checks on a real JetStream that Advance releases a finished
// sync's lock, keeps a progressing sync's lock, and publishes each sync's
// progress event.
func TestAdvance(t *testing.T) {
	ctx := context.Background()
	_, nc, js := natstest.JetStream(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"lol.progress.>"}}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "sync-locks", LimitMarkerTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	locks := natsx.Lock{KV: kv, JS: js}
	now := time.Now()
	for _, p := range []string{"done", "busy"} {
		if _, err := synclock.Claim(ctx, locks, p, "req-"+p, time.Minute, now); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := nc.SubscribeSync("lol.progress.>")
	if err != nil {
		t.Fatal(err)
	}
	l := syncjob.Lifecycle{JS: js, Locks: locks, Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return now },
		LockTTL: time.Hour}
	l.Advance(ctx, []syncjob.Progress{
		{RequestID: "req-done", PUUID: "done", Progress: 3, Total: 3, Status: syncjob.Completed, Pending: 1},
		{RequestID: "req-busy", PUUID: "busy", Progress: 1, Total: 3, Status: syncjob.Syncing},
	})
	if _, err := synclock.Get(ctx, locks, "done"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("finished sync's lock: err %v, want released", err)
	}
	if v, err := synclock.Get(ctx, locks, "busy"); err != nil || v.RequestID != "req-busy" {
		t.Errorf("progressing sync's lock: %+v, %v", v, err)
	}
	want := map[string]bus.ProgressEvent{
		"lol.progress.done": {RequestID: "req-done", PUUID: "done", Status: "completed", Progress: 3, Total: 3, Pending: 1},
		"lol.progress.busy": {RequestID: "req-busy", PUUID: "busy", Status: "syncing", Progress: 1, Total: 3},
	}
	for range want {
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var ev bus.ProgressEvent
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatal(err)
		}
		w := want[m.Subject]
		w.At = ev.At
		if ev != w || !ev.At.Equal(now) {
			t.Errorf("%s: %+v, want %+v at %v", m.Subject, ev, w, now)
		}
	}
}
