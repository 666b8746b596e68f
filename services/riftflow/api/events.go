package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/syncjob"
	"github.com/riftflow/riftflow/streams"
)

// syncEvents streams one request's progress as Server-Sent Events: "event:
// progress" with a bus.ProgressEvent, or "event: rejected" with a
// bus.Rejection, each as JSON in "data:". It ends after the final event
// (completed, failed, rejected), or after API_SSE_MAX_AGE (the client
// reconnects and gets the replay).
//
// A client may connect at any time after POST /v1/sync. A request already
// finished in the jobs table gets its outcome at once (progress counted
// from sync_matches). Otherwise the events are replayed from the EVENTS
// stream (an ordered consumer; the stream keeps an hour) and then followed
// live, so a fast rejection by the resolver (an unknown Riot ID answers in
// milliseconds) or the first progress events are not missed. A request id
// that is not in the jobs table, was not submitted through this API in the
// last hour and has no event in the replayed stream gets 404 once the
// replay is done, instead of a stream that never ends.
//
// Each open stream holds a JetStream consumer, so they are capped per token
// and in total (429 with Retry-After beyond).
func (a *API) syncEvents(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("request_id")
	if !validID(id, bus.MaxRequestIDLen) {
		writeProblemAt(w, r, http.StatusNotFound, "no such request")
		return
	}
	tok, _ := tokenFrom(ctx)
	release, ok := a.streams.acquire(tok.ID, a.Limits.SSEPerToken, a.Limits.SSETotal)
	if !ok {
		w.Header().Set("Retry-After", "5")
		writeProblemAt(w, r, http.StatusTooManyRequests, fmt.Sprintf("too many open event streams (at most %d per token, %d in all)",
			a.Limits.SSEPerToken, a.Limits.SSETotal))
		return
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, a.Limits.SSEMaxAge)
	defer cancel()
	rc := http.NewResponseController(w)
	// The stream is bounded by SSEMaxAge and the write deadline, not by
	// the server's ReadTimeout: clear the read deadline so the connection's
	// background read can never end it.
	_ = rc.SetReadDeadline(time.Time{})
	job, err := a.jobOf(ctx, id)
	if err != nil {
		writeError(w, r, http.StatusServiceUnavailable, err)
		return
	}
	if final, data, err := a.finishedEvent(ctx, job); err != nil {
		writeError(w, r, http.StatusServiceUnavailable, err)
		return
	} else if final != "" {
		startSSE(w)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", final, data)
		rc.Flush()
		return
	}
	// Known so far: in the jobs table, or submitted here. Otherwise the
	// replay decides.
	known := job.ID != "" || a.submitted.has(id)
	ch, backlog, stop, err := a.replayEvents(ctx, job)
	if err != nil {
		writeError(w, r, http.StatusServiceUnavailable, err)
		return
	}
	defer stop()
	out := &sseStream{w: w, rc: rc, keepalive: a.Limits.Keepalive}
	if known {
		if !out.write(": following %s\n\n", id) {
			return
		}
	}
	if backlog == 0 && !known {
		writeProblemAt(w, r, http.StatusNotFound, "no such request")
		return
	}
	keepalive := time.NewTicker(a.Limits.Keepalive)
	defer keepalive.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-keepalive.C:
			if out.started && !out.write(": keepalive\n\n") {
				return
			}
		case m := <-ch:
			switch a.relay(out, m, id) {
			case relayNotFound:
				writeProblemAt(w, r, http.StatusNotFound, "no such request")
				return
			case relayEnd:
				return
			}
		}
	}
}

// jobOf is the job of request id, or the zero Job when the jobs table has
// none (yet) or there is no store.
func (a *API) jobOf(ctx context.Context, id string) (store.Job, error) {
	if a.inf.Store == nil {
		return store.Job{}, nil
	}
	j, err := a.inf.Store.JobByID(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return store.Job{}, nil
	}
	return j, err
}

