// Package synclock is the per-account sync lock protocol shared by the
// matchid-lister (claims), the persister (renews on progress, releases on
// completion) and the retry-sweeper (treats an expired lock as a dead
// sync). The lock is a key per PUUID in the sync-locks KV bucket (History 1,
// per-key TTL); its value names the request that holds it.
package synclock

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/tick"
)

// Value is what the sync-locks bucket holds for a PUUID.
type Value struct {
	RequestID string    `json:"request_id"`
	Since     time.Time `json:"since"`
}

// Claim takes puuid's lock for requestID for ttl. If the lock is held by
// the same request (a redelivered sync command) it succeeds; if another
// request holds it, the error wraps natsx.ErrLocked and holder names it.
func Claim(ctx context.Context, l natsx.Lock, puuid, requestID string, ttl time.Duration, now time.Time) (holder string, err error) {
	b, _ := json.Marshal(Value{RequestID: requestID, Since: now})
	_, err = l.Claim(ctx, puuid, string(b), ttl)
	if err == nil {
		return requestID, nil
	}
	if !errors.Is(err, natsx.ErrLocked) {
		return "", err
	}
	v, gerr := Get(ctx, l, puuid)
	if gerr != nil {
		// Expired between the two calls: let the caller retry.
		return "", err
	}
	if v.RequestID == requestID {
		return requestID, nil
	}
	return v.RequestID, err
}

// Get reads puuid's lock.
func Get(ctx context.Context, l natsx.Lock, puuid string) (Value, error) {
	e, err := l.Get(ctx, puuid)
	if err != nil {
		return Value{}, err
	}
	var v Value
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		return Value{}, err
	}
	return v, nil
}

// Renew extends puuid's lock to ttl from now if requestID still holds it.
// It reports whether the lock was renewed.
func Renew(ctx context.Context, l natsx.Lock, puuid, requestID string, ttl time.Duration) bool {
	e, err := l.Get(ctx, puuid)
	if err != nil {
		return false
	}
	var v Value
	if json.Unmarshal(e.Value(), &v) != nil || v.RequestID != requestID {
		return false
	}
	_, err = l.Renew(ctx, puuid, e.Revision(), e.Value(), ttl)
	return err == nil
}

// KeepAll renews every lock held in l for ttl from now, whoever holds it,
// and returns how many it renewed. It is the renewal of last resort while
// Postgres, which says which syncs are healthy, does not answer: no sync
// can progress or finish then, so every lock held is still needed, and a
// lock left to lapse would let a second sync of the same account in. A
// lock that changed hands or expired between the read and the renewal is
// left alone (compare-and-set); the first error is returned after the
// others were tried.
func KeepAll(ctx context.Context, l natsx.Lock, ttl time.Duration) (int, error) {
	keys, err := l.KV.ListKeys(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	var first error
	for k := range keys.Keys() {
		e, err := l.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err == nil {
			_, err = l.Renew(ctx, k, e.Revision(), e.Value(), ttl)
		}
		switch {
		case err == nil:
			n++
		case errors.Is(err, natsx.ErrNotHolder):
		case first == nil:
			first = err
		}
	}
	return n, first
}

// Release deletes puuid's lock if requestID holds it. A failure is logged:
// the lock then expires with its TTL.
func Release(ctx context.Context, l natsx.Lock, puuid, requestID string, log *slog.Logger) {
	e, err := l.Get(ctx, puuid)
	if err != nil {
		return
	}
	var v Value
	if json.Unmarshal(e.Value(), &v) != nil || v.RequestID != requestID {
		return
	}
	if err := l.Release(ctx, puuid, e.Revision()); err != nil {
		log.WarnContext(ctx, "sync lock release failed; it will expire", "puuid", puuid, "err", err)
	}
}

// Heartbeat renews requestID's lock on puuid every ttl/3 until the returned
// stop is called (or ctx ends), so the lock lives as long as the work
// holding it, however long that takes, instead of only until the next
// finished match. It never claims a lock again: one released (the sync
// finished) or taken by another request is left alone. stop waits for the
// heartbeat to end.
func Heartbeat(ctx context.Context, l natsx.Lock, puuid, requestID string, ttl time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Beat(ctx, max(ttl/3, time.Millisecond), func() { Renew(ctx, l, puuid, requestID, ttl) })
	}()
	return func() { cancel(); <-done }
}

// Beat calls renew every interval until ctx ends (the first call one
// interval after the start, see tick.Every): the beat of a lock heartbeat,
// here and in the retry-sweeper's renewal of every running sync's lock.
func Beat(ctx context.Context, interval time.Duration, renew func()) {
	tick.Every(ctx, interval, renew)
}
