package riftflow

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
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
	sum := sha256.Sum256([]byte(puuid))
	res := ForgetResult{PUUIDHash: hex.EncodeToString(sum[:8]), KVKeys: []string{}}
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

// cmdForget is `riftflow forget --puuid P`.
func cmdForget(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("forget", flag.ContinueOnError)
	fs.SetOutput(stderr)
	puuid := fs.String("puuid", "", "the player to erase")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *puuid == "" {
		return errors.New("usage: riftflow forget --puuid P")
	}
	env, log, nc, js, err := connectCLI(ctx, "riftflow-forget", stderr)
	if err != nil {
		return err
	}
	defer nc.Close()
	st, err := openStore(ctx, env)
	if err != nil {
		return err
	}
	defer st.Close()
	res, err := ForgetPlayer(ctx, st, js, *puuid, log, time.Now())
	if err != nil {
		return err
	}
	out, _ := json.MarshalIndent(res, "", "  ")
	fmt.Fprintln(stdout, string(out))
	return nil
}

// connectCLI loads the environment and connects a CLI command to NATS
// (NATS_URL, or the local `riftflow up`'s); the caller closes nc.
func connectCLI(ctx context.Context, name string, stderr io.Writer) (app.Env, *slog.Logger, *nats.Conn, jetstream.JetStream, error) {
	env, err := app.LoadEnv()
	if err != nil {
		return env, nil, nil, nil, err
	}
	// Admin commands (pause, forget, rotate-key, retry): a local `riftflow
	// up`'s admin user, whose permissions cover every bucket they write.
	if err := localNATS(&env, true); err != nil {
		return env, nil, nil, nil, err
	}
	log := newLogger(stderr, env)
	nc, js, err := app.ConnectNATS(ctx, env.NATS, nil, name, log)
	return env, log, nc, js, err
}
