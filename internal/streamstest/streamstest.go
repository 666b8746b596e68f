// Package streamstest creates what streams/ declares on a test's
// JetStream. It is apart from natstest because streams/' own tests use
// natstest: only _test.go files outside streams/ import it.
package streamstest

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/streams"
)

// Bucket creates the KV bucket name as streams/ declares it (as `riftflow
// streams apply` does), and fails the test if streams/ declares none.
func Bucket(t testing.TB, js jetstream.JetStream, name string) {
	t.Helper()
	set, err := streams.Load(streams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range set.Buckets {
		if b.Bucket == name {
			if _, err := js.CreateOrUpdateKeyValue(t.Context(), b); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("streams/ declares no KV bucket %s", name)
}
