package retrysweeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/fault"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/streams"
)

// advisory is the part of JetStream's max_deliver and terminated advisories
// the sweeper reads (nats-server jetstream_events.go).
type advisory struct {
	Type       string `json:"type"`
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
	Reason     string `json:"reason"`
}

// exhausted reports whether a is a MAX_DELIVERIES advisory (else the
// message was terminated).
func (a advisory) exhausted() bool { return strings.HasSuffix(a.Type, "max_deliver") }

// how says what happened to a's message, for logs and the ledger:
// "exhausted its deliveries" or "was terminated (<reason>)".
func (a advisory) how() string {
	if a.exhausted() {
		return "exhausted its deliveries"
	}
	return "was terminated (" + a.Reason + ")"
}

// HandleAdvisory turns a JetStream MAX_DELIVERIES or MSG_TERMINATED
// advisory about a fetch message into a ledger entry, so nothing ends
// silently:
//   - a FetchCommand (FETCH stream) that exhausted its deliveries becomes a
//     failed attempt: temporary_failure (the sweeper retries it later),
//     whatever its attempt count (running out of deliveries says nothing
//     about the match);
//   - a FetchResult (FETCHED stream) the persister could not write is
//     recorded with its own outcome, except that a success whose rows were
//     never stored becomes temporary_failure, so it is fetched again.
//
// An ingest request (INGEST) or sync command (SYNC) that exhausted its
// deliveries ends as a request that waited too long does (endRequest): its
// job, if still pending, becomes rejected (503, with the reason) and a
// Rejection is published, so neither the job log nor whoever follows the
// request waits for ever.
//
// The ledger rules make the entry idempotent (a replayed advisory, or an
// outcome the persister already recorded before terminating, changes
// nothing). An exhausted message is then copied to DEAD and deleted from
// its work-queue stream. A terminated message is usually gone already
// (work-queue streams drop it on the terminating ack): then only the log
// remains, and riftflow's services record the outcome themselves before
// terminating.
//
// An exhausted message never stays in its work queue, where it would stall
// the sweeper (a FETCHED result reads as "persister behind", a FETCH
// command keeps its region's syncs looking healthy):
//   - the entry's text is cleaned first (store.CleanText: no NUL byte, valid
//     UTF-8), so a Riot error text with \u0000 is recorded;
//   - a ledger write that fails for a Postgres outage is retried, and the
//     consumer pauses until Postgres answers a ping (Run's probe), as the
//     persister and the lister do: an outage costs no deliveries;
//   - an entry Postgres refuses for its data (Invalid: it can never be
//     recorded), or one still failing on the advisory's last delivery, is
//     given up: the message is still dead-lettered (with the reason) and
//     deleted. Its ledger row is then not final, so the sweeper fetches it
//     again; nothing is lost.
func (s *Service) HandleAdvisory(ctx context.Context, d natsx.Delivery) natsx.Result {
	var a advisory
	if err := json.Unmarshal(d.Data, &a); err != nil {
		return natsx.Rejectf("invalid advisory: %v", err)
	}
	log := s.d.Logger.With("stream", a.Stream, "consumer", a.Consumer, "stream_seq", a.StreamSeq, "type", a.Type)
	exhausted, how := a.exhausted(), a.how()
	if !exhausted {
		log.InfoContext(ctx, "message terminated", "reason", a.Reason, "deliveries", a.Deliveries)
	}
	st, err := s.d.JS.Stream(ctx, a.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return natsx.Ack()
	}
	if err != nil {
		return natsx.Retry(fmt.Errorf("stream %s: %w", a.Stream, err))
	}
	raw, err := st.GetMsg(ctx, a.StreamSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return natsx.Ack()
	}
	if err != nil {
		return natsx.Retry(fmt.Errorf("get %s/%d: %w", a.Stream, a.StreamSeq, err))
	}
	// On the advisory's last delivery an exhausted message is removed
	// whatever failed, rather than left in its work queue when the settle
	// policy gives the advisory up.
	last := d.Last
	note, err := s.recordGiveUp(ctx, log, a, raw, last)
	if err != nil {
		return natsx.Fail(fmt.Errorf("record advisory: %w", err))
	}
	deadReason := "JetStream: message exhausted its deliveries" + note
	if exhausted && (a.Stream == streams.StreamIngest || a.Stream == streams.StreamSync) {
		// A request no consumer will deliver again: its pending job (and
		// whoever follows it) must not wait for ever.
		reason := fmt.Errorf("gave up: the request %s after %d deliveries on %s/%s; send it again", how, a.Deliveries, a.Stream, a.Consumer)
		if _, err := s.endRequest(ctx, a.Stream, raw, reason, map[string]any{"exhausted_in": a.Stream}, "exhausted"); err != nil && !last {
			return natsx.Fail(err)
		}
	}
	if exhausted {
		// Keep the payload in the dead-letter stream before the work queue
		// forgets it: `riftflow retry --dead` can replay it.
		if s.d.Dead != nil {
			err := s.d.Dead.Publish(ctx, natsx.DeadInfo{Subject: raw.Subject, Header: raw.Header, Data: raw.Data,
				Stream: a.Stream, Consumer: a.Consumer, Sequence: a.StreamSeq, Deliveries: a.Deliveries,
				Kind: fault.Transient, Reason: deadReason})
			if err != nil && !last {
				return natsx.Retry(err)
			}
			if err != nil {
				log.ErrorContext(ctx, "could not dead-letter the exhausted message on the advisory's last delivery; removed all the same", "err", err)
			}
		}
		if err := st.DeleteMsg(ctx, a.StreamSeq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			log.WarnContext(ctx, "could not delete the exhausted message", "err", err)
			return natsx.Retry(fmt.Errorf("delete %s/%d: %w", a.Stream, a.StreamSeq, err))
		}
	}
	return natsx.Ack()
}

