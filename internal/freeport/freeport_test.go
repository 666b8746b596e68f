package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestGetIsBelowTheEphemeralRange: the port Get returns is free (a server
// can listen on it) and, where the kernel says its ephemeral range, below
// it, so no outgoing connection can have taken it as its local port.
func TestGetIsBelowTheEphemeralRange(t *testing.T) {
	lo := ephemeralLow()
	for range 50 {
		p, err := Get()
		if err != nil {
			t.Fatal(err)
		}
		if lo-lowest >= 1000 && (p < lowest || p >= lo) {
			t.Fatalf("port %d outside [%d, %d)", p, lowest, lo)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d not free: %v", p, err)
		}
		l.Close()
	}
}

// TestGetSkipsATakenPort: a port something listens on is never returned.
func TestGetSkipsATakenPort(t *testing.T) {
	var held []net.Listener
	taken := map[int]bool{}
	for range 20 {
		p, err := Get()
		if err != nil {
			t.Fatal(err)
		}
		if taken[p] {
			t.Fatalf("port %d returned while it is listened on", p)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d not free: %v", p, err)
		}
		held = append(held, l)
		taken[p] = true
	}
	for _, l := range held {
		l.Close()
	}
}
