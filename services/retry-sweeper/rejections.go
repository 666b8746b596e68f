package retrysweeper

import (
	"context"
	"encoding/json"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/natsx"
)

// HandleRejection reads one lol.ingest.rejected Rejection (consumer
// "retry-sweeper-rejections" on EVENTS) and ends the request's pending job
// (store.QueueSync) as rejected with the code and reason: the resolver,
// which refuses requests before any job row of theirs is written by a
// service, has no database. A rejection without a request id, or whose
// job is not pending, changes nothing. A database failure is retried
// through the settle policy.
func (s *Service) HandleRejection(ctx context.Context, d natsx.Delivery) natsx.Result {
	var r bus.Rejection
	if err := json.Unmarshal(d.Data, &r); err != nil {
		return natsx.Rejectf("invalid rejection: %v", err)
	}
	if r.RequestID == "" {
		return natsx.Ack()
	}
	ended, err := s.d.Store.RejectQueued(ctx, r.RequestID, r.Reason, r.Code)
	if err != nil {
		return natsx.Fail(err)
	}
	if ended {
		s.d.Logger.InfoContext(ctx, "queued request rejected", "request_id", r.RequestID, "code", r.Code, "reason", r.Reason)
	}
	return natsx.Ack()
}
