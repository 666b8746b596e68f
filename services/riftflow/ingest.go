package riftflow

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/redact"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/syncjob"
	"github.com/riftflow/riftflow/pkg/telemetry"
	"github.com/riftflow/riftflow/services/riftflow/stack"
)

// cmdIngest is `riftflow ingest`: it publishes an ingest request on
// lol.ingest.request (recorded as pending in the job log when the database
// is known) and, with --wait, follows its progress until the sync ends.
func cmdIngest(ctx context.Context, args []string, out, stderr io.Writer) error {
	fs := newFlags("ingest", stderr)
	var req bus.IngestRequest
	var queue int
	fs.StringVar(&req.RiotID, "riot-id", "", "Riot ID, gameName#tagLine")
	fs.StringVar(&req.PUUID, "puuid", "", "PUUID (instead of --riot-id)")
	fs.StringVar(&req.Platform, "platform", "", "platform routing value: na1, euw1, kr, jp1, ... (default: the player's active platform, from account-v1)")
	mode := fs.String("mode", "latest", "latest (the newest --count matches, from the cursor) or full (backfill --lookback-days)")
	fs.IntVar(&req.Count, "count", 0, "max matches this run (default INGESTION_MAX_MATCHES_PER_RUN)")
	fs.IntVar(&req.LookbackDays, "lookback-days", 0, "full backfill depth (default INGESTION_LOOKBACK_DAYS)")
	fs.IntVar(&queue, "queue", -1, "only this queueId")
	fs.StringVar(&req.Type, "type", "", "only ranked, normal, tourney or tutorial")
	fs.StringVar(&req.RequestID, "request-id", "", "idempotency key (default: generated)")
	fs.BoolVar(&req.Force, "force", false, "refetch and overwrite matches that are stored already")
	fs.StringVar(&req.RequestedBy, "requested-by", "", "who asks (stored on the job)")
	background := fs.Bool("background", false, "background priority (behind interactive requests)")
	wait := fs.Bool("wait", false, "show progress and wait for the sync to finish")
	timeout := fs.Duration("timeout", 30*time.Minute, "with --wait: give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	req.Mode, req.Trigger = bus.Mode(*mode), "cli"
	if queue >= 0 {
		req.Queue = &queue
	}
	if *background {
		req.Priority = bus.Background
	}
	if req.RequestID == "" {
		req.RequestID = "cli-" + randHex(8)
	}
	req.RequestedAt = time.Now().UTC()
	if err := req.Normalize(); err != nil {
		return err
	}
	env, err := config.Load()
	if err != nil {
		return err
	}
	if telemetry.ExportEnabled() {
		// OTEL_EXPORTER_OTLP_ENDPOINT is set: export the publish span, so
		// the trace in Jaeger starts at this command.
		tel, err := telemetry.Setup(ctx, telemetry.Config{ServiceName: "riftflow-cli", Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return err
		}
		defer tel.Shutdown(context.WithoutCancel(ctx))
	}
	nc, _, err := dialNATS(ctx, &env, false, "riftflow-cli", nil)
	if err != nil {
		return err
	}
	defer nc.Close()
	subj := bus.Subjects{Prefix: env.NATS.SubjectPrefix}
	queueInJobLog(ctx, env, req, out)
	if !*wait {
		if err := stack.PublishIngest(ctx, nc, subj, req); err != nil {
			return err
		}
		fmt.Fprintf(out, "request %s published on %s\n", req.RequestID, subj.IngestFor(req.Priority))
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	ev, err := stack.IngestAndWait(ctx, nc, subj, req, out)
	if err != nil {
		return err
	}
	if syncjob.Status(ev.Status) != syncjob.Completed {
		return fmt.Errorf("sync failed: %s", ev.Error)
	}
	fmt.Fprintf(out, "completed: %d matches reached a final state\n", ev.Total)
	return nil
}

// queueInJobLog records req as a pending sync in the job log
// (store.QueueSync) when the database is known (DATABASE_URL or a local
// `riftflow up`), so `riftflow status` shows it queued at once; without
// one the request is only published, and a failure is only noted on out.
func queueInJobLog(ctx context.Context, env config.Env, req bus.IngestRequest, out io.Writer) {
	url, err := dbURL(env)
	if err != nil {
		return
	}
	st, err := store.Open(ctx, url)
	if err == nil {
		defer st.Close()
		_, err = st.QueueSync(ctx, syncjob.Queued(req, req.PUUID))
	}
	if err != nil {
		fmt.Fprintf(out, "note: request %s not recorded as pending in the job log: %v\n", req.RequestID, redact.String(err.Error()))
	}
}
