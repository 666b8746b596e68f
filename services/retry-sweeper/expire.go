package retrysweeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/syncjob"
	"github.com/riftflow/riftflow/pkg/tick"
	"github.com/riftflow/riftflow/streams"
)

// Requests that wait too long. INGEST and SYNC drop a message at their
// max_age (24 h, 7 d) whether or not anyone read it: held by the pause
// switch for a day, or with its consumers down, a request would vanish
// before any job row or rejection exists, and whoever follows it would
// wait for ever. Every ExpireEvery, whatever the pause switch says, each
// replica ends instead the requests still in INGEST or SYNC within
// ExpireMargin of their stream's max_age: their job becomes rejected
// (code 503, with the reason; a pending row too), a Rejection is
// published on lol.ingest.rejected (which ends the SSE stream and
// `ingest --wait`), and the message is deleted. Replicas may race on a
// message: the job write only ends a job that never started, the
// rejection's Nats-Msg-Id is the message's, and a second delete finds
// nothing.
//
// A request that old is not being worked on: its consumer is held by the
// pause switch, down, or waiting to deliver it again. One a held consumer
// had already pulled when the switch went on may still be handled after
// the pause from the runner's memory; its sync then never starts, because
// store.BeginSync refuses a request whose job was rejected.

// expireLoop runs Expire every ExpireEvery until ctx ends.
func (s *Service) expireLoop(ctx context.Context) {
	tick.Every(ctx, s.cfg.ExpireEvery, func() {
		if n, err := s.Expire(ctx); err != nil && ctx.Err() == nil {
			s.d.Logger.WarnContext(ctx, "expiring waiting requests failed", "ended", n, "err", err)
		}
	})
}

// Expire ends, once, every request waiting in INGEST or SYNC whose age (on
// the NATS server's clock) is within ExpireMargin of its stream's max_age
// (past half the max_age when the margin is not shorter than it), oldest
// first, and returns how many it ended. It stops at the first error (NATS
// or Postgres unreachable), leaving the rest for the next run.
func (s *Service) Expire(ctx context.Context) (int, error) {
	n := 0
	for _, name := range []string{streams.StreamIngest, streams.StreamSync} {
		st, err := s.d.JS.Stream(ctx, name)
		if err != nil {
			return n, fmt.Errorf("sweeper: stream %s: %w", name, err)
		}
		info := st.CachedInfo() // its TimeStamp is the server's time for the ages
		maxAge := info.Config.MaxAge
		if maxAge <= 0 {
			continue
		}
		after := maxAge - s.cfg.ExpireMargin
		if after <= 0 {
			after = maxAge / 2
		}
		for seq := uint64(1); ; {
			m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(">"))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				return n, fmt.Errorf("sweeper: next message in %s: %w", name, err)
			}
			age := natsx.StoredAge(info, m.Time)
			if age < after {
				break // the rest are younger
			}
			if err := s.expire(ctx, st, name, m, age, maxAge); err != nil {
				return n, err
			}
			n++
			seq = m.Sequence + 1
		}
	}
	return n, nil
}

// expire ends one waiting request: job, rejection, then the message.
func (s *Service) expire(ctx context.Context, st jetstream.Stream, stream string, m *jetstream.RawStreamMsg, age, maxAge time.Duration) error {
	reason := fmt.Errorf("expired: waited %s in %s without being processed (syncing paused, or its service down); "+
		"%s drops requests after %s: send it again", age.Round(time.Second), stream, stream, maxAge)
	id, err := s.endRequest(ctx, stream, m, reason, map[string]any{"expired_in": stream}, "expired")
	if err != nil {
		return err
	}
	if err := st.DeleteMsg(ctx, m.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("sweeper: delete expired %s/%d: %w", stream, m.Sequence, err)
	}
	s.d.Logger.WarnContext(ctx, "waiting request expired", "request_id", id, "stream", stream, "age", age.Round(time.Second))
	return nil
}

// endRequest ends the request m (an IngestRequest in INGEST or a
// SyncCommand in SYNC, stored at m.Sequence) that will never be processed,
// for reason: its job becomes rejected (code 503, with reason and detail)
// unless it started already, and a Rejection is published on
// lol.ingest.rejected with Nats-Msg-Id "<how>:<stream>:<sequence>" (which
// ends the SSE stream and `ingest --wait`). A request INGEST holds without
// a request id is named as the resolver names it (bus.StoredRequestID);
// one that does not decode is ended without a job. It returns the request
// id ("" when unknown).
func (s *Service) endRequest(ctx context.Context, stream string, m *jetstream.RawStreamMsg, reason error, detail map[string]any, how string) (string, error) {
	var req struct {
		RequestID   string    `json:"request_id"`
		PUUID       string    `json:"puuid"`
		Mode        string    `json:"mode"`
		Trigger     string    `json:"trigger"`
		RequestedBy string    `json:"requested_by"`
		RequestedAt time.Time `json:"requested_at"`
	}
	_ = json.Unmarshal(m.Data, &req) // a malformed one is still ended, without a job
	if stream == streams.StreamIngest && req.RequestID == "" {
		if _, err := bus.DecodeIngestRequest(m.Data); err == nil {
			// Its pending job (HandleQueued) is named as the resolver
			// would have named it.
			req.RequestID = bus.StoredRequestID(m.Time, m.Sequence)
		}
	}
	detail["code"] = http.StatusServiceUnavailable
	r := syncjob.Refusal{RequestID: req.RequestID, PUUID: req.PUUID, RequestedBy: req.RequestedBy, RequestedAt: req.RequestedAt,
		Mode: req.Mode, Trigger: req.Trigger, Code: http.StatusServiceUnavailable, Reason: reason, At: s.d.Now(),
		Detail: detail, Subject: m.Subject, Raw: m.Data}
	if req.RequestID != "" {
		ended, err := s.d.Store.EndWaitingJob(ctx, r.Job())
		if err != nil {
			return req.RequestID, fmt.Errorf("sweeper: job of %s request %s: %w", how, req.RequestID, err)
		}
		if !ended {
			s.d.Logger.WarnContext(ctx, how+" request has a job that already started; its message is removed", "request_id", req.RequestID)
		}
	}
	if err := syncjob.Announce(ctx, s.d.JS, s.d.Subjects, r, jetstream.WithMsgID(bus.EndedRequestMsgID(how, stream, m.Sequence))); err != nil {
		return req.RequestID, fmt.Errorf("sweeper: rejection of %s request %s: %w", how, req.RequestID, err)
	}
	return req.RequestID, nil
}
