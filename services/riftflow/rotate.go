package riftflow

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/services/resolver"
	"github.com/riftflow/riftflow/streams"
)

// RotateResult is what RotateKey did.
type RotateResult struct {
	Accounts, Changed int
	Rows              map[string]int64 // rows rewritten per table
}

// AccountResolver is account-v1 by-riot-id (the Riot client under the new key).
type AccountResolver interface {
	AccountByRiotID(ctx context.Context, region riot.Region, id riot.RiotID) (riot.Account, error)
}

// RotateKey re-resolves every stored account through rc and, unless dry,
// rewrites the PUUIDs in one transaction and moves the KV entries
// (see cmdRotateKey).
func RotateKey(ctx context.Context, st *store.Store, js jetstream.JetStream, rc AccountResolver, dry bool) (RotateResult, error) {
	accounts, err := st.Accounts(ctx)
	if err != nil {
		return RotateResult{}, err
	}
	pairs := map[string]string{}
	var failed []string
	for _, a := range accounts {
		p, err := riot.ParsePlatform(a.Platform)
		if err != nil || a.GameName == "" {
			failed = append(failed, fmt.Sprintf("%s: no Riot ID or platform stored", a.PUUID))
			continue
		}
		acc, err := rc.AccountByRiotID(ctx, p.AccountRegion(), riot.RiotID{GameName: a.GameName, TagLine: a.TagLine})
		if err != nil || acc.PUUID == "" {
			failed = append(failed, fmt.Sprintf("%s#%s: %v", a.GameName, a.TagLine, err))
			continue
		}
		pairs[a.PUUID] = acc.PUUID
	}
	if len(failed) > 0 {
		return RotateResult{}, fmt.Errorf("%d of %d accounts not resolved under the new key; nothing written:\n  %s",
			len(failed), len(accounts), strings.Join(failed, "\n  "))
	}
	res := RotateResult{Accounts: len(pairs)}
	for o, n := range pairs {
		if o != n {
			res.Changed++
		}
	}
	if dry {
		return res, nil
	}
	if res.Rows, err = st.RewritePUUIDs(ctx, pairs); err != nil {
		return res, err
	}
	return res, moveKV(ctx, js, pairs, accounts)
}

// moveKV moves each cursor to its new PUUID and points the riot-ids cache
// at the new PUUIDs.
func moveKV(ctx context.Context, js jetstream.JetStream, pairs map[string]string, accounts []store.Account) error {
	cursors, err := js.KeyValue(ctx, streams.BucketCursors)
	if err != nil {
		return err
	}
	ids, err := js.KeyValue(ctx, streams.BucketRiotIDs)
	if err != nil {
		return err
	}
	for _, a := range accounts {
		n := pairs[a.PUUID]
		if _, err := ids.Put(ctx, resolver.CacheKey(riot.RiotID{GameName: a.GameName, TagLine: a.TagLine}), []byte(n)); err != nil {
			return fmt.Errorf("riot-ids: %w", err)
		}
		if n == a.PUUID {
			continue
		}
		e, err := cursors.Get(ctx, a.PUUID)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("cursor of %s: %w", a.PUUID, err)
		}
		if _, err := cursors.Put(ctx, n, e.Value()); err != nil {
			return fmt.Errorf("cursor of %s: %w", n, err)
		}
		if err := cursors.Purge(ctx, a.PUUID); err != nil {
			return fmt.Errorf("cursor of %s: %w", a.PUUID, err)
		}
	}
	return nil
}
