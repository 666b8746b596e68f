package control_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/natstest"
	"github.com/riftflow/riftflow/pkg/control"
)

func bucket(t *testing.T) jetstream.KeyValue {
	t.Helper()
	_, _, js := natstest.JetStream(t)
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: control.Bucket})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// waitPaused waits for the watched switch to show want; the watch is
// asynchronous, so the test polls instead of sleeping a fixed time.
func waitPaused(t *testing.T, s *control.Switch, want bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.Paused() != want {
		if time.Now().After(deadline) {
			t.Fatalf("switch Paused() = %v, want %v", s.Paused(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSwitchFollowsTheKey(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv := bucket(t)

	if st, err := control.Get(ctx, kv); err != nil || st.Paused {
		t.Fatalf("Get on an empty bucket = %+v, %v; want not paused", st, err)
	}
	if err := control.Set(ctx, kv, control.State{Paused: true, Reason: "maintenance", By: "ops"}); err != nil {
		t.Fatal(err)
	}
	// Watch starts with the current value already applied.
	s, err := control.Watch(ctx, kv, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Paused() || s.State().Reason != "maintenance" || s.State().By != "ops" || s.State().At.IsZero() {
		t.Fatalf("Watch state = %+v paused=%v; want the stored pause with its time", s.State(), s.Paused())
	}

	if err := control.Set(ctx, kv, control.State{Paused: false}); err != nil {
		t.Fatal(err)
	}
	waitPaused(t, s, false)
	if err := control.Set(ctx, kv, control.State{Paused: true}); err != nil {
		t.Fatal(err)
	}
	waitPaused(t, s, true)

	// A deleted key is "not paused".
	if err := kv.Delete(ctx, control.Key); err != nil {
		t.Fatal(err)
	}
	waitPaused(t, s, false)

	// An unreadable value is ignored: the last state stays.
	if err := control.Set(ctx, kv, control.State{Paused: true}); err != nil {
		t.Fatal(err)
	}
	waitPaused(t, s, true)
	if _, err := kv.Put(ctx, control.Key, []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if err := control.Set(ctx, kv, control.State{Paused: true, Reason: "after garbage"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.State().Reason != "after garbage" {
		if time.Now().After(deadline) {
			t.Fatalf("state = %+v, want the value after the unreadable one", s.State())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !s.Paused() {
		t.Error("an unreadable value unpaused the switch")
	}
}

func TestGetRejectsAnUnreadableValue(t *testing.T) {
	ctx := context.Background()
	kv := bucket(t)
	if _, err := kv.Put(ctx, control.Key, []byte("paused")); err != nil {
		t.Fatal(err)
	}
	if _, err := control.Get(ctx, kv); err == nil {
		t.Fatal("Get of a non-JSON value returned no error")
	}
}

func TestNilSwitchIsNotPaused(t *testing.T) {
	var s *control.Switch
	if s.Paused() || s.State().Paused {
		t.Fatal("a nil switch is paused")
	}
}
