// Command natsnode runs one JetStream nats-server process sized for a
// small node, for benchmarks that need NATS in its own process
// (make bench-pipeline). Not a production binary.
//
//	natsnode -port 4333 -store /tmp/nats -max-mem 64MiB -max-store 8GiB
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/riftflow/riftflow/internal/natsembed"
)

func main() {
	port := flag.Int("port", 4222, "client port")
	store := flag.String("store", "", "JetStream store directory (required)")
	maxMem := flag.Int64("max-mem", natsembed.SmallNodeMaxMemory, "JetStream memory-storage limit, bytes")
	maxStore := flag.Int64("max-store", natsembed.SmallNodeMaxStore, "JetStream file-storage limit, bytes")
	flag.Parse()
	srv, err := natsembed.StartServer(natsembed.Options{Name: "natsnode", StoreDir: *store, Port: *port,
		JetStreamMaxMemory: *maxMem, JetStreamMaxStore: *maxStore, NoLog: true,
		Configure: func(o *server.Options) { o.NoSigs = true }})
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsnode:", err)
		os.Exit(1)
	}
	fmt.Println("nats://127.0.0.1:" + fmt.Sprint(*port))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	srv.Shutdown()
	srv.WaitForShutdown()
}
