package app

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/fault"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/store"
)

// QueuedSync is the pending job (store.QueueSync) of an ingest request
// accepted by the HTTP API, the CLI or the scheduler: puuid is its PUUID
// when known ("" for a Riot ID not resolved yet).
func QueuedSync(req bus.IngestRequest, puuid string) store.SyncRequest {
	return store.SyncRequest{RequestID: req.RequestID, PUUID: puuid, RiotID: req.RiotID, Platform: req.Platform,
		Mode: string(req.Mode), Trigger: req.Trigger, Priority: string(req.Priority), Force: req.Force,
		RequestedBy: req.RequestedBy, RequestedAt: req.RequestedAt}
}

// Reject refuses a request for good: it publishes a bus.Rejection with
// code and reason on lol.ingest.rejected (read by `riftflow ingest --wait`,
// SSE clients and the job log), logs it, and returns the settlement: a 404
// (no such account) is Gone and only terminated; any other code is Invalid
// and dead-lettered, so that `riftflow retry --dead` can replay it.
func Reject(ctx context.Context, js jetstream.JetStream, subjects bus.Subjects, log *slog.Logger, m jetstream.Msg,
	requestID string, code int, reason error, now time.Time) natsx.Result {
	rej := bus.NewRejection(requestID, m.Subject(), code, reason, m.Data(), now)
	log.WarnContext(ctx, "request rejected", "request_id", requestID, "code", code, "reason", rej.Reason)
	if _, err := natsx.Publish(ctx, js, subjects.IngestRejected(), rej); err != nil {
		log.ErrorContext(ctx, "publish rejection failed", "err", err)
	}
	if code == 404 {
		return natsx.Fail(fault.Wrap(fault.Gone, errors.New(rej.Reason)))
	}
	return natsx.Reject(errors.New(rej.Reason))
}
