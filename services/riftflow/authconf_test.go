package riftflow

// deploy/nats/auth.conf, the NATS users of the Kubernetes deployment, in a
// real nats-server (TestNATSPermissions covers the embedded server of
// `riftflow up`; both use connectAs and refusedWithin).

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/riftflow/riftflow/streams"
)

// deploy/nats/auth.conf, the Kubernetes NATS server's users, loads in
// nats-server with the passwords from the environment and enforces the
// same table: the fetcher's results pass, the resolver's forgery is
// refused, a wrong password is not let in.
func TestAuthConfEnforced(t *testing.T) {
	conf, err := os.ReadFile(filepath.Join("..", "..", "deploy", "nats", "auth.conf"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "auth.conf"), conf, 0o600); err != nil {
		t.Fatal(err)
	}
	main := fmt.Sprintf("listen: %q\njetstream { store_dir: %q }\ninclude ./auth.conf\n", freeAddr(t), filepath.Join(dir, "js"))
	if err := os.WriteFile(filepath.Join(dir, "nats.conf"), []byte(main), 0o600); err != nil {
		t.Fatal(err)
	}
	pw := map[string]string{}
	for _, g := range streams.Grants {
		pw[g.User] = randHex(16)
		t.Setenv(streams.PasswordEnv(g.User), pw[g.User])
	}
	opts, err := server.ProcessConfigFile(filepath.Join(dir, "nats.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Users) != len(streams.Grants) {
		t.Fatalf("auth.conf has %d users, the table %d", len(opts.Users), len(streams.Grants))
	}
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server with auth.conf did not start")
	}
	if _, _, err := connectAs(t, srv.ClientURL(), streams.UserResolver, "wrong"); err == nil {
		t.Error("a wrong password was let in")
	}
	admin, _, err := connectAs(t, srv.ClientURL(), streams.UserAdmin, pw[streams.UserAdmin])
	if err != nil {
		t.Fatal(err)
	}
	got, err := admin.SubscribeSync("lol.match.fetched.>")
	if err != nil {
		t.Fatal(err)
	}
	admin.Flush()
	fetcherConn, _, err := connectAs(t, srv.ClientURL(), streams.UserMatchFetcher, pw[streams.UserMatchFetcher])
	if err != nil {
		t.Fatal(err)
	}
	fetcherConn.Publish("lol.match.fetched.americas", []byte("from the fetcher"))
	fetcherConn.Flush()
	if m, err := got.NextMsg(10 * time.Second); err != nil || string(m.Data) != "from the fetcher" {
		t.Fatalf("the fetcher's result did not pass: %v", err)
	}
	resolverConn, rerrs, err := connectAs(t, srv.ClientURL(), streams.UserResolver, pw[streams.UserResolver])
	if err != nil {
		t.Fatal(err)
	}
	resolverConn.Publish("lol.match.fetched.americas", []byte("forged"))
	refusedWithin(t, "the resolver's forged result", rerrs, resolverConn, 10*time.Second)
	if m, err := got.NextMsg(500 * time.Millisecond); err == nil {
		t.Errorf("a forged result was delivered: %s", m.Data)
	}
}
