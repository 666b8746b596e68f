// Command limitfetcher is the bench-only fetcher of `make bench-limit`
// (internal/benchlimit): one OS process that calls the Riot simulator as
// fast as its rate limiter allows, through the production Riot client
// (pkg/riot) on the production shared limiter (ratelimit.NewShared on the
// JetStream KV bucket "ratelimit"), built as pkg/riotclient.New builds them
// for the match-fetcher, with the match-fetcher's default
// RIOT_RATELIMIT_MAX_WAIT (10 s) and its reaction to a longer wait (the
// call is retried at max(RetryAt, now + 1 s)). It runs without the
// pipeline around the match-fetcher (JetStream consumers, payload store,
// persister, Postgres), so the benchmark measures the limiter, not the
// pipeline.
//
// BENCH_LIMIT_CALLS picks the calls: "match" makes the match-fetcher's
// (getMatch then getTimeline per match ID); the default, "light", makes
// account-v1 getByPuuid then match-v5 getMatchIdsByPUUID per PUUID, two
// methods with small answers, so that dozens of processes on a small
// machine spend their CPU on the limiter rather than on decoding
// megabyte timelines. The limiter sees the same thing either way: calls on
// one routing value, two method budgets under the application budget.
//
// It differs from a production build in one way only: BENCH_LIMIT_SKEW_MS
// shifts the clock the limiter takes (ratelimit.Options.Now) by that many
// milliseconds, to imitate a host whose clock is off. No production
// binary reads it.
//
// Environment (set by internal/benchlimit): NATS_URL, RIOT_BASE_URL,
// RIOT_API_KEY, BENCH_LIMIT_REGION (the regional route, e.g. americas),
// BENCH_LIMIT_IDS (comma-separated match IDs or PUUIDs on it, cycled),
// BENCH_LIMIT_CALLS, BENCH_LIMIT_WORKERS (concurrent calls, default 8),
// BENCH_LIMIT_SKEW_MS (default 0). It runs until SIGTERM or SIGINT and
// logs to stderr.
//
// With -setup it creates the ratelimit KV bucket on NATS_URL as streams/
// declares it, then exits: internal/benchlimit runs it once on each fresh
// nats-server before the fetchers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/connect"
	"github.com/riftflow/riftflow/pkg/ratelimit"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/riotclient"
	"github.com/riftflow/riftflow/pkg/tick"
	"github.com/riftflow/riftflow/streams"
)

func main() {
	setup := flag.Bool("setup", false, "create the ratelimit KV bucket as streams/ declares it on NATS_URL, then exit")
	flag.Parse()
	// LIMITFETCHER_LOG_LEVEL=debug shows the limiter's debug lines (the
	// tokens a new window carries, KV errors).
	var level slog.Level
	if err := level.UnmarshalText([]byte(os.Getenv("LIMITFETCHER_LOG_LEVEL"))); err != nil {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	run := fetch
	if *setup {
		run = setupBucket
	}
	err := run(ctx, log)
	stop()
	if err != nil {
		log.Error("limitfetcher", "err", err)
		os.Exit(1)
	}
}

// dialNATS opens the client on NATS_URL both modes use, as the match-fetcher
// connects (connect.NATS), and a JetStream handle on it.
func dialNATS(ctx context.Context, log *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	return connect.NATS(ctx, config.NATS{URL: os.Getenv("NATS_URL")}, nil, "limitfetcher", log)
}

// setupBucket creates the ratelimit KV bucket as streams/ declares it
// (streams.Apply of that bucket only), retrying while JetStream starts.
func setupBucket(ctx context.Context, log *slog.Logger) error {
	set, err := streams.Load(streams.Options{})
	if err != nil {
		return err
	}
	only := &streams.Set{Prefix: set.Prefix}
	for _, bk := range set.Buckets {
		if bk.Bucket == streams.BucketRateLimit {
			only.Buckets = append(only.Buckets, bk)
		}
	}
	nc, js, err := dialNATS(ctx, log)
	if err != nil {
		return err
	}
	defer nc.Close()
	for {
		err = streams.Apply(ctx, js, only, log)
		if err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond) // JetStream may still be starting
	}
}

