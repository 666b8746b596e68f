package tcpproxy

import (
	"bufio"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// serveEach listens on loopback and runs handle on each connection (then
// closes it); it returns the address.
func serveEach(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// echo starts a line echo server and returns its address.
func echo(t *testing.T) string {
	return serveEach(t, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			c.Write([]byte(l))
		}
	})
}

func roundTrip(c net.Conn, r *bufio.Reader, msg string, wait time.Duration) (string, error) {
	c.SetDeadline(time.Now().Add(wait))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	return r.ReadString('\n')
}

// TestBlackholeHoldsThenHeals: bytes stop flowing during the black hole
// (a read times out, the connection stays open) and the held line arrives
// once it heals; a connection made during the hole connects after it.
func TestBlackholeHoldsThenHeals(t *testing.T) {
	p, err := Start(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, "one", 2*time.Second); err != nil || got != "one\n" {
		t.Fatalf("before: %q %v", got, err)
	}
	p.Blackhole(true)
	if got, err := roundTrip(c, r, "two", 300*time.Millisecond); err == nil {
		t.Fatalf("black hole forwarded %q", got)
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	r2 := bufio.NewReader(c2)
	c2.SetDeadline(time.Now().Add(300 * time.Millisecond))
	c2.Write([]byte("three\n"))
	if _, err := r2.ReadString('\n'); err == nil {
		t.Fatal("new connection forwarded during the black hole")
	}
	p.Blackhole(false)
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("held line after heal: %q %v", got, err)
	}
	c2.SetDeadline(time.Now().Add(2 * time.Second))
	if got, err := r2.ReadString('\n'); err != nil || got != "three\n" {
		t.Fatalf("held connection after heal: %q %v", got, err)
	}
	if p.Bytes() == 0 {
		t.Fatal("no bytes counted")
	}
}

// sink is a target that records every byte it receives, of every
// connection.
func sink(t *testing.T) (addr string, got func() string) {
	var mu sync.Mutex
	var b strings.Builder
	addr = serveEach(t, func(c net.Conn) {
		buf := make([]byte, 1024)
		for {
			n, err := c.Read(buf)
			mu.Lock()
			b.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	})
	return addr, func() string { mu.Lock(); defer mu.Unlock(); return b.String() }
}

// TestBlackholeDropsWhatAResetSenderGaveUp: across a partition, a sender
// that resets its connection (a client giving up on a request, SO_LINGER
// 0) has its unsent bytes dropped; one that closes normally has them
// retransmitted, so they arrive when the link heals. Both for a connection
// made before the black hole and for one made during it.
func TestBlackholeDropsWhatAResetSenderGaveUp(t *testing.T) {
	target, got := sink(t)
	p, err := Start(target)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dial := func() *net.TCPConn {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.TCPConn)
	}
	before, beforeKept := dial(), dial()
	if _, err := before.Write([]byte("up;")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for got() != "up;" && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got() != "up;" {
		t.Fatalf("before the black hole: target got %q", got())
	}
	p.Blackhole(true)
	during, duringKept := dial(), dial()
	for _, w := range []struct {
		c     *net.TCPConn
		msg   string
		reset bool
	}{{before, "lost-before;", true}, {beforeKept, "kept-before;", false}, {during, "lost-during;", true}, {duringKept, "kept-during;", false}} {
		if _, err := w.c.Write([]byte(w.msg)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // the proxy reads it while holed
		if w.reset {
			w.c.SetLinger(0)
		}
		w.c.Close()
	}
	time.Sleep(50 * time.Millisecond)
	if s := got(); s != "up;" {
		t.Fatalf("during the black hole the target got %q", s)
	}
	p.Blackhole(false)
	deadline = time.Now().Add(2 * time.Second)
	for !(strings.Contains(got(), "kept-before;") && strings.Contains(got(), "kept-during;")) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	s := got()
	if !strings.Contains(s, "kept-before;") || !strings.Contains(s, "kept-during;") {
		t.Fatalf("a normal close's bytes did not arrive after the heal: target got %q", s)
	}
	if strings.Contains(s, "lost") {
		t.Fatalf("a reset sender's bytes arrived after the heal: target got %q", s)
	}
}
