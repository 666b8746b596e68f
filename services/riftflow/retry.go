package riftflow

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/streams"
)

// cmdRetry is `riftflow retry --dead`: it republishes messages that a
// consumer gave up on (the DEAD stream: invalid input, or out of
// deliveries during an outage) to the subject they were first published
// on, at most --limit per run (100, as the fetch ledger's retry job does).
func cmdRetry(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("retry", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dead := fs.Bool("dead", false, "replay dead letters (the DEAD stream)")
	stream := fs.String("stream", "", "only messages that came from this stream (e.g. FETCHED, FETCH, SYNC, INGEST)")
	match := fs.String("match", "", "only messages whose payload contains this text (a match ID, a PUUID)")
	limit := fs.Int("limit", 100, "most messages replayed in this run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !*dead {
		return errors.New("usage: riftflow retry --dead [--stream S] [--match TEXT] [--limit N]")
	}
	if *limit <= 0 {
		return fmt.Errorf("--limit must be positive, got %d", *limit)
	}
	env, err := app.LoadEnv()
	if err != nil {
		return err
	}
	if err := localNATS(&env, true); err != nil {
		return err
	}
	nc, js, err := app.ConnectNATS(ctx, env.NATS, nil, "riftflow-retry", newLogger(stderr, env))
	if err != nil {
		return err
	}
	defer nc.Close()
	res, err := natsx.Replay(ctx, js, streams.StreamDead, natsx.ReplayFilter{Stream: *stream, Contains: *match, Limit: *limit})
	fmt.Fprintf(stdout, "replayed %d dead letters (%d others did not match)\n", res.Replayed, res.Skipped)
	return err
}
