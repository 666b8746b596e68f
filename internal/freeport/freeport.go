// Package freeport finds a free loopback TCP port, for a server that must be
// told its port before it starts (a local Postgres cluster, a nats-server
// process or route, a process's HTTP_ADDR). It does not import package
// testing: `riftflow up --ephemeral-db` links it through internal/pgcluster;
// tests use stagetest.FreePort.
package freeport

import "net"

// Get returns a TCP port on 127.0.0.1 that was free a moment ago. Another
// process may take it before the caller listens on it.
func Get() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
