package riftflow

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/control"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/ratelimit"
	"github.com/riftflow/riftflow/pkg/riotclient"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/services/riftflow/api"
	"github.com/riftflow/riftflow/streams"
)

// adminConn is an admin command's connection to NATS (connectCLI).
type adminConn struct {
	env config.Env
	log *slog.Logger
	js  jetstream.JetStream
}

// runAdmin runs an admin command (pause, forget, retry, rotate-key,
// clear-key-rejection): it parses the command's flags (fs, named after the
// command) from args, vets them with check when it is not nil, then
// connects to NATS as connectCLI does, under the name riftflow-<command>,
// and runs do on the connection, which it closes after.
func runAdmin(ctx context.Context, fs *flag.FlagSet, args []string, stderr io.Writer, check func() error, do func(c adminConn) error) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if check != nil {
		if err := check(); err != nil {
			return err
		}
	}
	env, log, nc, js, err := connectCLI(ctx, "riftflow-"+fs.Name(), stderr)
	if err != nil {
		return err
	}
	defer nc.Close()
	return do(adminConn{env: env, log: log, js: js})
}

// controlBucket opens the KV bucket of the pause switch (pkg/control).
func controlBucket(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, streams.BucketControl)
	if err != nil {
		return nil, fmt.Errorf("open the control bucket (run `riftflow streams apply`): %w", err)
	}
	return kv, nil
}

// cmdRetry is `riftflow retry`: it replays permanently unfetchable matches
// (by --match-id, --puuid or --all) and, with --dead, dead letters (the
// DEAD stream: invalid input, or out of deliveries during an outage) to the
// subject they were first published on; at most --limit of each per run
// (100, as design 000's retry job).
func cmdRetry(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("retry", stderr)
	var req api.RetryRequest
	fs.BoolVar(&req.Dead, "dead", false, "also replay dead letters (the DEAD stream)")
	fs.StringVar(&req.Stream, "stream", "", "dead letters only from this stream (e.g. FETCHED, FETCH, SYNC, INGEST)")
	match := fs.String("match", "", "dead letters only whose payload contains this text (a match ID, a PUUID)")
	ids := fs.String("match-id", "", "comma-separated match IDs to replay")
	fs.StringVar(&req.PUUID, "puuid", "", "replay this player's unfetchable matches")
	fs.BoolVar(&req.All, "all", false, "replay every unfetchable match")
	fs.IntVar(&req.Limit, "limit", store.DefaultReplayLimit, "most matches (and dead letters) replayed in this run")
	usage := func() error {
		if *ids != "" {
			req.MatchIDs = strings.Split(*ids, ",")
		}
		if req.Limit <= 0 {
			return fmt.Errorf("--limit must be positive, got %d", req.Limit)
		}
		if err := req.Validate(); err != nil {
			return fmt.Errorf("usage: riftflow retry --match-id ID[,ID] | --puuid P | --all [--dead] [--limit N], or riftflow retry --dead [--stream S] [--match TEXT]: %w", err)
		}
		return nil
	}
	return runAdmin(ctx, fs, args, stderr, usage, func(c adminConn) error {
		if len(req.MatchIDs) == 0 && req.PUUID == "" && !req.All {
			// Dead letters only, optionally those whose payload holds --match.
			f, err := api.DeadReplayFilter(bus.Subjects{Prefix: c.env.NATS.SubjectPrefix}, "replay-"+randHex(8))
			if err != nil {
				return err
			}
			f.Stream, f.Contains, f.Limit = req.Stream, *match, req.Limit
			res, err := natsx.Replay(ctx, c.js, streams.StreamDead, f)
			fmt.Fprintf(stdout, "replayed %d dead letters (%d others did not match)\n", res.Replayed, res.Skipped)
			printRefusals(stdout, res.Refused, res.Refusals)
			if err == nil && res.Refused > 0 {
				err = fmt.Errorf("refused %d dead letters (listed above)", res.Refused)
			}
			return err
		}
		return retryLedger(ctx, c, req, stdout)
	})
}

// printRefusals reports the dead letters a replay refused (n in all, the
// first few reasons), which stay in DEAD for an operator to inspect.
func printRefusals(w io.Writer, n int, reasons []string) {
	if n == 0 {
		return
	}
	fmt.Fprintf(w, "refused %d dead letters (left in DEAD; forged, or a target their writer may not publish on):\n", n)
	for _, r := range reasons {
		fmt.Fprintln(w, "  ", r)
	}
	if n > len(reasons) {
		fmt.Fprintf(w, "   … and %d more\n", n-len(reasons))
	}
}

// retryLedger is `riftflow retry` of ledger rows (RetryMatches), printing
// what it replayed.
func retryLedger(ctx context.Context, c adminConn, req api.RetryRequest, stdout io.Writer) error {
	st, err := openStore(ctx, c.env)
	if err != nil {
		return err
	}
	defer st.Close()
	res, err := api.RetryMatches(ctx, st, c.js, bus.Subjects{Prefix: c.env.NATS.SubjectPrefix}, req, time.Now())
	fmt.Fprintf(stdout, "replayed %d unfetchable ledger rows and %d dead letters (job %s)\n", len(res.Reopened), res.DeadReplayed, res.RequestID)
	for _, r := range res.Reopened {
		fmt.Fprintln(stdout, "  ", r)
	}
	printRefusals(stdout, res.DeadRefused, res.DeadRefusals)
	return err
}

