// Package freeport finds a free loopback TCP port, for a server that must be
// told its port before it starts (a local Postgres cluster, a nats-server
// process or route, a process's HTTP_ADDR). It does not import package
// testing: `riftflow up --ephemeral-db` links it through internal/pgcluster;
// tests use stagetest.FreePort.
package freeport

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is the lowest port Get picks: below it are the well-known and
// commonly configured service ports.
const lowest = 10000

// Get returns a TCP port on 127.0.0.1 that was free a moment ago. It picks
// at random below the kernel's ephemeral port range (Linux's
// ip_local_port_range, 32768–60999 by default), where outgoing connections
// never take their local port: a port the kernel hands out for ":0" comes
// from that range, and a client connection opened between Get and the
// caller's listen (a NATS or Postgres client of the same test, say) could
// take it, failing the listen with "address already in use". Another
// process that picks ports the same way still may, with a small chance.
// Where the range is unknown or leaves no room below it, the kernel picks.
func Get() (int, error) {
	if hi := ephemeralLow(); hi-lowest >= 1000 {
		for range 32 {
			p := lowest + rand.IntN(hi-lowest)
			if free(p) {
				return p, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// free reports whether 127.0.0.1:p could be listened on just now.
func free(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// ephemeralLow is the first port of the kernel's ephemeral range (0 when
// it cannot be read: not Linux).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return lo
}