// fetch calls the simulator until ctx ends.
func fetch(ctx context.Context, log *slog.Logger) error {
	skew, _ := strconv.Atoi(os.Getenv("BENCH_LIMIT_SKEW_MS"))
	workers, _ := strconv.Atoi(os.Getenv("BENCH_LIMIT_WORKERS"))
	if workers <= 0 {
		workers = 8
	}
	region := riot.Region(os.Getenv("BENCH_LIMIT_REGION"))
	if !region.Valid() {
		return fmt.Errorf("BENCH_LIMIT_REGION=%q is not a regional route", region)
	}
	light := os.Getenv("BENCH_LIMIT_CALLS") != "match"
	ids := strings.Split(os.Getenv("BENCH_LIMIT_IDS"), ",")
	if len(ids) == 0 || ids[0] == "" {
		return errors.New("BENCH_LIMIT_IDS is empty")
	}
	key := os.Getenv("RIOT_API_KEY")
	nc, js, err := dialNATS(ctx, log)
	if err != nil {
		return err
	}
	defer nc.Close()
	offset := time.Duration(skew) * time.Millisecond
	// MaxWait as the match-fetcher's default RIOT_RATELIMIT_MAX_WAIT.
	opts := ratelimit.Options{Logger: log, MaxWait: 10 * time.Second, Now: func() time.Time { return time.Now().Add(offset) }}
	lim, err := ratelimit.NewShared(ctx, js, ratelimit.SharedOptions{Options: opts, KeyID: riotclient.KeyID(key)})
	if err != nil {
		return err
	}
	defer lim.Close()
	c, err := riot.New(riot.Config{APIKey: key, BaseURL: os.Getenv("RIOT_BASE_URL"), Limiter: lim, Logger: log,
		HTTPClient: &http.Client{Transport: riot.NewTransport(workers * 2)},
		OnKeyRejected: func(status int) {
			if err := lim.RejectKey(status); err != nil {
				log.Error("share key rejection", "err", err)
			}
		}})
	if err != nil {
		return err
	}
	log.Info("limitfetcher started", "workers", workers, "skew_ms", skew, "ids", len(ids), "light", light)
	var next atomic.Int64
	var ok, failed, refused atomic.Int64
	var wg sync.WaitGroup
	bg := riot.WithBackground(ctx)
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				id := ids[int(next.Add(1))%len(ids)]
				var err error
				if light {
					_, err = c.AccountByPUUID(bg, region, id)
					if err == nil {
						_, err = c.MatchIDsByPUUID(bg, region, id, riot.MatchIDsQuery{Count: 20})
					}
				} else {
					_, _, err = c.Match(bg, region, id)
					if err == nil {
						_, _, err = c.Timeline(bg, region, id)
					}
				}
				if err == nil {
					ok.Add(1)
					continue
				}
				failed.Add(1)
				// As the match-fetcher: a wait longer than MaxWait comes back
				// as a rate-limit error and the fetch is rescheduled for
				// max(RetryAt, now + 1 s); other failures are retried.
				var re *riot.Error
				if errors.As(err, &re) && re.Kind == riot.KindRateLimited {
					refused.Add(1)
					_ = tick.Sleep(ctx, max(time.Until(re.RetryAt), time.Second))
				} else {
					_ = tick.Sleep(ctx, time.Second)
				}
			}
		})
	}
	wg.Wait()
	fmt.Fprintf(os.Stderr, "limitfetcher done: %d pairs of calls answered, %d failed (%d refused by the limiter, %d other: timeouts, 5xx, resets)\n",
		ok.Load(), failed.Load(), refused.Load(), failed.Load()-refused.Load())
	return nil
}
