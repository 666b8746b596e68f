package retrysweeper

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/syncjob"
)

// HandleQueued reads one copy of an ingest request INGEST stored
// (lol.ingest.queued.>, consumer "retry-sweeper-queued" on EVENTS: the
// stream's RePublish) and records the request as a pending sync job
// (store.QueueSync), so a request published straight on NATS is pending in
// the job log, the account's status and `riftflow status` from the moment
// INGEST stored it, while the pause switch, a backlog or a stopped
// resolver holds it. Run reads these copies whatever the pause switch
// says.
//
// The job is the one the resolver and the lister then work on: its id is
// the request's, or, for a request without one, bus.StoredRequestID of its
// time and sequence in INGEST (the Nats-Time-Stamp and Nats-Sequence
// headers), as the resolver names it. A request by Riot ID has no PUUID
// yet: its job carries the Riot ID (detail.riot_id, which `riftflow status
// --riot-id` finds) and gets its PUUID when the lister starts it. A job
// that exists already (recorded by the HTTP API, the CLI or the scheduler
// when they accepted the request, or started, finished or refused since)
// is left unchanged. A copy that does not decode as a valid request, which
// the resolver refuses without a request id, records nothing. A database
// failure is retried through the settle policy.
func (s *Service) HandleQueued(ctx context.Context, d natsx.Delivery) natsx.Result {
	req, err := bus.DecodeIngestRequest(d.Data)
	if err != nil {
		return natsx.Ack()
	}
	if req.RequestID == "" || req.RequestedAt.IsZero() {
		stored, seq, err := storedAt(d.Header)
		if err != nil {
			return natsx.Rejectf("copy of an ingest request: %v", err)
		}
		if req.RequestID == "" {
			req.RequestID = bus.StoredRequestID(stored, seq)
		}
		if req.RequestedAt.IsZero() {
			req.RequestedAt = stored
		}
	}
	created, err := s.d.Store.QueueSync(ctx, syncjob.Queued(req, req.PUUID))
	if err != nil {
		return natsx.Fail(err)
	}
	if created {
		s.d.Logger.InfoContext(ctx, "request queued", "request_id", req.RequestID, "puuid", req.PUUID, "riot_id", req.RiotID,
			"priority", req.Priority, "subject", d.Header.Get("Nats-Subject"))
	}
	return natsx.Ack()
}

// storedAt reads the time and sequence at which INGEST stored the request
// a republished copy carries, from its headers h (Nats-Time-Stamp and
// Nats-Sequence).
func storedAt(h nats.Header) (time.Time, uint64, error) {
	seq, err := strconv.ParseUint(h.Get("Nats-Sequence"), 10, 64)
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("Nats-Sequence %q: %w", h.Get("Nats-Sequence"), err)
	}
	at, err := time.Parse(time.RFC3339Nano, h.Get("Nats-Time-Stamp"))
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("Nats-Time-Stamp %q: %w", h.Get("Nats-Time-Stamp"), err)
	}
	if seq == 0 {
		return time.Time{}, 0, errors.New("Nats-Sequence 0")
	}
	return at, seq, nil
}