// recordGiveUp records in the ledger the fetch that raw, the message of
// advisory a, carried ("JetStream: message <how> after N deliveries on
// stream/consumer"), and advances the sync it belongs to. A message that
// is no fetch is only logged. It returns an error when the write failed
// and should be retried (not Invalid, not the advisory's last delivery);
// otherwise nil, and for an exhausted message that could not be recorded
// the note its dead letter's reason adds.
func (s *Service) recordGiveUp(ctx context.Context, log *slog.Logger, a advisory, raw *jetstream.RawStreamMsg, last bool) (string, error) {
	how := a.how()
	lu, ok := s.ledgerEntry(raw.Header, raw.Data, fmt.Sprintf("JetStream: message %s after %d deliveries on %s/%s", how, a.Deliveries, a.Stream, a.Consumer))
	if !ok {
		log.WarnContext(ctx, "message "+how, "subject", raw.Subject)
		return "", nil
	}
	b := store.Batch{Ledger: []store.LedgerUpdate{lu}}
	b.StripNUL()
	res, err := s.d.Store.PersistBatch(ctx, b)
	switch kind := fault.KindOf(err); {
	case err == nil:
		s.life().Advance(ctx, res.Progress)
		log.WarnContext(ctx, "fetch message "+how+"; recorded in the ledger", "match_id", lu.MatchID, "kind", lu.Kind, "status", lu.Status)
	case kind != fault.Invalid && !last:
		log.WarnContext(ctx, "could not record the advisory, will retry", "match_id", lu.MatchID, "err", err)
		return "", err
	case !a.exhausted():
		// A terminated message left in its stream is not in a work
		// queue's way: the log is its trace.
		log.ErrorContext(ctx, "could not record the advisory; given up", "match_id", lu.MatchID, "err", err)
	default:
		// It can never be recorded (or the advisory is on its last
		// delivery): the message still leaves its work queue.
		log.ErrorContext(ctx, "could not record the exhausted message; dead-lettered and removed all the same",
			"match_id", lu.MatchID, "kind", kind.String(), "err", err)
		return "; not recorded in the ledger: " + store.CleanText(err.Error()), nil
	}
	return "", nil
}

// ledgerEntry maps an exhausted or terminated FetchCommand or FetchResult
// to its ledger update; ok is false for anything else.
func (s *Service) ledgerEntry(header map[string][]string, data []byte, reason string) (store.LedgerUpdate, bool) {
	// A FetchCommand decodes as a FetchResult too: match_id, kind, attempt,
	// game_creation_ms.
	r, err := bus.DecodeFetchResult(header, data)
	if err != nil || r.MatchID == "" || (r.Kind != bus.KindMatch && r.Kind != bus.KindTimeline) {
		return store.LedgerUpdate{}, false
	}
	lu := store.LedgerUpdate{MatchID: r.MatchID, Kind: string(r.Kind), Attempt: max(r.Attempt, 1), HTTPStatus: r.Status,
		Error: reason, AttemptedAt: s.d.Now()}
	if r.GameCreationMs > 0 {
		lu.GameCreation = time.UnixMilli(r.GameCreationMs).UTC()
	}
	switch r.Outcome {
	case bus.PermanentlyUnfetchable, bus.OutsideRetentionWindow:
		lu.Status = string(r.Outcome)
		if r.Error != "" {
			lu.Error = r.Error + " (" + reason + ")"
		}
	case bus.TemporaryFailure, bus.Success, "": // "" is a FetchCommand
		lu.Status = string(bus.TemporaryFailure)
	default:
		return store.LedgerUpdate{}, false
	}
	return lu, true
}
