package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/redact"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/syncjob"
	"github.com/riftflow/riftflow/services/resolver"
	"github.com/riftflow/riftflow/streams"
)

// ForgetResult is what ForgetPlayer removed. The job that logs it
// (type forget) names the player only by PUUIDHash.
type ForgetResult struct {
	JobID     string          `json:"job_id"`
	PUUIDHash string          `json:"puuid_sha256"` // first 16 hex digits of SHA-256(puuid)
	Removed   store.Forgotten `json:"removed"`
	// KVKeys are the buckets whose key for the player was erased
	// (cursors, sync-locks, riot-ids): purged from the bucket's stream by
	// subject, leaving no KV purge marker that would name it.
	KVKeys []string `json:"kv_buckets"`
	// CacheKeys counts the read-cache entries purged: the player's pages
	// and the bodies of every match they played in.
	CacheKeys int `json:"read_cache_keys"`
	// Events and DeadLetters count the messages of the EVENTS and DEAD
	// streams that named the player (subject, header or payload, gzip
	// payloads inflated), deleted.
	Events      int `json:"events"`
	DeadLetters int `json:"dead_letters"`
}

// ForgetPlayer erases a player on request: store.ForgetAccount (rows, the
// matches no other stored account needs, the player's participant rows
// and their fields in the raw documents of the matches kept), then the
// player's cursor, sync lock and riot-ids entry, their read-cache entries,
// and every EVENTS and DEAD message that names them; it logs what it
// removed and records a forget job that names the player only by a hash.
// The first failing step's error is returned with what was removed so
// far; running it again finishes the rest (store.ErrNotFound once the
// rows are gone: the NATS steps then still run).
func ForgetPlayer(ctx context.Context, st *store.Store, js jetstream.JetStream, puuid string, log *slog.Logger, now time.Time) (ForgetResult, error) {
	res := ForgetResult{PUUIDHash: redact.ShortHash(puuid), KVKeys: []string{}}
	res.JobID = "forget-" + res.PUUIDHash + "-" + randHex(4)
	f, notFound := st.ForgetAccount(ctx, puuid)
	if notFound != nil && !errors.Is(notFound, store.ErrNotFound) {
		return res, notFound
	}
	res.Removed = f
	needles := [][]byte{[]byte(puuid)}
	// riot-ids holds the player's Riot ID and, when a request named no
	// platform, their active platform.
	keys := [][2]string{{streams.BucketCursors, puuid}, {streams.BucketSyncLocks, puuid},
		{streams.BucketRiotIDs, resolver.PlatformCacheKey(puuid)}}
	if f.GameName != "" {
		keys = append(keys, [2]string{streams.BucketRiotIDs, resolver.CacheKey(riot.RiotID{GameName: f.GameName, TagLine: f.TagLine})})
	}
	for _, k := range keys {
		bucket, key := k[0], k[1]
		n, err := eraseSubject(ctx, js, "KV_"+bucket, "$KV."+bucket+"."+key)
		if err != nil {
			return res, fmt.Errorf("erase %s/%s: %w", bucket, key, err)
		}
		if n > 0 && !slices.Contains(res.KVKeys, bucket) {
			res.KVKeys = append(res.KVKeys, bucket)
		}
	}
	slices.Sort(res.KVKeys)
	rc := newReadCache(ctx, js, 0, log)
	cacheKeys, err := rc.playerKeys(ctx, puuid)
	if err != nil {
		return res, err
	}
	for _, id := range f.MatchIDs {
		cacheKeys = append(cacheKeys, matchCacheKey("m", id), matchCacheKey("t", id))
	}
	if res.CacheKeys, err = rc.purge(ctx, cacheKeys); err != nil {
		return res, err
	}
	if res.Events, err = eraseMentions(ctx, js, streams.StreamEvents, needles); err != nil {
		return res, err
	}
	if res.DeadLetters, err = eraseMentions(ctx, js, streams.StreamDead, needles); err != nil {
		return res, err
	}
	if notFound != nil && len(res.KVKeys)+res.CacheKeys+res.Events+res.DeadLetters == 0 {
		return res, notFound
	}
	res.Removed.GameName, res.Removed.TagLine = "", ""
	detail, _ := json.Marshal(res)
	if err := st.RecordJob(ctx, store.Job{ID: res.JobID, Type: "forget", Status: syncjob.Completed, Detail: detail,
		RequestedAt: now, StartedAt: now, FinishedAt: now}); err != nil {
		return res, err
	}
	log.Info("player forgotten", "puuid_sha256", res.PUUIDHash, "removed", string(detail))
	return res, nil
}

// eraseSubject removes every message on subject from stream (a KV key's
// revisions and markers: "$KV.<bucket>.<key>" in "KV_<bucket>") with a
// stream purge filtered on the subject, and returns how many there were
// (0 or 1 in a bucket of history 1). Unlike a KV purge it leaves no
// marker, whose subject would still name the key. (KV streams deny
// deletes by sequence.)
func eraseSubject(ctx context.Context, js jetstream.JetStream, stream, subject string) (int, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	if _, err := s.GetLastMsgForSubject(ctx, subject); errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
		return 0, err
	}
	return 1, nil
}

// eraseMentions reads stream from its first message to its last (an
// ordered consumer) and deletes (SecureDeleteMsg) every message whose
// subject, header values or payload contain one of needles; a gzip
// payload is searched inflated (up to 64 MiB). It returns how many
// messages it deleted.
func eraseMentions(ctx context.Context, js jetstream.JetStream, stream string, needles [][]byte) (int, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("erase from %s: %w", stream, err)
	}
	last := s.CachedInfo().State.LastSeq
	if s.CachedInfo().State.Msgs == 0 {
		return 0, nil
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return 0, fmt.Errorf("erase from %s: %w", stream, err)
	}
	var seqs []uint64
	for done := false; !done; {
		batch, err := c.Fetch(256, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return 0, fmt.Errorf("erase from %s: %w", stream, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				return 0, fmt.Errorf("erase from %s: %w", stream, err)
			}
			if mentions(m, needles) {
				seqs = append(seqs, md.Sequence.Stream)
			}
			if md.Sequence.Stream >= last {
				done = true
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return 0, fmt.Errorf("erase from %s: %w", stream, err)
		}
		done = done || got == 0
	}
	for i, seq := range seqs {
		if err := s.SecureDeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return i, fmt.Errorf("erase from %s: message %d: %w", stream, seq, err)
		}
	}
	return len(seqs), nil
}

// mentions reports whether m's subject, a header value or its payload
// (inflated when it is gzip) contains one of needles.
func mentions(m jetstream.Msg, needles [][]byte) bool {
	hay := [][]byte{[]byte(m.Subject()), m.Data()}
	for _, vs := range m.Headers() {
		for _, v := range vs {
			hay = append(hay, []byte(v))
		}
	}
	if d := m.Data(); len(d) > 2 && d[0] == 0x1f && d[1] == 0x8b {
		var b bytes.Buffer
		if riot.Gunzip(&b, d, 64<<20) == nil {
			hay = append(hay, b.Bytes())
		}
	}
	for _, h := range hay {
		for _, n := range needles {
			if bytes.Contains(h, n) {
				return true
			}
		}
	}
	return false
}
