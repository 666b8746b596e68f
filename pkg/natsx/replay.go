package natsx

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ReplayFilter selects dead letters for Replay. Zero fields match all.
type ReplayFilter struct {
	// Stream is the stream the messages came from (DeadStreamHeader),
	// e.g. "FETCHED".
	Stream string
	// Contains must appear in the payload or in one of its headers other
	// than the dead-letter ones (a match ID, a PUUID).
	Contains string
	// Limit is the most messages replayed in one call; default 100.
	Limit int
}

// ReplayResult counts what Replay did.
type ReplayResult struct {
	Replayed int // republished to their original subject and removed from the dead-letter stream
	Skipped  int // did not match the filter
}

// Replay republishes dead letters from the dead-letter stream dead (e.g.
// "DEAD") to the subject they were first published on, with their original
// headers (the Dead* headers removed) and Nats-Msg-Id "replay.<dead seq>",
// then deletes each replayed message from the dead-letter stream. A failure
// stops the replay: what was not replayed stays where it was. Messages are
// visited in stream order, so repeated calls with a Limit page through the
// stream.
func Replay(ctx context.Context, js jetstream.JetStream, dead string, f ReplayFilter) (ReplayResult, error) {
	var res ReplayResult
	if f.Limit <= 0 {
		f.Limit = 100
	}
	st, err := js.Stream(ctx, dead)
	if err != nil {
		return res, fmt.Errorf("natsx: replay: dead-letter stream %s: %w", dead, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return res, fmt.Errorf("natsx: replay: %w", err)
	}
	if info.State.Msgs == 0 {
		return res, nil // an empty stream has FirstSeq > LastSeq, or both 0
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && res.Replayed < f.Limit; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return res, fmt.Errorf("natsx: replay: get %s/%d: %w", dead, seq, err)
		}
		if (f.Stream != "" && m.Header.Get(DeadStreamHeader) != f.Stream) ||
			(f.Contains != "" && !contains(m, f.Contains)) {
			res.Skipped++
			continue
		}
		subject := m.Header.Get(DeadSubjectHeader)
		if subject == "" {
			return res, fmt.Errorf("natsx: replay: %s/%d has no %s header", dead, seq, DeadSubjectHeader)
		}
		out := &nats.Msg{Subject: subject, Header: nats.Header{}, Data: m.Data}
		for k, v := range m.Header {
			if !strings.HasPrefix(k, deadHeaderPrefix) {
				out.Header[k] = v
			}
		}
		if _, err := js.PublishMsg(ctx, out, jetstream.WithMsgID("replay."+dead+"."+strconv.FormatUint(seq, 10))); err != nil {
			return res, fmt.Errorf("natsx: replay %s/%d to %s: %w", dead, seq, subject, err)
		}
		if err := st.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return res, fmt.Errorf("natsx: replay: delete %s/%d: %w", dead, seq, err)
		}
		res.Replayed++
	}
	return res, nil
}

// contains reports whether text is in m's data or in a header value other
// than the Riftflow-Dead-* ones (a FetchResult with its payload as data
// carries its match ID and PUUID in a header).
func contains(m *jetstream.RawStreamMsg, text string) bool {
	if strings.Contains(string(m.Data), text) {
		return true
	}
	for k, vs := range m.Header {
		if strings.HasPrefix(k, deadHeaderPrefix) {
			continue
		}
		for _, v := range vs {
			if strings.Contains(v, text) {
				return true
			}
		}
	}
	return false
}
