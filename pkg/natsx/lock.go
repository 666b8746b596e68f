package natsx

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrLocked is returned (wrapped, with the current holder) by Lock.Claim
// when the key is already held.
var ErrLocked = errors.New("natsx: lock held")

// ErrNotHolder is returned (wrapped) by Lock.Renew and Lock.Release when
// the revision given is no longer the key's latest: the lock expired, was
// released, or was taken over by someone else.
var ErrNotHolder = errors.New("natsx: lock revision is stale")

// Lock is a TTL lease on keys of a KV bucket created with History 1 and
// LimitMarkerTTL (so per-key TTLs work; see streams.BucketSyncLocks and
// BucketCronLocks). The value stored is the holder's identity, or what
// Renew writes. A lock nobody renews disappears after its TTL, which frees
// it for the next Claim.
type Lock struct {
	// KV is the bucket handle. Required.
	KV jetstream.KeyValue
	// JS publishes renewals (kv.Update cannot carry a TTL). Required for
	// Renew.
	JS jetstream.JetStream
	// Bucket is the bucket name; default KV.Bucket().
	Bucket string
}

func (l Lock) bucket() string {
	if l.Bucket != "" {
		return l.Bucket
	}
	return l.KV.Bucket()
}

// Claim takes key for holder for ttl (≥ 1 s, the server's minimum) with an
// atomic create and returns the lock's revision, needed by Renew and
// Release. If the key is held it returns an error wrapping ErrLocked that
// names the current holder. Other errors come from the server (bucket
// without LimitMarkerTTL: jetstream.ErrLimitMarkerTTLNotSupported or an API
// error; invalid key: jetstream.ErrInvalidKey).
func (l Lock) Claim(ctx context.Context, key, holder string, ttl time.Duration) (uint64, error) {
	rev, err := l.KV.Create(ctx, key, []byte(holder), jetstream.KeyTTL(ttl))
	if err == nil {
		return rev, nil
	}
	if errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSequence(err) {
		cur := "?"
		var curRev uint64
		if e, gerr := l.KV.Get(ctx, key); gerr == nil {
			cur, curRev = string(e.Value()), e.Revision()
		}
		return 0, fmt.Errorf("%w: %s/%s held by %q (rev %d)", ErrLocked, l.bucket(), key, cur, curRev)
	}
	return 0, fmt.Errorf("natsx: claim %s/%s: %w", l.bucket(), key, err)
}

// Renew extends a held lock: it writes value with a fresh ttl only if rev
// is still the key's latest revision (compare-and-set), and returns the new
// revision for the next Renew or Release. It publishes straight to
// $KV.<bucket>.<key> with an expected last subject sequence and a message
// TTL, because kv.Update sends no per-message TTL and the key would then live
// for ever (a KV bucket's TTL applies per key only through Nats-TTL). A lost
// lock gives an error wrapping ErrNotHolder.
func (l Lock) Renew(ctx context.Context, key string, rev uint64, value []byte, ttl time.Duration) (uint64, error) {
	ack, err := l.JS.Publish(ctx, "$KV."+l.bucket()+"."+key, value,
		jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(ttl))
	if err != nil {
		if isWrongLastSequence(err) {
			return 0, fmt.Errorf("%w: renew %s/%s at rev %d: %v", ErrNotHolder, l.bucket(), key, rev, err)
		}
		return 0, fmt.Errorf("natsx: renew %s/%s: %w", l.bucket(), key, err)
	}
	return ack.Sequence, nil
}

// Release deletes the lock if rev is still its latest revision. A stale
// revision (lock expired or taken over) gives an error wrapping
// ErrNotHolder, and the lock is left alone.
func (l Lock) Release(ctx context.Context, key string, rev uint64) error {
	err := l.KV.Delete(ctx, key, jetstream.LastRevision(rev))
	if err == nil {
		return nil
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || isWrongLastSequence(err) {
		return fmt.Errorf("%w: release %s/%s at rev %d: %v", ErrNotHolder, l.bucket(), key, rev, err)
	}
	return fmt.Errorf("natsx: release %s/%s: %w", l.bucket(), key, err)
}

// Get returns the current entry of key (value = holder or last renewal
// value; Revision for Renew/Release), or jetstream.ErrKeyNotFound when the
// lock is free.
func (l Lock) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	return l.KV.Get(ctx, key)
}

// isWrongLastSequence reports a CAS conflict (code 10071 on R1, 10164 on
// replicated streams).
func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return false
}
