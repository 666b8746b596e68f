package natsx

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/natsx/subject"
)

// ReplayFilter selects dead letters for Replay and says where they may
// go. Zero fields match all.
type ReplayFilter struct {
	// Stream is the stream the messages came from, e.g. "FETCHED": the
	// last token of the dead letter's own subject (<prefix>.dead.<stream>),
	// never a header its publisher wrote.
	Stream string
	// Contains must appear in the payload or in one of its headers other
	// than the dead-letter ones (a match ID, a PUUID).
	Contains string
	// Limit is the most messages replayed in one call; default 100.
	Limit int
	// Rewrite, if set, may replace the message Replay is about to publish
	// for a dead letter of stream (e.g. turn a fetch result into a fetch
	// command); an error refuses the dead letter with that reason.
	Rewrite func(stream string, out *nats.Msg) (*nats.Msg, error)
	// Allow, if set, is asked last whether a dead letter stored on
	// deadSubject may be republished on target; an error refuses it with
	// that reason (streams.ReplayRights: only where a non-admin user that
	// may publish on deadSubject could publish itself).
	Allow func(deadSubject, target string) error
}

// MaxRefusals is how many refusal reasons a ReplayResult keeps.
const MaxRefusals = 20

// ReplayResult counts what Replay did.
type ReplayResult struct {
	Replayed int // republished to their original subject and removed from the dead-letter stream
	Skipped  int // did not match the filter
	// Refused counts dead letters that matched but were not replayed
	// because their target is not one their stream and publisher allow
	// (a forgery, or a stale letter); they stay in the dead-letter stream.
	Refused int
	// Refusals holds "<dead>/<seq>: <reason>" for the first MaxRefusals
	// refused letters.
	Refusals []string
}

// Replay republishes dead letters from the dead-letter stream dead (e.g.
// "DEAD") to the subject they were first published on, with their original
// headers (the Dead* headers removed) and Nats-Msg-Id "replay.<dead seq>",
// then deletes each replayed message from the dead-letter stream. A failure
// stops the replay: what was not replayed stays where it was. Messages are
// visited in stream order, so repeated calls with a Limit page through the
// stream.
//
// Whoever may publish a dead letter chooses every byte of it, so nothing in
// it is trusted for where it goes: the source stream is the last token of
// the letter's own subject (which NATS permissions bound), the target
// (DeadSubjectHeader) must be a plain subject (no wildcard, nothing under
// "$" or "_INBOX") that the source stream's current configuration captures,
// a DeadStreamHeader naming another stream refuses the letter, and then
// f.Rewrite and f.Allow have their say. A refused letter is counted in
// Refused, keeps its place in the dead-letter stream and does not stop the
// replay.
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
	streamSubjects := map[string][]string{} // source stream -> its subjects, read once
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && res.Replayed < f.Limit; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return res, fmt.Errorf("natsx: replay: get %s/%d: %w", dead, seq, err)
		}
		source := deadSource(info.Config.Subjects, m.Subject)
		if (f.Stream != "" && source != f.Stream) || (f.Contains != "" && !contains(m, f.Contains)) {
			res.Skipped++
			continue
		}
		out, err := replayTarget(ctx, js, streamSubjects, source, m, f)
		if errors.Is(err, errRefused) {
			res.Refused++
			if len(res.Refusals) < MaxRefusals {
				res.Refusals = append(res.Refusals, fmt.Sprintf("%s/%d: %v", dead, seq, err))
			}
			continue
		}
		if err != nil {
			return res, fmt.Errorf("natsx: replay %s/%d: %w", dead, seq, err)
		}
		subject := out.Subject
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

// errRefused marks a dead letter Replay will not republish.
var errRefused = errors.New("refused")

// refuse is errRefused with a reason.
func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errRefused}, args...)...)
}

// replayTarget is the message that replays dead letter m of stream source,
// or an errRefused error saying why it is not replayed (see Replay). known
// caches each source stream's subjects.
func replayTarget(ctx context.Context, js jetstream.JetStream, known map[string][]string, source string, m *jetstream.RawStreamMsg, f ReplayFilter) (*nats.Msg, error) {
	if source == "" {
		return nil, refuse("its subject %s is not <dead-letter prefix>.<stream>", m.Subject)
	}
	if claimed := m.Header.Get(DeadStreamHeader); claimed != "" && claimed != source {
		return nil, refuse("it claims stream %s but was dead-lettered on %s", claimed, m.Subject)
	}
	target := m.Header.Get(DeadSubjectHeader)
	if err := plainSubject(target); err != nil {
		return nil, refuse("target %q: %v", target, err)
	}
	subjects, ok := known[source]
	if !ok {
		st, err := js.Stream(ctx, source)
		if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrInvalidStreamName) {
			known[source] = nil
			return nil, refuse("no stream %s (from its subject %s)", source, m.Subject)
		}
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", source, err)
		}
		subjects = st.CachedInfo().Config.Subjects
		known[source] = subjects
	}
	if !slices.ContainsFunc(subjects, func(s string) bool { return subject.Matches(s, target) }) {
		return nil, refuse("target %s is not a subject of stream %s %v", target, source, subjects)
	}
	out := &nats.Msg{Subject: target, Header: nats.Header{}, Data: m.Data}
	for k, v := range m.Header {
		if !strings.HasPrefix(k, deadHeaderPrefix) {
			out.Header[k] = v
		}
	}
	if f.Rewrite != nil {
		var err error
		if out, err = f.Rewrite(source, out); err != nil {
			return nil, refuse("%v", err)
		}
		if err := plainSubject(out.Subject); err != nil {
			return nil, refuse("rewritten target %q: %v", out.Subject, err)
		}
	}
	if f.Allow != nil {
		if err := f.Allow(m.Subject, out.Subject); err != nil {
			return nil, refuse("%v", err)
		}
	}
	return out, nil
}

// deadSource is the stream a dead letter stored on subject came from: the
// one token after the prefix of the dead-letter stream's subject filter
// ("lol.dead.>" and "lol.dead.FETCHED" give "FETCHED"); "" for any other
// shape.
func deadSource(deadSubjects []string, subject string) string {
	for _, f := range deadSubjects {
		prefix, ok := strings.CutSuffix(f, ">")
		if !ok {
			continue
		}
		if rest, ok := strings.CutPrefix(subject, prefix); ok && rest != "" && !strings.ContainsAny(rest, ".*>") {
			return rest
		}
	}
	return ""
}

// plainSubject is nil for a subject a replay may publish on: non-empty
// tokens, no wildcard, not a system subject ("$JS.…", "$KV.…", "$SYS.…")
// and not an inbox.
func plainSubject(s string) error {
	switch {
	case s == "":
		return errors.New("no target subject")
	case strings.HasPrefix(s, "$"):
		return errors.New("a system subject")
	case strings.HasPrefix(s, "_INBOX"):
		return errors.New("an inbox")
	case strings.ContainsAny(s, "*> \t\r\n"):
		return errors.New("a wildcard or space")
	case slices.Contains(strings.Split(s, "."), ""):
		return errors.New("an empty token")
	}
	return nil
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
