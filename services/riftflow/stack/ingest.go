package stack

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/syncjob"
)

// The client side of an ingest request on NATS, as `riftflow ingest` and
// the demo send one: published on lol.ingest.request (or its background
// subject), then followed through its progress events and rejections.

// PublishIngest publishes req on subj.IngestFor(req.Priority), with the
// message id bus.IngestMsgID (JetStream drops a second publish of the same
// request) and a producer span whose context travels in the headers: the
// root of the request's trace.
func PublishIngest(ctx context.Context, nc *nats.Conn, subj bus.Subjects, req bus.IngestRequest) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	m := nats.NewMsg(subj.IngestFor(req.Priority))
	m.Data = data
	m.Header.Set(nats.MsgIdHdr, bus.IngestMsgID(req.RequestID))
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	_, err = natsx.PublishMsg(ctx, js, m)
	return err
}

// IngestAndWait publishes req (PublishIngest) and follows its progress
// events and rejections, printing progress lines to out, until the sync
// completes or fails (its last event) or is rejected (an error with the
// code and reason), or ctx ends.
func IngestAndWait(ctx context.Context, nc *nats.Conn, subj bus.Subjects, req bus.IngestRequest, out io.Writer) (bus.ProgressEvent, error) {
	events := make(chan *nats.Msg, 256)
	sub1, err := nc.ChanSubscribe(subj.ProgressAll(), events)
	if err != nil {
		return bus.ProgressEvent{}, err
	}
	defer sub1.Unsubscribe()
	sub2, err := nc.ChanSubscribe(subj.IngestRejected(), events)
	if err != nil {
		return bus.ProgressEvent{}, err
	}
	defer sub2.Unsubscribe()
	if err := PublishIngest(ctx, nc, subj, req); err != nil {
		return bus.ProgressEvent{}, err
	}
	fmt.Fprintf(out, "request %s published on %s\n", req.RequestID, subj.IngestFor(req.Priority))
	last := -1
	for {
		select {
		case <-ctx.Done():
			return bus.ProgressEvent{}, fmt.Errorf("waiting for request %s: %w", req.RequestID, ctx.Err())
		case m := <-events:
			if m.Subject == subj.IngestRejected() {
				var r bus.Rejection
				if json.Unmarshal(m.Data, &r) == nil && r.RequestID == req.RequestID {
					return bus.ProgressEvent{}, fmt.Errorf("rejected (%d): %s", r.Code, r.Reason)
				}
				continue
			}
			var ev bus.ProgressEvent
			if json.Unmarshal(m.Data, &ev) != nil || ev.RequestID != req.RequestID {
				continue
			}
			if ev.Progress != last || syncjob.Status(ev.Status) != syncjob.Syncing {
				fmt.Fprintf(out, "  %-9s %d/%d matches\n", ev.Status, ev.Progress, ev.Total)
				last = ev.Progress
			}
			if syncjob.Status(ev.Status).Finished() {
				return ev, nil
			}
		}
	}
}
