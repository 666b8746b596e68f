package riftflow

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/connect"
	"github.com/riftflow/riftflow/pkg/control"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/redact"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/riotclient"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/pkg/syncjob"
	"github.com/riftflow/riftflow/pkg/telemetry"
	retrysweeper "github.com/riftflow/riftflow/services/retry-sweeper"
	"github.com/riftflow/riftflow/services/riftflow/api"
	"github.com/riftflow/riftflow/streams"
)

// ---- ingest --------------------------------------------------------------

func cmdIngest(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("ingest", flag.ContinueOnError)
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
	if err := localNATS(&env, false); err != nil {
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
	nc, _, err := connect.NATS(ctx, env.NATS, nil, "riftflow-cli", slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer nc.Close()
	subj := bus.Subjects{Prefix: env.NATS.SubjectPrefix}
	queueInJobLog(ctx, env, req, out)
	if !*wait {
		if err := publishRequest(ctx, nc, subj, req); err != nil {
			return err
		}
		fmt.Fprintf(out, "request %s published on %s\n", req.RequestID, subj.IngestFor(req.Priority))
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	ev, err := publishAndWait(ctx, nc, subj, req, out)
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

func publishRequest(ctx context.Context, nc *nats.Conn, subj bus.Subjects, req bus.IngestRequest) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	m := nats.NewMsg(subj.IngestFor(req.Priority))
	m.Data = data
	m.Header.Set(nats.MsgIdHdr, bus.IngestMsgID(req.RequestID))
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// A producer span, whose context travels in the headers: the root of
	// the request's trace.
	_, err = natsx.PublishMsg(ctx, js, m)
	return err
}

// publishAndWait publishes req on lol.ingest.request and follows its
// progress events and rejections until the sync completes or fails.
func publishAndWait(ctx context.Context, nc *nats.Conn, subj bus.Subjects, req bus.IngestRequest, out io.Writer) (bus.ProgressEvent, error) {
	events := make(chan *nats.Msg, 256)
	sub1, err := nc.ChanSubscribe(subj.ProgressAll(), events)
	if err != nil {
		return bus.ProgressEvent{}, err
	}
	defer sub1.Unsubscribe()
	sub2, err := nc.ChanSubscribe(subj.IngestRejected(), events)
	if err != nil {
		return bus.ProgressEvent{}, err
	}
	defer sub2.Unsubscribe()
	if err := publishRequest(ctx, nc, subj, req); err != nil {
		return bus.ProgressEvent{}, err
	}
	fmt.Fprintf(out, "request %s published on %s\n", req.RequestID, subj.IngestFor(req.Priority))
	last := -1
	for {
		select {
		case <-ctx.Done():
			return bus.ProgressEvent{}, fmt.Errorf("waiting for request %s: %w", req.RequestID, ctx.Err())
		case m := <-events:
			if m.Subject == subj.IngestRejected() {
				var r bus.Rejection
				if json.Unmarshal(m.Data, &r) == nil && r.RequestID == req.RequestID {
					return bus.ProgressEvent{}, fmt.Errorf("rejected (%d): %s", r.Code, r.Reason)
				}
				continue
			}
			var ev bus.ProgressEvent
			if json.Unmarshal(m.Data, &ev) != nil || ev.RequestID != req.RequestID {
				continue
			}
			if ev.Progress != last || syncjob.Status(ev.Status) != syncjob.Syncing {
				fmt.Fprintf(out, "  %-9s %d/%d matches\n", ev.Status, ev.Progress, ev.Total)
				last = ev.Progress
			}
			if syncjob.Status(ev.Status).Finished() {
				return ev, nil
			}
		}
	}
}

// ---- status --------------------------------------------------------------

func cmdStatus(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	riotID := fs.String("riot-id", "", "Riot ID, gameName#tagLine")
	puuid := fs.String("puuid", "", "PUUID")
	failures := fs.Bool("failures", false, "list fetch failures and ledger counts")
	jobs := fs.Bool("jobs", false, "list the job log (syncs and scheduled jobs), newest first; with --puuid, that account's")
	jobType := fs.String("job-type", "", "with --jobs: only this type (sync, latest_all, rank_daily, weekly_report, recovery)")
	asJSON := fs.Bool("json", false, "print JSON")
	rateLimit := fs.Bool("ratelimit", false, "shared Riot rate-limit state: budgets used, 429s by type, waits, key rejected (from NATS KV)")
	schedules := fs.Bool("schedules", false, "each scheduled job (CRON_*): its last run from the job log and its next run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	env, err := config.Load()
	if err != nil {
		return err
	}
	if *rateLimit {
		return cmdStatusRateLimit(ctx, env, out, *asJSON)
	}
	st, err := openStore(ctx, env)
	if err != nil {
		return err
	}
	defer st.Close()
	if *failures {
		return printFailures(ctx, st, out, *asJSON)
	}
	if *jobs {
		return printJobs(ctx, st, out, store.JobFilter{PUUID: *puuid, Type: *jobType, Limit: 50}, *asJSON)
	}
	if *schedules {
		return printSchedules(ctx, st, out, time.Now(), *asJSON)
	}
	var s store.AccountStatus
	switch {
	case *puuid != "":
		s, err = st.AccountStatus(ctx, *puuid)
	case *riotID != "":
		id, perr := riot.ParseRiotID(*riotID)
		if perr != nil {
			return perr
		}
		s, err = st.AccountByRiotID(ctx, id.GameName, id.TagLine)
	default:
		return errors.New("give --riot-id, --puuid, --failures, --jobs, --schedules or --ratelimit")
	}
	if errors.Is(err, store.ErrNotFound) {
		return errors.New("no such account: it has never been synced")
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(out).Encode(s)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	a := s.Account
	fmt.Fprintf(tw, "account\t%s#%s (%s, %s)\n", a.GameName, a.TagLine, a.Platform, a.PUUID)
	fmt.Fprintf(tw, "sync\t%s, %d/%d matches, request %s\n", a.SyncStatus, a.SyncProgress, a.SyncTotal, a.SyncRequestID)
	for _, q := range s.Queued {
		fmt.Fprintf(tw, "queued\t%s, #%d in the %s queue, requested %s\n", q.RequestID, q.Position, q.Priority, fmtTime(q.RequestedAt))
	}
	if a.SyncError != "" {
		fmt.Fprintf(tw, "error\t%s\n", a.SyncError)
	}
	fmt.Fprintf(tw, "last synced\t%s\n", fmtTime(a.LastSyncedAt))
	fmt.Fprintf(tw, "stored\t%d matches, %d participants, %d timelines\n", s.Matches, s.Participants, s.Timelines)
	fmt.Fprintf(tw, "fetch ledger\t%s\n", ledgerLine(s.Ledger))
	return tw.Flush()
}

func printFailures(ctx context.Context, st *store.Store, out io.Writer, asJSON bool) error {
	counts, err := st.LedgerCounts(ctx)
	if err != nil {
		return err
	}
	fs, err := st.Failures(ctx, 100)
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(out).Encode(map[string]any{"counts": counts, "failures": fs})
	}
	fmt.Fprintf(out, "fetch ledger: %s\n\n", ledgerLine(counts))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MATCH\tKIND\tSTATUS\tRETRIES\tLAST ATTEMPT\tREASON")
	for _, f := range fs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", f.MatchID, f.Kind, f.Status, f.RetryCount, fmtTime(f.LastAttemptAt), f.LastError)
	}
	return tw.Flush()
}

// cmdStatusRateLimit is `riftflow status --ratelimit`: the shared rate-limit
// state read from the KV bucket "ratelimit" (NATS_URL or the local `up`).
// With RIOT_API_KEY set it shows that key only (by its KeyID hash);
// otherwise every key found (the simulator's key under `riftflow up`).
func cmdStatusRateLimit(ctx context.Context, env config.Env, out io.Writer, asJSON bool) error {
	if err := localNATS(&env, false); err != nil {
		return err
	}
	nc, js, err := connect.NATS(ctx, env.NATS, nil, "riftflow-status", slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer nc.Close()
	keyID := ""
	if env.Riot.APIKey != "" {
		keyID = riotclient.KeyID(env.Riot.APIKey.Reveal())
	}
	return printRateLimit(ctx, js, keyID, out, asJSON)
}

// printJobs is `riftflow status --jobs`: the job log as a table or JSON.
func printJobs(ctx context.Context, st *store.Store, out io.Writer, f store.JobFilter, asJSON bool) error {
	jobs, err := st.Jobs(ctx, f)
	if err != nil {
		return err
	}
	if asJSON {
		rows := make([]api.Job, 0, len(jobs))
		for _, j := range jobs {
			rows = append(rows, api.JobOf(j))
		}
		return json.NewEncoder(out).Encode(rows)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTYPE\tSTATUS\tRETRIES\tREQUESTED\tSTARTED\tFINISHED\tPUUID\tERROR")
	for _, j := range jobs {
		status := string(j.Status)
		if j.Position > 0 {
			status = fmt.Sprintf("%s #%d", j.Status, j.Position)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", j.ID, j.Type, status, j.Retries, fmtTime(j.RequestedAt),
			fmtTime(j.StartedAt), fmtTime(j.FinishedAt), j.PUUID, j.Error)
	}
	return tw.Flush()
}

// scheduleRun is a scheduled job in `riftflow status --schedules`: its
// schedule and next time, and its last run from the job log (absent when
// it never ran).
type scheduleRun struct {
	retrysweeper.Schedule
	LastRun *api.Job `json:"last_run,omitempty"`
}

// printSchedules is `riftflow status --schedules`: each scheduled job of
// the retry-sweeper, as this environment configures them (SCHEDULE_ENABLE,
// CRON_*), with its last run (the newest jobs row of its type: scheduled
// time, status, end) and its next time after now.
func printSchedules(ctx context.Context, st *store.Store, out io.Writer, now time.Time, asJSON bool) error {
	var e retrysweeper.ScheduleConfig
	if err := config.Parse(&e); err != nil {
		return err
	}
	scheds, err := retrysweeper.Schedules(e, now)
	if err != nil {
		return err
	}
	runs := make([]scheduleRun, 0, len(scheds))
	for _, sc := range scheds {
		r := scheduleRun{Schedule: sc}
		last, err := st.Jobs(ctx, store.JobFilter{Type: sc.Job, Limit: 1})
		if err != nil {
			return err
		}
		if len(last) > 0 {
			j := api.JobOf(last[0])
			r.LastRun = &j
		}
		runs = append(runs, r)
	}
	if asJSON {
		return json.NewEncoder(out).Encode(runs)
	}
	if scheds == nil {
		fmt.Fprintln(out, "no schedules: SCHEDULE_ENABLE is false")
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSCHEDULE (UTC)\tLAST RUN\tSTATUS\tFINISHED\tNEXT RUN")
	for _, r := range runs {
		last, status, finished := "never", "", ""
		if j := r.LastRun; j != nil {
			last, status = fmtTime(j.RequestedAt), j.Status
			if j.FinishedAt != nil {
				finished = fmtTime(*j.FinishedAt)
			}
		}
		fmt.Fprintf(tw, "%s\t%s (%s)\t%s\t%s\t%s\t%s\n", r.Job, r.Expr, r.Env, last, status, finished, fmtTime(r.Next))
	}
	return tw.Flush()
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Local().Format(time.DateTime)
}

// ---- retry / pause / forget / rotate-key (admin, over NATS) --------------

// adminConn is an admin command's connection to NATS (connectCLI).
type adminConn struct {
	env config.Env
	log *slog.Logger
	js  jetstream.JetStream
}

// runAdmin runs an admin command (pause, forget, retry, rotate-key): it
// parses the command's flags (fs, named after the command) from args, vets
// them with check when it is not nil, then connects to NATS as connectCLI
// does, under the name riftflow-<command>, and runs do on the connection,
// which it closes after.
func runAdmin(ctx context.Context, fs *flag.FlagSet, args []string, stderr io.Writer, check func() error, do func(c adminConn) error) error {
	fs.SetOutput(stderr)
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
	fs := flag.NewFlagSet("retry", flag.ContinueOnError)
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
	fs := flag.NewFlagSet("pause", flag.ContinueOnError)
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
	fs := flag.NewFlagSet("forget", flag.ContinueOnError)
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
		out, _ := json.MarshalIndent(res, "", "  ")
		fmt.Fprintln(stdout, string(out))
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
	fs := flag.NewFlagSet("rotate-key", flag.ContinueOnError)
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

// ---- token / show (Postgres) ---------------------------------------------

// cmdToken is `riftflow token create|list|revoke` (DATABASE_URL, or the
// database of a local `riftflow up`).
func cmdToken(ctx context.Context, args []string, out io.Writer) error {
	const usage = "usage: riftflow token create --name N --scopes read[,sync,admin] | list [--json] | revoke ID"
	if len(args) == 0 {
		return errors.New(usage)
	}
	_, url, err := loadDB()
	if err != nil {
		return err
	}
	open := func() (*api.Tokens, func(), error) {
		st, err := store.Open(ctx, url)
		if err != nil {
			return nil, nil, err
		}
		return api.NewTokens(st), st.Close, nil
	}
	switch args[0] {
	case "create":
		fs := flag.NewFlagSet("token create", flag.ContinueOnError)
		name := fs.String("name", "", "who or what holds the token (required)")
		scopes := fs.String("scopes", string(api.ScopeRead), "comma-separated: read (GET), sync (start syncs; includes read), admin (everything)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		sc, err := api.ParseScopes(*scopes)
		if err != nil {
			return err
		}
		ts, closeDB, err := open()
		if err != nil {
			return err
		}
		defer closeDB()
		token, t, err := ts.Create(ctx, *name, sc)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "token %s for %q, scopes %s (shown once; only its SHA-256 is stored):\n%s\n",
			t.ID, t.Name, strings.Join(api.ScopeStrings(t.Scopes), ","), token)
		return nil
	case "list":
		fs := flag.NewFlagSet("token list", flag.ContinueOnError)
		asJSON := fs.Bool("json", false, "print JSON")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		ts, closeDB, err := open()
		if err != nil {
			return err
		}
		defer closeDB()
		list, err := ts.List(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(out).Encode(list)
		}
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tSCOPES\tCREATED\tLAST USED\tREVOKED")
		for _, t := range list {
			revoked := "-"
			if t.RevokedAt != nil {
				revoked = fmtTime(*t.RevokedAt)
			}
			used := "never"
			if t.LastUsedAt != nil {
				used = fmtTime(*t.LastUsedAt)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, strings.Join(api.ScopeStrings(t.Scopes), ","),
				fmtTime(t.CreatedAt), used, revoked)
		}
		return tw.Flush()
	case "revoke":
		if len(args) != 2 {
			return errors.New(usage)
		}
		id := api.TokenID(args[1]) // an id, or the whole token
		ts, closeDB, err := open()
		if err != nil {
			return err
		}
		defer closeDB()
		if err := ts.Revoke(ctx, id); errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("no live token %s (see `riftflow token list`)", id)
		} else if err != nil {
			return err
		}
		fmt.Fprintf(out, "token %s revoked\n", id)
		return nil
	}
	return errors.New(usage)
}

// cmdShow is `riftflow show`: the read API's answers from the CLI, read
// from Postgres (DATABASE_URL): --match ID [--timeline] prints the stored
// MatchDto (or TimelineDto) as Riot sent it; --puuid P prints the player
// and a page of their matches, or with --ranks their league snapshots, or
// with --reports their weekly reports (--limit, --cursor as the API's).
func cmdShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("show", flag.ContinueOnError)
	fs.SetOutput(stderr)
	match := fs.String("match", "", "a match ID")
	timeline := fs.Bool("timeline", false, "with --match: the timeline")
	puuid := fs.String("puuid", "", "a player")
	ranks := fs.Bool("ranks", false, "with --puuid: their daily league-v4 snapshots instead of matches")
	reports := fs.Bool("reports", false, "with --puuid: their weekly reports instead of matches")
	limit := fs.Int("limit", 20, "with --puuid: rows per page (1..100)")
	cursor := fs.String("cursor", "", "with --puuid: the next page's cursor")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*match == "") == (*puuid == "") || (*ranks && *reports) || (*match != "" && (*ranks || *reports)) {
		return errors.New("usage: riftflow show --match ID [--timeline] | --puuid P [--ranks | --reports] [--limit N] [--cursor C]")
	}
	if *limit < 1 || *limit > 100 {
		return fmt.Errorf("--limit %d: want 1..100", *limit)
	}
	env, err := config.Load()
	if err != nil {
		return err
	}
	st, err := openStore(ctx, env)
	if err != nil {
		return err
	}
	defer st.Close()
	if *match != "" {
		load := st.MatchRaw
		if *timeline {
			load = st.TimelineRaw
		}
		body, _, err := load(ctx, *match)
		if err != nil {
			return err
		}
		_, err = stdout.Write(append(body, '\n'))
		return err
	}
	acct, err := st.AccountStatus(ctx, *puuid)
	if err != nil {
		return err
	}
	out := map[string]any{"player": acct}
	switch {
	case *ranks || *reports:
		page, err := api.DecodeDayCursor(*cursor)
		if err != nil {
			return err
		}
		if *ranks {
			rs, err := st.RankSnapshots(ctx, *puuid, page, *limit)
			if err != nil {
				return err
			}
			out["ranks"] = rs
			if len(rs) == *limit {
				out["next"] = api.EncodeDayCursor(rs[len(rs)-1].SnapshotDate, rs[len(rs)-1].QueueType)
			}
		} else {
			rs, err := st.WeeklyReports(ctx, *puuid, page, *limit)
			if err != nil {
				return err
			}
			out["reports"] = rs
			if len(rs) == *limit {
				out["next"] = api.EncodeDayCursor(rs[len(rs)-1].WeekStart, "")
			}
		}
	default:
		page, err := api.DecodeCursor(*cursor)
		if err != nil {
			return err
		}
		ms, err := st.PlayerMatches(ctx, *puuid, page, *limit)
		if err != nil {
			return err
		}
		mp := api.NewMatchesPage(ms, *limit)
		out["matches"] = mp.Matches
		if mp.Next != "" {
			out["next"] = mp.Next
		}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
