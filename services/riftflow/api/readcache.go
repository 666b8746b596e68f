package api

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/streams"
)

// ReadCacheEnv configures the read API's cache.
type ReadCacheEnv struct {
	// MemoryBytes bounds the in-process layer in front of the shared KV
	// cache, in bytes of gzip body (API_READ_CACHE_MEMORY_BYTES, default
	// 32 MiB); 0 turns it off. One body larger than an eighth of it is
	// never held in process.
	MemoryBytes int64 `env:"API_READ_CACHE_MEMORY_BYTES" envDefault:"33554432"`
}

const (
	// defaultReadCacheMemory is ReadCacheEnv.MemoryBytes' default.
	defaultReadCacheMemory = 32 << 20
	// kvPutOverhead is what a KV create adds to the value in one message
	// (subject, Nats-TTL and Nats-Expected-Last-Subject-Sequence
	// headers), kept free below the server's max_payload.
	kvPutOverhead = 1 << 10
	// readCachePurgeMarkerTTL is how long an erasure's purge markers stay
	// in the read-cache bucket: long enough for every replica's watcher
	// to see them and drop its in-process copy.
	readCachePurgeMarkerTTL = time.Minute
)

// cachedBody is one cached answer of the read API.
type cachedBody struct {
	gz      []byte    // the JSON body, gzip-compressed
	etag    string    // strong ETag over the uncompressed body (etagOf)
	expires time.Time // when its lifetime ends (the KV entry's TTL)
}

// newCachedBody gzips body and tags it.
func newCachedBody(body []byte, expires time.Time) cachedBody {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(body) // a bytes.Buffer does not fail
	zw.Close()
	return cachedBody{gz: b.Bytes(), etag: etagOf(body), expires: expires}
}

// value is c as stored in the KV bucket: the ETag, a newline, the gzip body.
func (c cachedBody) value() []byte {
	return append(append([]byte(c.etag), '\n'), c.gz...)
}

// parseCachedValue is the inverse of value; false for anything else.
func parseCachedValue(v []byte) (cachedBody, bool) {
	etag, gz, ok := bytes.Cut(v, []byte{'\n'})
	if !ok || len(gz) < 2 || gz[0] != 0x1f || gz[1] != 0x8b {
		return cachedBody{}, false
	}
	return cachedBody{gz: gz, etag: string(etag)}, true
}

// readCache is the read API's cache: one NATS KV bucket (read-cache) shared
// by every replica of the API, each key with its own TTL (design 002's
// lifetimes: MatchCacheTTL for a match or timeline, MatchIDsCacheTTL for a
// page of a player's matches, ranks or reports), in front of it a
// per-process layer bounded in bytes (otter, weighted by the gzip body's
// size). Bodies are kept gzip-compressed in both. A value larger than the
// server's max_payload (or the bucket's max_value_size) is served uncached.
// Erasures (ForgetPlayer) purge keys; every replica watches the bucket and
// drops its in-process copy of a purged or deleted key.
//
// Keys: m.<match id>, t.<match id> (timeline), p.<sha256(puuid)>.<what>…
// (playerCacheKey), so no key names a PUUID.
type readCache struct {
	kv       jetstream.KeyValue // nil: no shared layer (no bucket)
	maxValue int                // largest KV value: max_payload or max_value_size, less kvPutOverhead
	local    *otter.Cache[string, cachedBody]
	maxEntry int // largest body held in process
	now      func() time.Time
	log      *slog.Logger

	// Counters, for tests and logs.
	localHits, sharedHits, misses, oversized atomic.Int64
}

// newReadCache opens the shared bucket on js (when js is not nil and the
// bucket exists; otherwise it logs why and keeps the in-process layer
// only) and starts the watcher that keeps the in-process layer in step
// with erasures. memoryBytes bounds the in-process layer (0: none).
func newReadCache(ctx context.Context, js jetstream.JetStream, memoryBytes int64, log *slog.Logger) *readCache {
	c := &readCache{now: time.Now, log: log}
	if memoryBytes > 0 {
		c.maxEntry = int(min(memoryBytes/8, 1<<31))
		c.local = otter.Must(&otter.Options[string, cachedBody]{
			MaximumWeight: uint64(memoryBytes),
			Weigher: func(key string, v cachedBody) uint32 {
				return uint32(len(key) + len(v.etag) + len(v.gz))
			},
		})
	}
	if js == nil {
		return c
	}
	kv, err := js.KeyValue(ctx, streams.BucketReadCache)
	if err != nil {
		log.Warn("read cache: no shared bucket, in-process layer only (run `riftflow streams apply`)", "bucket", streams.BucketReadCache, "err", err)
		return c
	}
	limit := int(js.Conn().MaxPayload())
	if st, err := kv.Status(ctx); err == nil {
		if s, ok := st.(*jetstream.KeyValueBucketStatus); ok && s.StreamInfo().Config.MaxMsgSize > 0 {
			limit = min(limit, int(s.StreamInfo().Config.MaxMsgSize))
		}
	}
	c.kv, c.maxValue = kv, limit-kvPutOverhead
	if c.local != nil {
		w, err := kv.WatchAll(ctx, jetstream.UpdatesOnly(), jetstream.MetaOnly())
		if err != nil {
			log.Warn("read cache: cannot watch the bucket, in-process layer off", "err", err)
			c.local = nil
			return c
		}
		go func() {
			for e := range w.Updates() {
				if e != nil && e.Operation() != jetstream.KeyValuePut {
					c.local.Invalidate(e.Key())
				}
			}
		}()
	}
	return c
}

