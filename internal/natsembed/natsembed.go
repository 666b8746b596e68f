// Package natsembed runs nats-server inside the process: one JetStream
// server for `riftflow up` and tests (StartServer), or a loopback JetStream
// cluster for failover tests (StartCluster). It is the only riftflow package
// that imports github.com/nats-io/nats-server/v2/server, and it lives under
// internal/ so that no service binary links it; services connect to a
// nats-server over NATS_URL.
package natsembed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Limits for a small node (2 cores, a few GB of RAM), used by `riftflow up`
// and the benchmark's nats-server process: memory storage is capped well
// below the machine (riftflow's streams are file-backed; only a few KV
// buckets live in memory), file storage at what a small disk spares.
const (
	SmallNodeMaxMemory = 64 << 20
	SmallNodeMaxStore  = 8 << 30
)

// readyTimeout bounds how long StartServer waits for a server to accept
// connections.
const readyTimeout = 10 * time.Second

// Options configures an embedded nats-server with JetStream enabled.
type Options struct {
	// Name is the server name (must be unique within a cluster). Default "riftflow".
	Name string
	// StoreDir is the JetStream file-store directory. Required.
	StoreDir string
	// Host is the client listen host. Default "127.0.0.1".
	Host string
	// Port is the client port: 0 picks a random free port, -1 does not
	// listen at all (in-process connections only, see natsx.ConnConfig.InProcess).
	Port int
	// WebSocketPort enables NATS over WebSocket (browsers read progress
	// events this way): 0 = off, -1 = random port. TLS is not configured, so
	// the listener runs with NoTLS; bind it to loopback or put a TLS proxy in
	// front of it.
	WebSocketPort int
	// MonitorPort enables the HTTP monitoring endpoint (/varz, /jsz): 0 = off,
	// -1 = random port.
	MonitorPort int
	// JetStreamMaxStore caps file storage in bytes; 0 = server default.
	JetStreamMaxStore int64
	// JetStreamMaxMemory caps memory storage (memory-backed streams and
	// KV buckets) in bytes; 0 = server default (75% of the machine's RAM).
	JetStreamMaxMemory int64
	// NoLog silences the server's own logger.
	NoLog bool
	// Configure, if set, is called on the assembled server.Options last, so
	// callers (tests, riftflow up) can add auth, TLS or cluster settings.
	Configure func(*server.Options)
}

// serverOptions turns Options into server.Options.
func (o Options) serverOptions() (*server.Options, error) {
	if o.StoreDir == "" {
		return nil, errors.New("natsembed: Options.StoreDir is required")
	}
	so := &server.Options{
		ServerName:         o.Name,
		Host:               o.Host,
		JetStream:          true,
		StoreDir:           o.StoreDir,
		JetStreamMaxStore:  o.JetStreamMaxStore,
		JetStreamMaxMemory: o.JetStreamMaxMemory,
		NoLog:              o.NoLog,
		NoSigs:             true,
	}
	if so.ServerName == "" {
		so.ServerName = "riftflow"
	}
	if so.Host == "" {
		so.Host = "127.0.0.1"
	}
	switch {
	case o.Port < 0:
		so.DontListen = true
	case o.Port == 0:
		so.Port = server.RANDOM_PORT
	default:
		so.Port = o.Port
	}
	if o.WebSocketPort != 0 {
		so.Websocket.Host = so.Host
		so.Websocket.Port = o.WebSocketPort
		if o.WebSocketPort < 0 {
			so.Websocket.Port = server.RANDOM_PORT
		}
		so.Websocket.NoTLS = true
	}
	if o.MonitorPort != 0 {
		so.HTTPHost = so.Host
		so.HTTPPort = o.MonitorPort
		if o.MonitorPort < 0 {
			so.HTTPPort = server.RANDOM_PORT
		}
	}
	if o.Configure != nil {
		o.Configure(so)
	}
	return so, nil
}

// StartServer starts an embedded nats-server with JetStream and waits until
// it accepts connections (up to 10 s). The caller owns the server: call
// Shutdown and WaitForShutdown when done.
func StartServer(o Options) (*server.Server, error) {
	so, err := o.serverOptions()
	if err != nil {
		return nil, err
	}
	return startServer(so, !o.NoLog)
}

func startServer(so *server.Options, logs bool) (*server.Server, error) {
	s, err := server.NewServer(so)
	if err != nil {
		return nil, fmt.Errorf("natsembed: new server %q: %w", so.ServerName, err)
	}
	if logs {
		s.ConfigureLogger()
	}
	s.Start()
	if !s.ReadyForConnections(readyTimeout) {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, fmt.Errorf("natsembed: server %q not ready after %s", so.ServerName, readyTimeout)
	}
	return s, nil
}

