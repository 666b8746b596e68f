package natsx

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func TestLock(t *testing.T) {
	_, _, js := startJS(t)
	ctx := t.Context()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "locks", History: 1, LimitMarkerTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l := Lock{KV: kv, JS: js}

	rev, err := l.Claim(ctx, "puuid-1", "lister-a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Claim(ctx, "puuid-1", "lister-b", time.Minute)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "lister-a") {
		t.Fatalf("second claim: %v, want ErrLocked naming lister-a", err)
	}
	rev2, err := l.Renew(ctx, "puuid-1", rev, []byte("lister-a"), 2*time.Second)
	if err != nil || rev2 <= rev {
		t.Fatalf("renew: rev %d, %v", rev2, err)
	}
	if err := l.Release(ctx, "puuid-1", rev); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("release with stale rev: %v", err)
	}
	if _, err := l.Renew(ctx, "puuid-1", rev, nil, time.Second); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("renew with stale rev: %v", err)
	}
	// Not renewed again: the renewed TTL must still expire the key.
	waitFree(t, l, "puuid-1")
	rev3, err := l.Claim(ctx, "puuid-1", "lister-b", time.Minute)
	if err != nil {
		t.Fatalf("claim after expiry: %v", err)
	}
	if err := l.Release(ctx, "puuid-1", rev3); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Get(ctx, "puuid-1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("after release: %v", err)
	}
	if _, err := l.Claim(ctx, "puuid-1", "lister-c", time.Minute); err != nil {
		t.Fatalf("claim after release: %v", err)
	}
}

// waitFree polls until key is gone (guarded, not timed).
func waitFree(t *testing.T, l Lock, key string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := l.Get(t.Context(), key); errors.Is(err, jetstream.ErrKeyNotFound) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s never expired", key)
}
