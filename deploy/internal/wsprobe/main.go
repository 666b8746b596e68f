// Command wsprobe is the browser's side of progress over NATS WebSocket,
// for deploy/kube/e2e.sh: it connects to a NATS WebSocket listener
// (ws://host:port) as a user with a password, subscribes to one subject
// (wildcards allowed) and writes each message received as one line,
// "<subject> <payload>", to stdout. It exits 0 after the first message whose
// payload contains -until, 1 when -timeout passes first, 2 on a connection
// or subscription error.
//
//	wsprobe -url ws://127.0.0.1:18222 -user web -password P -subject 'lol.progress.>' -until '"completed"' -timeout 10m
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
)

func main() {
	url := flag.String("url", "", "NATS WebSocket URL, ws://host:port")
	user := flag.String("user", "web", "NATS user")
	password := flag.String("password", "", "the user's password (default: $NATS_PASSWORD)")
	subject := flag.String("subject", "lol.progress.>", "subject to subscribe to")
	until := flag.String("until", "", "exit 0 after a message whose payload contains this text (empty: the first message)")
	timeout := flag.Duration("timeout", 10*time.Minute, "exit 1 when no such message came within this long")
	flag.Parse()
	if *password == "" {
		*password = os.Getenv("NATS_PASSWORD")
	}
	nc, err := nats.Connect(*url, nats.UserInfo(*user, *password), nats.Timeout(10*time.Second), nats.Name("wsprobe"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "wsprobe: connect %s: %v\n", *url, err)
		os.Exit(2)
	}
	defer nc.Close()
	msgs := make(chan *nats.Msg, 4096)
	if _, err := nc.ChanSubscribe(*subject, msgs); err != nil {
		fmt.Fprintf(os.Stderr, "wsprobe: subscribe %s: %v\n", *subject, err)
		os.Exit(2)
	}
	if err := nc.Flush(); err != nil {
		fmt.Fprintf(os.Stderr, "wsprobe: subscribe %s: %v\n", *subject, err)
		os.Exit(2)
	}
	fmt.Fprintf(os.Stderr, "wsprobe: subscribed to %s on %s\n", *subject, nc.ConnectedUrl())
	deadline := time.After(*timeout)
	for {
		select {
		case m := <-msgs:
			fmt.Printf("%s %s\n", m.Subject, m.Data)
			if bytes.Contains(m.Data, []byte(*until)) {
				return
			}
		case <-deadline:
			fmt.Fprintf(os.Stderr, "wsprobe: no message containing %q on %s within %s\n", *until, *subject, *timeout)
			os.Exit(1)
		}
	}
}
