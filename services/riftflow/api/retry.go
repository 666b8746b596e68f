package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/syncjob"
	"github.com/riftflow/riftflow/streams"
)

// RetryRequest says which matches `riftflow retry` and POST
// /v1/admin/retry replay (design 000's retry job): permanently unfetchable
// ledger rows chosen by match ID, by player or all, and with Dead also the
// dead letters (the DEAD stream) that name them.
//
//	{"match_ids":["NA1_1"]} | {"puuid":"…"} | {"all":true}, plus "dead":true, "limit":100
type RetryRequest struct {
	MatchIDs []string `json:"match_ids,omitempty"`
	PUUID    string   `json:"puuid,omitempty"`
	All      bool     `json:"all,omitempty"`
	// Dead also replays dead letters: those whose payload names one of
	// MatchIDs or PUUID, or all of them with All (or no selector).
	Dead bool `json:"dead,omitempty"`
	// Stream limits dead letters to one source stream (FETCHED, FETCH, SYNC, INGEST).
	Stream string `json:"stream,omitempty"`
	// Limit caps the ledger rows and the dead letters replayed, each;
	// 0 → 100 (design 000).
	Limit int `json:"limit,omitempty"`
}

// RetryResult is what a replay did. RequestID names the jobs row (type
// retry) that logs it and the FetchCommands it published.
type RetryResult struct {
	RequestID    string   `json:"request_id"`
	Reopened     []string `json:"reopened"` // "<match id>/<kind>" put back to unfetched and republished
	DeadReplayed int      `json:"dead_replayed"`
	DeadSkipped  int      `json:"dead_skipped"`
	// DeadRefused counts dead letters not replayed because their target is
	// one their stream or their writer may not use (DeadReplayFilter); they
	// stay in DEAD. DeadRefusals says why, for the first few.
	DeadRefused  int      `json:"dead_refused"`
	DeadRefusals []string `json:"dead_refusals,omitempty"`
}

// errRetryUsage is returned for a request that selects nothing.
var errRetryUsage = errors.New("give match IDs, a PUUID, all, or dead")

func (r *RetryRequest) Validate() error {
	n := 0
	if len(r.MatchIDs) > 0 {
		n++
	}
	if r.PUUID != "" {
		n++
	}
	if r.All {
		n++
	}
	switch {
	case n == 0 && !r.Dead:
		return errRetryUsage
	case n > 1:
		return errors.New("give one of match IDs, a PUUID or all, not several")
	case r.Limit < 0 || r.Limit > 10000:
		return fmt.Errorf("limit %d out of range 0..10000", r.Limit)
	case len(r.MatchIDs) > 1000:
		return fmt.Errorf("%d match IDs, at most 1000", len(r.MatchIDs))
	}
	for _, id := range r.MatchIDs {
		if _, _, err := riot.ParseMatchID(id); err != nil {
			return err
		}
	}
	if r.Limit == 0 {
		r.Limit = store.DefaultReplayLimit
	}
	return nil
}