// cmdPause is `riftflow pause [--off] [--reason TEXT]`: it sets the pause
// switch in the control bucket (NATS_URL) for every service.
func cmdPause(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("pause", stderr)
	off := fs.Bool("off", false, "resume syncing")
	reason := fs.String("reason", "", "why (shown in 503 answers and logs)")
	return runAdmin(ctx, fs, args, stderr, nil, func(c adminConn) error {
		kv, err := controlBucket(ctx, c.js)
		if err != nil {
			return err
		}
		st := control.State{Paused: !*off, Reason: *reason, By: "cli"}
		if err := control.Set(ctx, kv, st); err != nil {
			return err
		}
		if st.Paused {
			fmt.Fprintln(stdout, "syncing paused; `riftflow pause --off` resumes it")
		} else {
			fmt.Fprintln(stdout, "syncing resumed")
		}
		return nil
	})
}

// cmdForget is `riftflow forget --puuid P`.
func cmdForget(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("forget", stderr)
	puuid := fs.String("puuid", "", "the player to erase")
	usage := func() error {
		if *puuid == "" {
			return errors.New("usage: riftflow forget --puuid P")
		}
		return nil
	}
	return runAdmin(ctx, fs, args, stderr, usage, func(c adminConn) error {
		st, err := openStore(ctx, c.env)
		if err != nil {
			return err
		}
		defer st.Close()
		res, err := api.ForgetPlayer(ctx, st, c.js, *puuid, c.log, time.Now())
		if err != nil {
			return err
		}
		return printIndented(stdout, res)
	})
}

// cmdClearKeyRejection is `riftflow clear-key-rejection [--key-id ID]`: it
// deletes the shared rejection of the key (RIOT_API_KEY's KeyID, or
// --key-id as `status --ratelimit` shows it; without either, of every
// rejected key), so every process using it sends calls again at once,
// without waiting for its next probe. It writes the ratelimit bucket, so it
// runs as the NATS admin (the local `up`'s, or NATS_USER=admin).
func cmdClearKeyRejection(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("clear-key-rejection", stderr)
	keyID := fs.String("key-id", "", "the key's id as `riftflow status --ratelimit` shows it (default: RIOT_API_KEY's, else every rejected key)")
	return runAdmin(ctx, fs, args, stderr, nil, func(c adminConn) error {
		kv, err := c.js.KeyValue(ctx, streams.BucketRateLimit)
		if err != nil {
			return fmt.Errorf("open the ratelimit bucket: %w", err)
		}
		ids := []string{*keyID}
		if *keyID == "" && c.env.Riot.APIKey != "" {
			ids = []string{riotclient.KeyID(c.env.Riot.APIKey.Reveal())}
		}
		if ids[0] == "" {
			states, err := ratelimit.ReadState(ctx, kv, "", time.Now())
			if err != nil {
				return err
			}
			ids = ids[:0]
			for _, k := range states {
				if k.Rejected != 0 {
					ids = append(ids, k.KeyID)
				}
			}
		}
		if len(ids) == 0 {
			fmt.Fprintln(stdout, "no key is rejected")
			return nil
		}
		for _, id := range ids {
			if err := ratelimit.ClearRejection(ctx, kv, id); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "cleared the rejection of key %s: every process using it resumes\n", id)
		}
		return nil
	})
}

// cmdRotateKey is `riftflow rotate-key`: after RIOT_API_KEY is changed to a
// new key (PUUIDs are encrypted per key), it re-resolves every stored
// account by Riot ID under the new key (account-v1 by-riot-id), then
// rewrites the PUUIDs in every table in ONE transaction
// (store.RewritePUUIDs), moves the cursors to the new PUUIDs and refreshes
// the riot-ids cache. No match is refetched. Syncing must be paused first
// (`riftflow pause`); any account that cannot be resolved aborts the
// rotation before anything is written.
func cmdRotateKey(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("rotate-key", stderr)
	dry := fs.Bool("dry-run", false, "resolve and print the rewrite without writing")
	return runAdmin(ctx, fs, args, stderr, nil, func(c adminConn) error {
		if err := pausedForRotation(ctx, c.js, *dry); err != nil {
			return err
		}
		st, err := openStore(ctx, c.env)
		if err != nil {
			return err
		}
		defer st.Close()
		rc, _, _, err := riotclient.New(ctx, c.env.Riot, c.js, c.log)
		if err != nil {
			return err
		}
		res, err := RotateKey(ctx, st, c.js, rc, *dry)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%d accounts resolved under the new key, %d with a new PUUID\n", res.Accounts, res.Changed)
		if !*dry {
			fmt.Fprintf(stdout, "rows rewritten (one transaction): %v\n", res.Rows)
		}
		return nil
	})
}

// pausedForRotation refuses a key rotation while syncing runs (the pause
// switch is off); a dry run may go ahead.
func pausedForRotation(ctx context.Context, js jetstream.JetStream, dry bool) error {
	ctl, err := controlBucket(ctx, js)
	if err != nil {
		return err
	}
	if pause, err := control.Get(ctx, ctl); err != nil || (!pause.Paused && !dry) {
		return fmt.Errorf("pause syncing first (`riftflow pause --reason 'key rotation'`): %v", err)
	}
	return nil
}
