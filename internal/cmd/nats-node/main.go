// Command nats-node runs one node of a loopback JetStream cluster as its own
// OS process, so that chaos tests can kill -9 a NATS node
// (natsembed.ProcCluster builds and starts it). Dev and test only.
//
//	nats-node -name n0 -port 4222 -cluster-port 6222 -store /tmp/n0 \
//	  -routes nats-route://127.0.0.1:6222,nats-route://127.0.0.1:6223,...
//
// SIGTERM or SIGINT shuts the node down cleanly; exit status 1 on a start
// error.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/riftflow/riftflow/internal/natsembed"
)

func main() {
	var o natsembed.NodeOptions
	var routes string
	var quiet bool
	flag.StringVar(&o.Name, "name", "n0", "server name, unique in the cluster")
	flag.StringVar(&o.StoreDir, "store", "", "JetStream store directory (required)")
	flag.IntVar(&o.Port, "port", 4222, "client port on 127.0.0.1")
	flag.IntVar(&o.ClusterPort, "cluster-port", 6222, "route port on 127.0.0.1")
	flag.StringVar(&routes, "routes", "", "comma-separated nats-route:// URLs of every node")
	flag.BoolVar(&quiet, "quiet", false, "no server log")
	flag.Parse()
	if o.StoreDir == "" {
		fmt.Fprintln(os.Stderr, "nats-node: -store is required")
		os.Exit(2)
	}
	if routes != "" {
		o.Routes = strings.Split(routes, ",")
	}
	s, err := natsembed.StartNode(o, !quiet)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nats-node:", err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	s.Shutdown()
	s.WaitForShutdown()
}
