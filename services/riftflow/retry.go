package riftflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/store"
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
}

// errRetryUsage is returned for a request that selects nothing.
var errRetryUsage = errors.New("give match IDs, a PUUID, all, or dead")

func (r *RetryRequest) validate() error {
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
	if err := req.validate(); err != nil {
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
		id := cmd.MatchID
		if cmd.Kind == bus.KindTimeline {
			id += "/timeline"
		}
		// A publish failure leaves the row unfetched: the retry-sweeper
		// re-publishes it.
		if _, err := natsx.Publish(ctx, js, subj.FetchFor(string(region), cmd.Priority), cmd,
			jetstream.WithMsgID(id+cmd.DedupSuffix())); err != nil {
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
			d, err := natsx.Replay(ctx, js, streams.StreamDead, natsx.ReplayFilter{Stream: req.Stream, Contains: text, Limit: left})
			res.DeadReplayed += d.Replayed
			res.DeadSkipped = d.Skipped
			if err != nil {
				return res, err
			}
		}
	}
	detail, _ := json.Marshal(map[string]any{"filter": req, "reopened": res.Reopened, "dead_replayed": res.DeadReplayed})
	if err := st.RecordJob(ctx, store.Job{ID: res.RequestID, Type: "retry", PUUID: req.PUUID, Status: "completed",
		Detail: detail, RequestedAt: now, StartedAt: now, FinishedAt: now}); err != nil {
		return res, err
	}
	return res, nil
}
