package natsx

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrScheduleDuplicate is returned (wrapped) by Schedule when the stream
// already holds a message with the same Nats-Msg-Id inside its duplicate
// window, so no new schedule was stored. That is the expected outcome when
// a handler re-runs after a crash and schedules the same retry again (treat
// it as success). It is a bug when the id is the one the original message
// used: see Schedule.
var ErrScheduleDuplicate = errors.New("natsx: schedule deduplicated")

// Schedule stores a copy of m (data and headers) on scheduleSubject and has
// the server publish it to targetSubject at (about) at, using JetStream
// message schedules (ADR-51). The message does not occupy a consumer's
// MaxAckPending slot while it waits, unlike NakDelay, so ack the original
// after Schedule returns nil. The stream must have AllowMsgSchedules and
// cover both subjects, which must differ (the FETCH stream covers
// bus.Subjects.FetchRetry and Fetch). at has 1-second resolution; a time in
// the past fires at once. The current trace context is injected, so the
// delivered message continues the trace.
//
// Headers and dedup (verified in TestScheduleDeliversWithHeadersNotDeduped,
// nats-server 2.15.2): every custom header (traceparent, …) is copied to
// the delivered message, but the server strips Nats-Msg-Id, Nats-TTL,
// Nats-Rollup, Nats-Expected-* and Nats-Schedule-* from it and adds
// Nats-Scheduler (the schedule subject) and Nats-Schedule-Next: purge. So:
//   - the delivered retry never has a message id and is never swallowed by
//     the stream's dedup window, even if the original fetch used
//     Nats-Msg-Id "NA1_1" seconds ago;
//   - a Nats-Msg-Id on m deduplicates the schedule itself: give each retry
//     its own id ("NA1_1/match/a2"), never the original's ("NA1_1"), or
//     the schedule is dropped as a duplicate of the original fetch and
//     Schedule returns ErrScheduleDuplicate.
//
// Errors: ErrScheduleDuplicate (wrapped), jetstream.ErrMessageSchedulesDisabled,
// jetstream.ErrScheduleTargetInvalid, or other publish errors.
func Schedule(ctx context.Context, js jetstream.JetStream, m *nats.Msg, at time.Time, scheduleSubject, targetSubject string) error {
	sm := nats.NewMsg(scheduleSubject)
	sm.Data = m.Data
	for k, vs := range m.Header {
		sm.Header[k] = append([]string(nil), vs...)
	}
	ack, err := PublishMsg(ctx, js, sm, jetstream.WithScheduleAt(at.UTC()), jetstream.WithScheduleTarget(targetSubject))
	if err != nil {
		return fmt.Errorf("natsx: schedule %s → %s at %s: %w", scheduleSubject, targetSubject, at.Format(time.RFC3339), err)
	}
	if ack.Duplicate {
		return fmt.Errorf("%w: %s (msg id %q, existing seq %d)", ErrScheduleDuplicate, scheduleSubject, sm.Header.Get(jetstream.MsgIDHeader), ack.Sequence)
	}
	return nil
}
