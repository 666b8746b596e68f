package riftflow

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/streams"
)

// cmdMigrate is `riftflow migrate`: the SQL migrations on DATABASE_URL, or
// on the database of a local `riftflow up`.
func cmdMigrate(ctx context.Context, stderr io.Writer) error {
	env, url, err := loadDB()
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx, url, newLogger(stderr, env)); err != nil {
		return err
	}
	fmt.Fprintln(stderr, "migrations applied")
	return nil
}

// cmdStreams is `riftflow streams apply` (cmdStreamsApply).
func cmdStreams(ctx context.Context, args []string, _, stderr io.Writer) error {
	if len(args) < 1 || args[0] != "apply" {
		return errors.New("usage: riftflow streams apply")
	}
	return cmdStreamsApply(ctx, stderr)
}

// cmdStreamsApply creates or updates every stream, consumer and bucket
// streams/ declares, on NATS_URL or, as its admin, a local `riftflow up`'s
// server.
func cmdStreamsApply(ctx context.Context, stderr io.Writer) error {
	env, log, nc, js, err := connectCLI(ctx, "riftflow-streams-apply", stderr)
	if err != nil {
		return err
	}
	defer nc.Close()
	set, err := streams.Load(streams.Options{Prefix: env.NATS.SubjectPrefix, Replicas: env.NATS.StreamReplicas})
	if err != nil {
		return err
	}
	if err := streams.Apply(ctx, js, set, log); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "applied %d streams, %d consumers, %d KV buckets\n", len(set.Streams), len(set.Consumers), len(set.Buckets))
	return nil
}
