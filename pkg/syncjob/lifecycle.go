package syncjob

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/synclock"
)

// Lifecycle applies a sync's lifecycle to NATS: progress events on
// lol.progress.<puuid> and the account's lock in the sync-locks bucket.
// The persister and the retry-sweeper call Advance after a ledger write
// that moved syncs, the lister Fail when a sync ends with an error.
type Lifecycle struct {
	JS       jetstream.JetStream
	Subjects bus.Subjects
	Locks    natsx.Lock
	Logger   *slog.Logger
	Now      func() time.Time
	// LockTTL, when > 0, renews for that long the lock of each sync
	// Advance reports still syncing; 0 leaves it to the lock's heartbeat.
	LockTTL time.Duration
	// Duration, when not nil, records each finished sync's seconds since
	// its lock was claimed, with attribute status.
	Duration metric.Float64Histogram
	// By names the stage in the "sync finished" log line ("" none).
	By string
}

// Advance publishes the progress of every sync in progress and, for each
// one finished (completed or failed), releases its lock first: a client
// that starts the next sync on the final event must not find the account
// still locked (409). A publish failure is logged; the next write
// publishes again.
func (l Lifecycle) Advance(ctx context.Context, progress []Progress) {
	for _, p := range progress {
		if p.Status.Finished() {
			if l.Duration != nil {
				if v, err := synclock.Get(ctx, l.Locks, p.PUUID); err == nil && v.RequestID == p.RequestID && !v.Since.IsZero() {
					l.Duration.Record(ctx, l.Now().Sub(v.Since).Seconds(), metric.WithAttributes(attribute.String("status", string(p.Status))))
				}
			}
			synclock.Release(ctx, l.Locks, p.PUUID, p.RequestID, l.Logger)
			l.Logger.InfoContext(ctx, "sync finished", "request_id", p.RequestID, "puuid", p.PUUID, "status", p.Status,
				"matches", p.Total, "pending", p.Pending, "by", l.By)
		} else if l.LockTTL > 0 {
			synclock.Renew(ctx, l.Locks, p.PUUID, p.RequestID, l.LockTTL)
		}
		l.publish(ctx, bus.ProgressEvent{RequestID: p.RequestID, PUUID: p.PUUID, Status: string(p.Status), Progress: p.Progress,
			Total: p.Total, Pending: p.Pending, At: l.Now()})
	}
}

// Fail publishes the final failed progress event of requestID on puuid
// with reason, which ends its followers' streams (SSE, `ingest --wait`).
func (l Lifecycle) Fail(ctx context.Context, requestID, puuid, reason string) {
	l.publish(ctx, bus.ProgressEvent{RequestID: requestID, PUUID: puuid, Status: string(Failed), Error: reason, At: l.Now()})
}

func (l Lifecycle) publish(ctx context.Context, ev bus.ProgressEvent) {
	if _, err := natsx.Publish(ctx, l.JS, l.Subjects.Progress(ev.PUUID), ev); err != nil {
		l.Logger.WarnContext(ctx, "publish progress failed", "request_id", ev.RequestID, "puuid", ev.PUUID, "err", err)
	}
}
