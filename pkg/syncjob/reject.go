package syncjob

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/fault"
	"github.com/riftflow/riftflow/pkg/natsx"
)

// JobLog records a refused request's job: the store's RecordJobOnce (a
// job that has a row already is left as it is).
type JobLog interface {
	RecordJobOnce(ctx context.Context, j Job) (bool, error)
}

// Refusal is a request refused for good: who asked, what, and why.
type Refusal struct {
	RequestID   string
	PUUID       string // "" when not known
	RequestedBy string
	RequestedAt time.Time // zero: At
	Mode        string
	Trigger     string
	Code        int // HTTP-like: 400, 404, 409, 503
	Reason      error
	At          time.Time
	// Detail is added to the job's detail beside mode and trigger.
	Detail map[string]any
	// Subject and Raw are the refused message's subject and payload, echoed
	// (Raw's first 256 bytes) in the bus.Rejection.
	Subject string
	Raw     []byte
}

// Job is r's jobs row: type sync, status rejected, r's reason as the
// error; detail holds mode, trigger and r.Detail.
func (r Refusal) Job() Job {
	d := map[string]any{"mode": r.Mode, "trigger": r.Trigger}
	maps.Copy(d, r.Detail)
	detail, _ := json.Marshal(d)
	requested := r.RequestedAt
	if requested.IsZero() {
		requested = r.At
	}
	return Job{ID: r.RequestID, Type: TypeSync, PUUID: r.PUUID, RequestedBy: r.RequestedBy, Status: Rejected,
		Error: r.Reason.Error(), Detail: detail, RequestedAt: requested, FinishedAt: r.At}
}

// Rejection is r's bus.Rejection.
func (r Refusal) Rejection() bus.Rejection {
	return bus.NewRejection(r.RequestID, r.Subject, r.Code, r.Reason, r.Raw, r.At)
}

// Announce publishes r's bus.Rejection on lol.ingest.rejected (read by
// `riftflow ingest --wait`, SSE clients and the retry-sweeper, which ends
// a pending job) with opts (a Nats-Msg-Id).
func Announce(ctx context.Context, js jetstream.JetStream, subjects bus.Subjects, r Refusal, opts ...jetstream.PublishOpt) error {
	_, err := natsx.Publish(ctx, js, subjects.IngestRejected(), r.Rejection(), opts...)
	return err
}

// Record logs r in the job log (RecordJobOnce) unless its id has a jobs
// row already; a failure is logged.
func Record(ctx context.Context, jobs JobLog, r Refusal, log *slog.Logger) {
	if _, err := jobs.RecordJobOnce(ctx, r.Job()); err != nil {
		log.WarnContext(ctx, "job log: rejected request not recorded", "request_id", r.RequestID, "err", err)
	}
}

// Reject refuses the delivered request d for good: it publishes a
// bus.Rejection with code and reason (Announce), logs it, and returns the
// error that settles d: a 404 (no such account) is Gone and only
// terminated; any other code is Invalid and dead-lettered, so that
// `riftflow retry --dead` can replay it.
func Reject(ctx context.Context, js jetstream.JetStream, subjects bus.Subjects, log *slog.Logger, d natsx.Delivery,
	requestID string, code int, reason error, now time.Time) error {
	r := Refusal{RequestID: requestID, Code: code, Reason: reason, At: now, Subject: d.Subject, Raw: d.Data}
	msg := r.Rejection().Reason
	log.WarnContext(ctx, "request rejected", "request_id", requestID, "code", code, "reason", msg)
	if err := Announce(ctx, js, subjects, r); err != nil {
		log.ErrorContext(ctx, "publish rejection failed", "err", err)
	}
	if code == 404 {
		return fault.Wrap(fault.Gone, errors.New(msg))
	}
	return fault.Wrap(fault.Invalid, errors.New(msg))
}