// get returns the cached answer under key, or loads it (load returns the
// JSON body, or an error that get returns as is), caches it for ttl and
// returns it. A failing shared layer is logged and skipped: the answer
// is then loaded.
func (c *readCache) get(ctx context.Context, key string, ttl time.Duration, load func(context.Context) ([]byte, error)) (cachedBody, error) {
	now := c.now()
	if c.local != nil {
		if b, ok := c.local.GetIfPresent(key); ok {
			if now.Before(b.expires) {
				c.localHits.Add(1)
				return b, nil
			}
			c.local.Invalidate(key)
		}
	}
	if c.kv != nil {
		e, err := c.kv.Get(ctx, key)
		switch {
		case err == nil:
			if b, ok := parseCachedValue(e.Value()); ok {
				b.expires = e.Created().Add(ttl)
				c.sharedHits.Add(1)
				c.keep(key, b)
				return b, nil
			}
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			c.log.Warn("read cache: get", "key", key, "err", err)
		}
	}
	body, err := load(ctx)
	if err != nil {
		return cachedBody{}, err
	}
	c.misses.Add(1)
	b := newCachedBody(body, now.Add(ttl))
	if c.kv != nil {
		v := b.value()
		if len(v) > c.maxValue {
			c.oversized.Add(1)
			return b, nil // served uncached
		}
		if _, err := c.kv.Create(ctx, key, v, jetstream.KeyTTL(ttl)); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			c.log.Warn("read cache: create", "key", key, "bytes", len(v), "err", err)
		}
	}
	c.keep(key, b)
	return b, nil
}

// keep puts b in the in-process layer when it fits.
func (c *readCache) keep(key string, b cachedBody) {
	if c.local != nil && len(b.gz) <= c.maxEntry {
		c.local.Set(key, b)
	}
}

// purge removes keys from the shared bucket (with purge markers that
// expire after readCachePurgeMarkerTTL, which every replica's watcher
// sees) and from this process's layer. It returns how many keys it
// purged.
func (c *readCache) purge(ctx context.Context, keys []string) (int, error) {
	for _, k := range keys {
		if c.local != nil {
			c.local.Invalidate(k)
		}
	}
	if c.kv == nil {
		return 0, nil
	}
	n := 0
	for _, k := range keys {
		if _, err := c.kv.Get(ctx, k); errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err := c.kv.Purge(ctx, k, jetstream.PurgeTTL(readCachePurgeMarkerTTL)); err != nil {
			return n, fmt.Errorf("read cache: purge %s: %w", k, err)
		}
		n++
	}
	return n, nil
}

// playerKeys lists the shared bucket's keys of puuid's pages.
func (c *readCache) playerKeys(ctx context.Context, puuid string) ([]string, error) {
	if c.kv == nil {
		return nil, nil
	}
	l, err := c.kv.ListKeysFiltered(ctx, playerCacheKey(puuid, ">"))
	if err != nil {
		return nil, fmt.Errorf("read cache: list keys: %w", err)
	}
	var keys []string
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	return keys, nil
}

// matchCacheKey is the key of a stored MatchDto (kind "m") or TimelineDto
// ("t").
func matchCacheKey(kind, matchID string) string { return kind + "." + matchID }

// playerCacheKey is the key of one of puuid's pages: p.<sha256 hex of the
// PUUID>.<rest> (rest: dot-separated tokens of KV-safe characters).
func playerCacheKey(puuid, rest string) string {
	sum := sha256.Sum256([]byte(puuid))
	return "p." + hex.EncodeToString(sum[:]) + "." + rest
}

// gunzipBody inflates a cached body (for clients that do not take gzip).
func gunzipBody(gz []byte) ([]byte, error) {
	var b bytes.Buffer
	if err := riot.Gunzip(&b, gz, 1<<30); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