// NodeOptions configures one node of a loopback JetStream cluster.
type NodeOptions struct {
	// Name is the server name, unique in the cluster.
	Name string
	// StoreDir is the node's JetStream file store (kept across restarts).
	StoreDir string
	// Port is the client port; ClusterPort the route port (both fixed,
	// on 127.0.0.1).
	Port, ClusterPort int
	// Routes are the nats-route:// URLs of every node (its own included).
	Routes []string
}

// ClusterName is the cluster name of StartCluster and StartNode nodes.
const ClusterName = "riftflow-test"

func (o NodeOptions) serverOptions() *server.Options {
	return &server.Options{
		ServerName: o.Name,
		Host:       "127.0.0.1",
		Port:       o.Port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		NoSigs:     true,
		Cluster: server.ClusterOpts{
			Name: ClusterName,
			Host: "127.0.0.1",
			Port: o.ClusterPort,
		},
		Routes: server.RoutesFromStr(strings.Join(o.Routes, ",")),
	}
}

// StartNode starts one clustered JetStream node and waits until it accepts
// client connections (up to 10 s); it logs to stderr when logs is true.
// The nats-node command (internal/cmd/nats-node) runs one node per OS
// process with it.
func StartNode(o NodeOptions, logs bool) (*server.Server, error) {
	so := o.serverOptions()
	so.NoLog = !logs
	return startServer(so, logs)
}

// Cluster is an in-process JetStream cluster of embedded servers on
// loopback, for failover tests and local experiments. Each node keeps its
// StoreDir across Kill and Restart.
type Cluster struct {
	mu      sync.Mutex
	opts    []*server.Options // pristine options per node; cloned at each start
	servers []*server.Server  // nil while a node is killed
	urls    []string
}

// StartCluster starts n (≥1) clustered JetStream servers named n0..n<n-1>,
// with stores under baseDir/n<i>, and waits (up to 30 s) for a JetStream
// meta leader with every node current. Client and route ports are fixed free
// loopback ports picked at start, so Restart reuses them and URLs stays
// valid.
func StartCluster(n int, baseDir string) (*Cluster, error) {
	if n < 1 {
		return nil, errors.New("natsembed: StartCluster needs n ≥ 1")
	}
	ports, routes, err := clusterPorts(n)
	if err != nil {
		return nil, err
	}
	c := &Cluster{servers: make([]*server.Server, n)}
	for i := range n {
		dir := filepath.Join(baseDir, fmt.Sprintf("n%d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("natsembed: cluster store dir: %w", err)
		}
		o := NodeOptions{Name: fmt.Sprintf("n%d", i), StoreDir: dir, Port: ports[i], ClusterPort: ports[n+i], Routes: routes}.serverOptions()
		o.NoLog = true
		c.opts = append(c.opts, o)
		c.urls = append(c.urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	for i := range n {
		s, err := startServer(c.opts[i].Clone(), false)
		if err != nil {
			c.Shutdown()
			return nil, err
		}
		c.servers[i] = s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitLeader(ctx); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

// URLs returns the client URL of every node (including killed ones), in
// node order; join them with "," for nats.Connect.
func (c *Cluster) URLs() []string { return append([]string(nil), c.urls...) }

// Server returns node i, or nil while it is killed.
func (c *Cluster) Server(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers[i]
}

// Kill shuts node i down and waits until it has stopped. Killing a killed
// node is a no-op.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	s := c.servers[i]
	c.servers[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Restart starts node i again with its original options and StoreDir
// (killing it first if it is running) and waits until it accepts
// connections. It does not wait for JetStream to catch up; use WaitLeader.
func (c *Cluster) Restart(i int) error {
	c.Kill(i)
	s, err := startServer(c.opts[i].Clone(), false)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.servers[i] = s
	c.mu.Unlock()
	return nil
}

// WaitLeader polls until exactly one running node is the JetStream meta
// leader and every running node reports itself current, or ctx ends.
func (c *Cluster) WaitLeader(ctx context.Context) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		c.mu.Lock()
		leaders, current, running := 0, 0, 0
		for _, s := range c.servers {
			if s == nil {
				continue
			}
			running++
			if s.JetStreamIsLeader() {
				leaders++
			}
			if s.JetStreamIsCurrent() {
				current++
			}
		}
		c.mu.Unlock()
		if leaders == 1 && current == running {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("natsembed: no JetStream meta leader (leaders=%d current=%d/%d): %w", leaders, current, running, ctx.Err())
		case <-t.C:
		}
	}
}

// Shutdown stops every running node.
func (c *Cluster) Shutdown() {
	for i := range c.servers {
		c.Kill(i)
	}
}

// clusterPorts picks free client ports (ports[:n]) and route ports
// (ports[n:]) for n nodes, and the nats-route:// URL of every route port.
func clusterPorts(n int) (ports []int, routes []string, err error) {
	if ports, err = freePorts(2 * n); err != nil {
		return nil, nil, err
	}
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i]))
	}
	return ports, routes, nil
}

// freePorts reserves n distinct free loopback TCP ports by listening on
// port 0 and closing the listeners together at the end.
func freePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("natsembed: free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
