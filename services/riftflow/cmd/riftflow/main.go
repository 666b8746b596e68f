// Command riftflow is riftflow's CLI; see package riftflow or `riftflow help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/riftflow/riftflow/pkg/redact"
	"github.com/riftflow/riftflow/services/riftflow"
)

func main() {
	defer redact.Panics(os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, riftflow.Invocation{Args: os.Args[1:], Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}

// run is one CLI command (riftflow.Run: `up`, `ingest`, `status`, …; see
// `riftflow help`) under ctx, which ends on SIGINT/SIGTERM; it returns the
// exit code.
func run(ctx context.Context, inv riftflow.Invocation) int {
	return riftflow.Run(ctx, inv)
}
