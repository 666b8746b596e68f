package riftflow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/ratelimit"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/riotclient"
)

// cmdStatusRateLimit is `riftflow status --ratelimit`: the shared rate-limit
// state read from the KV bucket "ratelimit" (NATS_URL or the local `up`).
// With RIOT_API_KEY set it shows that key only (by its KeyID hash);
// otherwise every key found (the simulator's key under `riftflow up`).
func cmdStatusRateLimit(ctx context.Context, env config.Env, out io.Writer, asJSON bool) error {
	nc, js, err := dialNATS(ctx, &env, false, "riftflow-status", nil)
	if err != nil {
		return err
	}
	defer nc.Close()
	keyID := ""
	if env.Riot.APIKey != "" {
		keyID = riotclient.KeyID(env.Riot.APIKey.Reveal())
	}
	return PrintRateLimit(ctx, js, keyID, out, asJSON)
}

// PrintRateLimit prints what `riftflow status --ratelimit` shows: the
// shared limiter's state of keyID ("" for every key) from the ratelimit KV
// bucket of js, as text or, with asJSON, as JSON.
func PrintRateLimit(ctx context.Context, js jetstream.JetStream, keyID string, out io.Writer, asJSON bool) error {
	kv, err := js.KeyValue(ctx, "ratelimit")
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		fmt.Fprintln(out, "rate limit: no shared state yet (KV bucket ratelimit missing)")
		return nil
	}
	if err != nil {
		return err
	}
	// Windows and pauses are stamped on the NATS server's clock, as the
	// limiter judges them; this host's clock may be off.
	clockKey := keyID
	if clockKey == "" {
		clockKey = "status"
	}
	now, err := ratelimit.ServerNow(ctx, kv, clockKey, "riftflow-status", time.Now)
	if err != nil {
		now = time.Now()
		fmt.Fprintf(out, "rate limit: times on this host's clock (the NATS server's clock could not be read: %v)\n", err)
	}
	states, err := ratelimit.ReadState(ctx, kv, keyID, now)
	if err != nil {
		return err
	}
	return printAs(out, asJSON, states, func() error {
		if len(states) == 0 {
			fmt.Fprintln(out, "rate limit: no Riot calls recorded yet")
			return nil
		}
		for _, k := range states {
			writeKeyState(out, k, now)
		}
		return nil
	})
}

func writeKeyState(out io.Writer, k ratelimit.KeyState, now time.Time) {
	fmt.Fprintf(out, "rate limit, API key %s\n", k.KeyID)
	if k.Rejected != 0 {
		fmt.Fprintf(out, "  KEY REJECTED %s ago (at %s): Riot answered %d to key endpoints (account-v1, match-v5) %d times in a row;\n",
			now.Sub(k.RejectedAt).Round(time.Second), k.RejectedAt.UTC().Format(time.RFC3339), k.Rejected, riot.DefaultKeyRejectAfter)
		fmt.Fprintf(out, "    every call with this key has stopped but one probe per process, %s after the rejection and then up to every %s;\n",
			riot.DefaultKeyProbeMin, riot.DefaultKeyProbeMax)
		fmt.Fprintf(out, "    a probe Riot accepts resumes every process. If the key was revoked, replace RIOT_API_KEY and restart;\n")
		fmt.Fprintf(out, "    `riftflow clear-key-rejection` resumes them at once (two more 401/403 reject it again)\n")
		for _, p := range k.Processes {
			if p.Rejected != 0 {
				fmt.Fprintf(out, "    process %s: rejected (last report %s ago)\n", p.ID, now.Sub(p.At).Round(time.Second))
			}
		}
	} else {
		fmt.Fprintln(out, "  key: ok")
	}
	tw := newTable(out)
	fmt.Fprintln(tw, "  ROUTE\tBUDGET\tLIMITS\tUSED (running windows)\tPAUSE")
	for _, b := range k.Budgets {
		var ws []string
		for _, w := range b.Windows {
			if w.ResetsAt.IsZero() {
				ws = append(ws, fmt.Sprintf("-/%d per %s", w.Limit, w.Length))
				continue
			}
			ws = append(ws, fmt.Sprintf("%d/%d per %s (%.0f%%, resets in %s)", w.Count, w.Limit, w.Length,
				100*float64(w.Count)/float64(max(w.Limit, 1)), w.ResetsAt.Sub(now).Round(100*time.Millisecond)))
		}
		pause := "-"
		if !b.PausedUntil.IsZero() {
			typ := b.PauseType
			if typ == "" {
				typ = "no type"
			}
			pause = fmt.Sprintf("%s 429, %s left", typ, b.PausedUntil.Sub(now).Round(100*time.Millisecond))
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", b.Route, b.Method, orDash(b.Limits), orDash(strings.Join(ws, "; ")), pause)
	}
	tw.Flush()
	fresh := 0
	for _, p := range k.Processes {
		if now.Sub(p.At) < time.Minute {
			fresh++
		}
	}
	fmt.Fprintf(out, "  processes: %d reporting (%d in the last minute); totals since each started:\n", len(k.Processes), fresh)
	tw = newTable(out)
	fmt.Fprintln(tw, "  ROUTE\tMETHOD\tGRANTED\t429s BY TYPE\tREFUSED (rescheduled)\tWAITED\tPAUSED")
	for _, c := range k.Totals() {
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%d\t%s\t%d, %s\n", c.Route, c.Method, c.Granted, fmt429(c.TooMany), c.Refused,
			(time.Duration(c.WaitSeconds * float64(time.Second))).Round(time.Millisecond),
			c.Pauses, (time.Duration(c.PausedSeconds * float64(time.Second))).Round(time.Millisecond))
	}
	tw.Flush()
}

func fmt429(m map[string]int64) string { return countsLine(m, "0") }
