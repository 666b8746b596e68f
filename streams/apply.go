package streams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrIncompatible is returned (wrapped) by Apply when an existing stream
// differs from its declaration in a way JetStream cannot update in place
// (retention to or from work queue, storage type). Fixing it means deleting
// and recreating the stream, which loses its messages: an operator's call.
var ErrIncompatible = errors.New("streams: existing stream is incompatible with its declaration")

// Apply creates or updates every stream, consumer and bucket of set, in
// that order. It is idempotent: applying an unchanged set changes nothing,
// and several processes may apply the same set at once (a create that loses
// the race is retried as an update). Each object is logged as created,
// updated or unchanged. Errors: ErrIncompatible (wrapped) for a stream that
// needs recreating; otherwise the first JetStream API error, naming the
// object.
func Apply(ctx context.Context, js jetstream.JetStream, set *Set, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.Default()
	}
	for _, cfg := range set.Streams {
		if err := applyStream(ctx, js, cfg, logger); err != nil {
			return err
		}
	}
	for _, c := range set.Consumers {
		if err := applyConsumer(ctx, js, c, logger); err != nil {
			return err
		}
	}
	for _, b := range set.Buckets {
		if err := applyStore("bucket", b.Bucket, func() error { _, err := js.CreateOrUpdateKeyValue(ctx, b); return err }); err != nil {
			return err
		}
		logger.Info("bucket applied", "bucket", b.Bucket, "ttl", b.TTL, "history", b.History, "limit_marker_ttl", b.LimitMarkerTTL, "replicas", b.Replicas)
	}
	for _, o := range set.Objects {
		if err := applyStore("object store", o.Bucket, func() error { _, err := js.CreateOrUpdateObjectStore(ctx, o); return err }); err != nil {
			return err
		}
		logger.Info("object store applied", "bucket", o.Bucket, "ttl", o.TTL, "replicas", o.Replicas)
	}
	return nil
}

// applyStore runs createOrUpdate for a KV bucket or an object store (kind)
// named name. A create that loses the race with another process fails with
// "already in use" or "exists"; it is retried once, now as an update.
func applyStore(kind, name string, createOrUpdate func() error) error {
	err := createOrUpdate()
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) || errors.Is(err, jetstream.ErrBucketExists) {
		err = createOrUpdate()
	}
	if err != nil {
		return fmt.Errorf("streams: %s %s: %w", kind, name, err)
	}
	return nil
}

func applyStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig, log *slog.Logger) error {
	action := "created"
	st, err := js.Stream(ctx, cfg.Name)
	switch {
	case err == nil:
		cur := st.CachedInfo().Config
		if cur.Retention != cfg.Retention && (cur.Retention == jetstream.WorkQueuePolicy || cfg.Retention == jetstream.WorkQueuePolicy) {
			return fmt.Errorf("%w: %s has retention %s, declared %s (delete and recreate it by hand; its messages are lost)",
				ErrIncompatible, cfg.Name, cur.Retention, cfg.Retention)
		}
		if cur.Storage != cfg.Storage {
			return fmt.Errorf("%w: %s has storage %s, declared %s (delete and recreate it by hand; its messages are lost)",
				ErrIncompatible, cfg.Name, cur.Storage, cfg.Storage)
		}
		action = "updated"
		if _, err = js.UpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("streams: update stream %s: %w", cfg.Name, err)
		}
		if after, ierr := js.Stream(ctx, cfg.Name); ierr == nil && reflect.DeepEqual(cur, after.CachedInfo().Config) {
			action = "unchanged"
		}
	case errors.Is(err, jetstream.ErrStreamNotFound):
		if _, err = js.CreateStream(ctx, cfg); errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Another process created it meanwhile: converge by updating.
			action = "updated"
			_, err = js.UpdateStream(ctx, cfg)
		}
		if err != nil {
			return fmt.Errorf("streams: create stream %s: %w", cfg.Name, err)
		}
	default:
		return fmt.Errorf("streams: stream %s: %w", cfg.Name, err)
	}
	log.Info("stream "+action, "stream", cfg.Name, "subjects", cfg.Subjects, "retention", cfg.Retention.String(), "replicas", cfg.Replicas)
	return nil
}

func applyConsumer(ctx context.Context, js jetstream.JetStream, c Consumer, log *slog.Logger) error {
	name := c.Config.Durable
	var before *jetstream.ConsumerConfig
	if cur, err := js.Consumer(ctx, c.Stream, name); err == nil {
		cfg := cur.CachedInfo().Config
		before = &cfg
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, c.Stream, c.Config)
	if err != nil {
		return fmt.Errorf("streams: consumer %s on %s: %w", name, c.Stream, err)
	}
	action := "created"
	if before != nil {
		action = "updated"
		if reflect.DeepEqual(*before, cons.CachedInfo().Config) {
			action = "unchanged"
		}
	}
	log.Info("consumer "+action, "stream", c.Stream, "consumer", name,
		"filter", append([]string{c.Config.FilterSubject}, c.Config.FilterSubjects...),
		"ack_wait", c.Config.AckWait, "max_deliver", c.Config.MaxDeliver, "max_ack_pending", c.Config.MaxAckPending)
	return nil
}
