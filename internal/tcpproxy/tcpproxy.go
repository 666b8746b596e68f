// Package tcpproxy is a loopback TCP proxy for fault injection in tests: it
// forwards every connection to a target address and can black-hole the
// link (a network partition: bytes stop flowing both ways and new
// connections hang, but nothing is closed or reset, as when packets are
// dropped) and heal it again. When it heals, what a sender wrote meanwhile
// arrives, as TCP retransmits it, unless the sender reset the connection
// in between (SO_LINGER 0), which drops it. Dev and test only: no
// production binary links internal/.
package tcpproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// Proxy forwards connections from Addr() to a target. The zero value is
// not usable; call Start.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	holed   bool
	healed  chan struct{} // closed when the black hole ends
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
	carried int64
}

// Start listens on a free loopback port and forwards each accepted
// connection to target (host:port).
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, healed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.healed)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listen address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Blackhole starts (on = true) or ends a partition. While it lasts, no
// byte is forwarded in either direction and new connections are accepted
// but not connected onward; when it ends, held bytes flow again (TCP
// retransmission after a transient partition).
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on == p.holed {
		return
	}
	p.holed = on
	if on {
		p.healed = make(chan struct{})
	} else {
		close(p.healed)
	}
}

// Holed reports whether the link is black-holed.
func (p *Proxy) Holed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.holed
}

// Bytes is the number of bytes forwarded so far, both directions.
func (p *Proxy) Bytes() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.carried
}

// wait blocks while the link is black-holed; false when the proxy closed.
func (p *Proxy) wait() bool {
	p.mu.Lock()
	ch, closed := p.healed, p.closed
	p.mu.Unlock()
	if closed {
		return false
	}
	<-ch
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			c.Close()
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) serve(in net.Conn) {
	defer p.wg.Done()
	defer p.untrack(in)
	waited := p.Holed()
	if !p.wait() {
		return
	}
	var pending []byte
	if waited {
		// Connected during the black hole: what the client wrote meanwhile
		// sat in its send queue, and a client that reset the connection
		// (gave up) had it dropped.
		var ok bool
		if pending, ok = drainHeld(in, nil); !ok {
			return
		}
	}
	out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(out) {
		out.Close()
		return
	}
	defer p.untrack(out)
	if len(pending) > 0 {
		if _, err := out.Write(pending); err != nil {
			return
		}
		p.count(len(pending))
	}
	done := make(chan struct{}, 2)
	go func() { p.pipe(out, in); done <- struct{}{} }()
	go func() { p.pipe(in, out); done <- struct{}{} }()
	<-done
}

// pipe copies src to dst chunk by chunk. A chunk read while the link is
// black-holed is held until it heals and then forwarded with whatever src
// sent meanwhile, unless src was reset in between: a sender that resets a
// connection drops the bytes it was still retransmitting, so across a real
// partition they never arrive (a normal close keeps retransmitting them,
// and they do).
func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if p.Holed() {
				if !p.wait() {
					return
				}
				var ok bool
				if chunk, ok = drainHeld(src, chunk); !ok {
					return
				}
			}
			if _, werr := dst.Write(chunk); werr != nil {
				return
			}
			p.count(len(chunk))
		}
		if err != nil {
			return
		}
	}
}

// drainHeld reads what src sent after held, once a black hole healed,
// until src has nothing more for now. ok is false when src was reset: the
// held bytes are dropped, as the sender's reset dropped them.
func drainHeld(src net.Conn, held []byte) (_ []byte, ok bool) {
	defer src.SetReadDeadline(time.Time{})
	buf := make([]byte, 32<<10)
	for {
		src.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
		n, err := src.Read(buf)
		held = append(held, buf[:n]...)
		var ne net.Error
		switch {
		case err == nil:
			continue
		case errors.Is(err, syscall.ECONNRESET):
			return nil, false
		case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, io.EOF):
			return held, true
		default:
			return nil, false
		}
	}
}

func (p *Proxy) count(n int) {
	p.mu.Lock()
	p.carried += int64(n)
	p.mu.Unlock()
}

// Close stops listening, closes every connection and waits for the
// forwarding goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	if p.holed {
		close(p.healed)
		p.holed = false
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}
