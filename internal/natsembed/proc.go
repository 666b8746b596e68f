package natsembed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
)

// ProcCluster is a loopback JetStream cluster whose nodes are separate OS
// processes of the nats-node command (internal/cmd/nats-node), so a test
// can SIGKILL a node (kill -9: no shutdown, no flush) and start it again
// on the same ports and store. Nodes are named n0..n<n-1>.
type ProcCluster struct {
	bin, dir string
	mu       sync.Mutex
	args     [][]string
	procs    []*exec.Cmd
	done     []chan struct{}
	urls     []string
}

// StartProcCluster starts n nodes of the nats-node binary bin with stores
// and logs (n<i>.log) under dir, and waits (up to 60 s) until JetStream
// answers on every node.
func StartProcCluster(bin string, n int, dir string) (*ProcCluster, error) {
	if n < 1 {
		return nil, errors.New("natsembed: StartProcCluster needs n ≥ 1")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("natsembed: cluster dir: %w", err)
	}
	ports, routes, err := clusterPorts(n)
	if err != nil {
		return nil, err
	}
	c := &ProcCluster{bin: bin, dir: dir, procs: make([]*exec.Cmd, n), done: make([]chan struct{}, n)}
	for i := range n {
		c.args = append(c.args, []string{"-name", fmt.Sprintf("n%d", i), "-store", filepath.Join(dir, fmt.Sprintf("n%d", i)),
			"-port", strconv.Itoa(ports[i]), "-cluster-port", strconv.Itoa(ports[n+i]), "-routes", strings.Join(routes, ",")})
		c.urls = append(c.urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	for i := range n {
		if err := c.Start(i); err != nil {
			c.Shutdown()
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range n {
		if err := c.WaitJetStream(ctx, i); err != nil {
			c.Shutdown()
			return nil, err
		}
	}
	return c, nil
}

// URLs returns every node's client URL, in node order.
func (c *ProcCluster) URLs() []string { return append([]string(nil), c.urls...) }

// Start starts node i (a no-op when it runs).
func (c *ProcCluster) Start(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done[i] != nil {
		select {
		case <-c.done[i]:
		default:
			return nil
		}
	}
	f, err := os.OpenFile(filepath.Join(c.dir, fmt.Sprintf("n%d.log", i)), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.bin, c.args[i]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("natsembed: start node n%d: %w", i, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); f.Close(); close(done) }()
	c.procs[i], c.done[i] = cmd, done
	return nil
}

// Kill sends SIGKILL to node i and waits for it to be gone.
func (c *ProcCluster) Kill(i int) { c.signal(i, syscall.SIGKILL, 0) }

// Stop sends SIGTERM to node i and waits up to 10 s, then SIGKILLs it.
func (c *ProcCluster) Stop(i int) { c.signal(i, syscall.SIGTERM, 10*time.Second) }

func (c *ProcCluster) signal(i int, sig syscall.Signal, grace time.Duration) {
	c.mu.Lock()
	cmd, done := c.procs[i], c.done[i]
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	if grace == 0 {
		<-done
		return
	}
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// Running reports whether node i's process is alive.
func (c *ProcCluster) Running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done[i] == nil {
		return false
	}
	select {
	case <-c.done[i]:
		return false
	default:
		return true
	}
}

// Pid returns the process id of node i, or 0 when it does not run.
func (c *ProcCluster) Pid(i int) int {
	if !c.Running(i) {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[i].Process.Pid
}

// WaitJetStream polls node i until its JetStream API answers (the meta
// group has a leader), or ctx ends.
func (c *ProcCluster) WaitJetStream(ctx context.Context, i int) error {
	var last error
	for {
		nc, err := nats.Connect(c.urls[i], nats.Timeout(time.Second))
		if err == nil {
			var resp *nats.Msg
			resp, err = nc.Request("$JS.API.INFO", nil, 2*time.Second)
			if err == nil && strings.Contains(string(resp.Data), `"error"`) {
				err = errors.New(string(resp.Data))
			}
			nc.Close()
		}
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("natsembed: node n%d JetStream not ready: %v: %w", i, last, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Shutdown stops every node (SIGTERM, then SIGKILL after 10 s).
func (c *ProcCluster) Shutdown() {
	var wg sync.WaitGroup
	for i := range c.procs {
		wg.Add(1)
		go func() { defer wg.Done(); c.Stop(i) }()
	}
	wg.Wait()
}