// replayEvents replays EVENTS from the start for the job's player (every
// player's progress when the job is not known yet) and the rejections,
// into ch. backlog is what the replay holds: delivered so far plus still
// pending (an ordered consumer exists only once consuming). stop ends it.
func (a *API) replayEvents(ctx context.Context, job store.Job) (ch chan jetstream.Msg, backlog uint64, stop func(), err error) {
	progress := a.inf.Subjects.ProgressAll()
	if job.PUUID != "" {
		progress = a.inf.Subjects.Progress(job.PUUID)
	}
	cons, err := a.inf.JS.OrderedConsumer(ctx, streams.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{progress, a.inf.Subjects.IngestRejected()},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, 0, nil, err
	}
	ch = make(chan jetstream.Msg, 256)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case ch <- m:
		case <-ctx.Done():
		}
	})
	if err != nil {
		return nil, 0, nil, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		cc.Stop()
		return nil, 0, nil, err
	}
	return ch, info.NumPending + info.Delivered.Consumer, cc.Stop, nil
}

// sseStream writes Server-Sent Events, the headers with the first write.
type sseStream struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	keepalive time.Duration
	started   bool
}

// write extends the write deadline (the server's WriteTimeout would cut a
// long stream), writes and flushes; false when the client is gone.
func (s *sseStream) write(format string, args ...any) bool {
	_ = s.rc.SetWriteDeadline(time.Now().Add(2 * s.keepalive))
	if !s.started {
		startSSE(s.w)
		s.started = true
	}
	if _, err := fmt.Fprintf(s.w, format, args...); err != nil {
		return false
	}
	return s.rc.Flush() == nil
}

// relayed is what relay did with one replayed message.
type relayed int

const (
	relayNext     relayed = iota // written or skipped: go on
	relayEnd                     // the last event of the request, or the client is gone
	relayNotFound                // the replay ended with no event of the request: it does not exist
)

// relay writes m to out when it is an event of request id: a progress
// event, or its rejection (the last). A final progress status (completed,
// failed) is the last too.
func (a *API) relay(out *sseStream, m jetstream.Msg, id string) relayed {
	var probe struct {
		RequestID string `json:"request_id"`
		Status    string `json:"status"`
	}
	if json.Unmarshal(m.Data(), &probe) != nil || probe.RequestID != id {
		if md, err := m.Metadata(); err == nil && md.NumPending == 0 && !out.started {
			return relayNotFound
		}
		return relayNext
	}
	event := "progress"
	if m.Subject() == a.inf.Subjects.IngestRejected() {
		event = "rejected"
	}
	if !out.write("event: %s\ndata: %s\n\n", event, m.Data()) {
		return relayEnd
	}
	if event == "rejected" || syncjob.Status(probe.Status).Finished() {
		return relayEnd
	}
	return relayNext
}

// startSSE writes the headers of a Server-Sent Events response.
func startSSE(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
}

// finishedEvent is the SSE event for a job that has already finished
// (completed, failed or rejected in the jobs table): its name and JSON, or
// "" when the job is unknown or still running.
func (a *API) finishedEvent(ctx context.Context, j store.Job) (string, []byte, error) {
	switch j.Status {
	case syncjob.Completed, syncjob.Failed:
		done, total, err := a.inf.Store.RequestProgress(ctx, j.ID)
		if err != nil {
			return "", nil, err
		}
		b, err := json.Marshal(bus.ProgressEvent{RequestID: j.ID, PUUID: j.PUUID, Status: string(j.Status),
			Progress: done, Total: total, Error: j.Error, At: j.FinishedAt})
		return "progress", b, err
	case syncjob.Rejected:
		// The code a rejection recorded in the job's detail (503 for a
		// request that expired waiting, the code a refused queued request
		// kept: store.RejectQueued), else 409, the lister's and the
		// API's refusal of a busy account.
		var d struct {
			Code int `json:"code"`
		}
		if json.Unmarshal(j.Detail, &d) != nil || d.Code == 0 {
			d.Code = http.StatusConflict
		}
		b, err := json.Marshal(bus.Rejection{RequestID: j.ID, Reason: j.Error, Code: d.Code, At: j.FinishedAt})
		return "rejected", b, err
	}
	return "", nil, nil
}
