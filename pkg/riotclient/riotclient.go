// Package riotclient builds a process's Riot API client (pkg/riot) on its
// rate limiter (pkg/ratelimit): shared through NATS KV by every process
// using the key, or local to the process, with design 002's ceilings in
// front. Only the processes that call Riot import it.
package riotclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/ratelimit"
	"github.com/riftflow/riftflow/pkg/redact"
	"github.com/riftflow/riftflow/pkg/riot"
)

// Stats counts the Riot requests of a process: requests sent, 429s and
// 5xx answers.
type Stats struct {
	Requests, RateLimited, ServerErrors atomic.Int64
}

type countingTransport struct {
	next  http.RoundTripper
	stats *Stats
}

// Unwrap is the transport it counts for (riot's send check looks through it).
func (t countingTransport) Unwrap() http.RoundTripper { return t.next }

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.stats.Requests.Add(1)
	resp, err := t.next.RoundTrip(r)
	if err == nil {
		switch {
		case resp.StatusCode == http.StatusTooManyRequests:
			t.stats.RateLimited.Add(1)
		case resp.StatusCode >= 500:
			t.stats.ServerErrors.Add(1)
		}
	}
	return resp, err
}

// KeyID is the limiter's identity for an API key: its redact.ShortHash.
// The key itself is never stored or logged.
func KeyID(apiKey string) string { return redact.ShortHash(apiKey) }

// New builds the Riot client on a limiter shared through NATS KV (or a
// local one when cfg.SharedRateLimit is off or js is nil), with the
// ceilings of RIOT_MAX_PER_SECOND and RIOT_MAX_PER_MINUTE in front
// (Ceilings). A 401/403 seen by any process stops every process using the
// key (two answers in a row from a key endpoint prove it,
// riot.Config.KeyRejectAfter); a probe that finds the key accepted again,
// or `riftflow clear-key-rejection`, restarts them all. The limiter's
// clock is the process clock (app.HostClock). A *ratelimit.Shared limiter
// holds a KV watch: its caller closes it (Close) when done. Errors: an
// empty RIOT_API_KEY, the KV bucket missing, a bad ceiling variable.
func New(ctx context.Context, cfg config.Riot, js jetstream.JetStream, log *slog.Logger) (*riot.Client, riot.Limiter, *Stats, error) {
	if cfg.APIKey == "" {
		return nil, nil, nil, errors.New("RIOT_API_KEY is not set")
	}
	opts := ratelimit.Options{MaxWait: cfg.RateLimitMaxWait, Logger: log, Now: app.HostClock,
		BackoffStart: cfg.BackoffStart, BackoffMax: cfg.BackoffMax}
	stats := &Stats{}
	rc := riot.Config{APIKey: cfg.APIKey.Reveal(), BaseURL: cfg.BaseURL, Timeout: cfg.Timeout(), Logger: log,
		BreakerTimeout: cfg.BreakerTimeout,
		HTTPClient:     &http.Client{Transport: countingTransport{next: riot.NewTransport(0), stats: stats}}}
	var lim ceilinged
	var client atomic.Pointer[riot.Client] // set below; the watcher may clear it
	if cfg.SharedRateLimit && js != nil {
		sh, err := ratelimit.NewShared(ctx, js, ratelimit.SharedOptions{Options: opts, KeyID: KeyID(cfg.APIKey.Reveal()),
			OnKeyCleared: func() {
				if c := client.Load(); c != nil {
					c.AcceptKey()
				}
			}})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("shared rate limiter: %w", err)
		}
		rc.OnKeyRejected = func(status int) {
			if err := sh.RejectKey(status); err != nil {
				log.Error("could not share the key rejection", "err", err)
			}
		}
		rc.OnKeyAccepted = func() {
			if err := sh.ClearKeyRejection(); err != nil {
				log.Error("could not share that the key is accepted again", "err", err)
			}
		}
		lim = sh
	} else {
		lim = ratelimit.NewLocal(opts)
	}
	var ceil Ceilings
	if err := config.Parse(&ceil); err != nil {
		return nil, nil, nil, err
	}
	rc.Limiter = WithCeilings(lim, ceil)
	c, err := riot.New(rc)
	if err != nil {
		return nil, nil, nil, err
	}
	client.Store(c)
	return c, lim, stats, nil
}

// Open is New on process p's NATS connection, logger and environment
// (RIOT_*), with the limiter closed when p closes.
func Open(ctx context.Context, p *app.Process) (*riot.Client, riot.Limiter, *Stats, error) {
	c, lim, stats, err := New(ctx, p.Env.Riot, p.JS, p.Log)
	if err != nil {
		return nil, nil, nil, err
	}
	if sh, ok := lim.(*ratelimit.Shared); ok {
		p.OnClose(sh.Close)
	}
	return c, lim, stats, nil
}
