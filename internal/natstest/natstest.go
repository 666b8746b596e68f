// Package natstest gives a test an in-process JetStream server
// (internal/natsembed) and connections to it, stopped and closed when the
// test ends. Only _test.go files import it (it imports package testing).
package natstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/natsembed"
)

// Server starts a JetStream server with its file store under t.TempDir(),
// reachable in-process only (no port), and shuts it down at cleanup.
func Server(t testing.TB) *server.Server {
	t.Helper()
	s, err := natsembed.StartServer(natsembed.Options{Name: "natstest", StoreDir: t.TempDir(), Port: -1, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// Connect opens an in-process connection to s, closed at cleanup, and a
// JetStream handle on it.
func Connect(t testing.TB, s *server.Server) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect("", nats.InProcessServer(s), nats.Name(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	return nc, Handle(t, nc)
}

// Handle closes nc at cleanup and returns a JetStream handle on it.
func Handle(t testing.TB, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// Cluster starts an n-node loopback JetStream cluster with its stores
// under t.TempDir() and shuts it down at cleanup.
func Cluster(t testing.TB, n int) *natsembed.Cluster {
	t.Helper()
	c, err := natsembed.StartCluster(n, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	return c
}

// JetStream is Server, then Connect.
func JetStream(t testing.TB) (*server.Server, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	s := Server(t)
	nc, js := Connect(t, s)
	return s, nc, js
}

// Remaining is what consumer of stream on js has not acknowledged yet:
// its pending messages and those in flight.
func Remaining(t testing.TB, js jetstream.JetStream, stream, consumer string) int {
	t.Helper()
	c, err := js.Consumer(t.Context(), stream, consumer)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return int(info.NumPending) + info.NumAckPending
}

// Issue makes a P-256 key and a certificate of it from tmpl, signed by
// parentKey as parent, or by the new key itself when parent is nil (a CA,
// or a self-signed server certificate): for a test server that serves TLS.
func Issue(t testing.TB, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}