// RetryMatches replays what req selects: each permanently unfetchable
// ledger row is put back to unfetched (attempt 0) and its FetchCommand
// published again (interactive priority, forced so dedup keeps it), then
// dead letters are replayed when req.Dead; the run is logged as a jobs row
// of type retry. At most req.Limit (default 100) of each per run.
func RetryMatches(ctx context.Context, st *store.Store, js jetstream.JetStream, subj bus.Subjects, req RetryRequest, now time.Time) (RetryResult, error) {
	if err := req.Validate(); err != nil {
		return RetryResult{}, fmt.Errorf("%w: %v", bus.ErrBadRequest, err)
	}
	res := RetryResult{RequestID: "retry-" + randHex(8), Reopened: []string{}}
	rows, err := st.ReopenUnfetchable(ctx, store.ReplayFilter{MatchIDs: req.MatchIDs, PUUID: req.PUUID, All: req.All,
		Limit: req.Limit, RequestID: res.RequestID})
	if err != nil {
		return res, err
	}
	for _, r := range rows {
		_, region, _ := riot.ParseMatchID(r.MatchID)
		cmd := bus.FetchCommand{MatchID: r.MatchID, Kind: bus.Kind(r.Kind), Region: string(region), Attempt: 1,
			RequestID: res.RequestID, Priority: bus.Interactive, Force: true}
		if !r.GameCreation.IsZero() {
			cmd.GameCreationMs = r.GameCreation.UnixMilli()
		}
		// A publish failure leaves the row unfetched: the retry-sweeper
		// re-publishes it.
		if _, err := natsx.Publish(ctx, js, subj.FetchFor(string(region), cmd.Priority), cmd,
			jetstream.WithMsgID(bus.FetchMsgID(cmd))); err != nil {
			return res, fmt.Errorf("publish fetch of %s: %w", r.MatchID, err)
		}
		res.Reopened = append(res.Reopened, r.MatchID+"/"+r.Kind)
	}
	if req.Dead {
		texts := req.MatchIDs
		if req.PUUID != "" {
			texts = []string{req.PUUID}
		}
		if len(texts) == 0 {
			texts = []string{""}
		}
		for _, text := range texts {
			left := req.Limit - res.DeadReplayed
			if left <= 0 {
				break
			}
			f, err := DeadReplayFilter(subj, res.RequestID)
			if err != nil {
				return res, err
			}
			f.Stream, f.Contains, f.Limit = req.Stream, text, left
			d, err := natsx.Replay(ctx, js, streams.StreamDead, f)
			res.DeadReplayed += d.Replayed
			res.DeadSkipped = d.Skipped
			res.DeadRefused += d.Refused
			res.DeadRefusals = append(res.DeadRefusals, d.Refusals...)
			if err != nil {
				return res, err
			}
		}
	}
	detail, _ := json.Marshal(map[string]any{"filter": req, "reopened": res.Reopened, "dead_replayed": res.DeadReplayed})
	if err := st.RecordJob(ctx, store.Job{ID: res.RequestID, Type: "retry", PUUID: req.PUUID, Status: syncjob.Completed,
		Detail: detail, RequestedAt: now, StartedAt: now, FinishedAt: now}); err != nil {
		return res, err
	}
	return res, nil
}

// DeadReplayFilter is the natsx.ReplayFilter every dead-letter replay
// uses, for the subjects of subj:
//
//   - Allow is streams.ReplayRights: a letter goes only where a service
//     that may write its dead-letter subject may publish itself;
//   - Rewrite turns a FETCHED letter (a fetch result or failure outcome,
//     which only the fetcher may publish and which the persister or the
//     retry-sweeper wrote into DEAD) into a forced FetchCommand for its
//     match on the background fetch subject of the match ID's region, with
//     request ID requestID: the match is fetched from Riot again and no
//     payload a dead-letter writer could have forged is ever stored.
//
// Errors: the subject prefix is invalid.
func DeadReplayFilter(subj bus.Subjects, requestID string) (natsx.ReplayFilter, error) {
	set, err := streams.Load(streams.Options{Prefix: subj.Prefix})
	if err != nil {
		return natsx.ReplayFilter{}, err
	}
	allow, err := streams.ReplayRights(set)
	if err != nil {
		return natsx.ReplayFilter{}, err
	}
	rewrite := func(stream string, m *nats.Msg) (*nats.Msg, error) {
		if stream != streams.StreamFetched {
			return m, nil
		}
		r, err := bus.DecodeFetchResult(m.Header, m.Data)
		if err != nil {
			return nil, fmt.Errorf("not a fetch result: %w", err)
		}
		_, region, err := riot.ParseMatchID(r.MatchID)
		if err != nil {
			return nil, fmt.Errorf("fetch result: %w", err)
		}
		if r.Kind != bus.KindMatch && r.Kind != bus.KindTimeline {
			return nil, fmt.Errorf("fetch result of %s: unknown kind %q", r.MatchID, r.Kind)
		}
		cmd := bus.FetchCommand{MatchID: r.MatchID, Kind: r.Kind, Region: string(region), Attempt: 1,
			GameCreationMs: r.GameCreationMs, RequestID: requestID, PUUID: r.PUUID, Priority: bus.Background, Force: true}
		data, err := json.Marshal(cmd)
		if err != nil {
			return nil, err
		}
		return &nats.Msg{Subject: subj.FetchFor(string(region), cmd.Priority), Header: nats.Header{}, Data: data}, nil
	}
	return natsx.ReplayFilter{Allow: allow, Rewrite: rewrite}, nil
}
