package riftflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/services/resolver"
	"github.com/riftflow/riftflow/streams"
)

// ForgetResult is what ForgetPlayer removed. The job that logs it
// (type forget) names the player only by PUUIDHash.
type ForgetResult struct {
	JobID     string          `json:"job_id"`
	PUUIDHash string          `json:"puuid_sha256"` // first 16 hex digits of SHA-256(puuid)
	Removed   store.Forgotten `json:"removed"`
	KVKeys    []string        `json:"kv_buckets"` // buckets whose key for the player was purged: cursors, sync-locks, riot-ids
}

// ForgetPlayer erases a player on request: store.ForgetAccount (rows, and
// matches no other stored account needs), then the player's cursor, sync
// lock and riot-ids cache entry; it logs what it removed and records a
// forget job that names the player only by a hash.
func ForgetPlayer(ctx context.Context, st *store.Store, js jetstream.JetStream, puuid string, log *slog.Logger, now time.Time) (ForgetResult, error) {
	res := ForgetResult{PUUIDHash: app.ShortHash(puuid), KVKeys: []string{}}
	res.JobID = "forget-" + res.PUUIDHash + "-" + randHex(4)
	f, err := st.ForgetAccount(ctx, puuid)
	if err != nil {
		return res, err
	}
	res.Removed = f
	keys := map[string]string{streams.BucketCursors: puuid, streams.BucketSyncLocks: puuid}
	if f.GameName != "" {
		keys[streams.BucketRiotIDs] = resolver.CacheKey(riot.RiotID{GameName: f.GameName, TagLine: f.TagLine})
	}
	for bucket, key := range keys {
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			return res, fmt.Errorf("open %s: %w", bucket, err)
		}
		if _, err := kv.Get(ctx, key); errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err := kv.Purge(ctx, key); err != nil {
			return res, fmt.Errorf("purge %s/%s: %w", bucket, key, err)
		}
		res.KVKeys = append(res.KVKeys, bucket)
	}
	res.Removed.GameName, res.Removed.TagLine = "", ""
	detail, _ := json.Marshal(res)
	if err := st.RecordJob(ctx, store.Job{ID: res.JobID, Type: "forget", Status: "completed", Detail: detail,
		RequestedAt: now, StartedAt: now, FinishedAt: now}); err != nil {
		return res, err
	}
	log.Info("player forgotten", "puuid_sha256", res.PUUIDHash, "removed", string(detail))
	return res, nil
}
