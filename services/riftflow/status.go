package riftflow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/store"
	retrysweeper "github.com/riftflow/riftflow/services/retry-sweeper"
	"github.com/riftflow/riftflow/services/riftflow/api"
)

// cmdStatus is `riftflow status`: an account's sync state and counts, or
// with --failures, --jobs, --schedules or --ratelimit those lists.
func cmdStatus(ctx context.Context, args []string, out, stderr io.Writer) error {
	fs := newFlags("status", stderr)
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
	return printAs(out, *asJSON, s, func() error {
		tw := newTable(out)
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
	})
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
	return printAs(out, asJSON, map[string]any{"counts": counts, "failures": fs}, func() error {
		fmt.Fprintf(out, "fetch ledger: %s\n\n", ledgerLine(counts))
		tw := newTable(out)
		fmt.Fprintln(tw, "MATCH\tKIND\tSTATUS\tRETRIES\tLAST ATTEMPT\tREASON")
		for _, f := range fs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", f.MatchID, f.Kind, f.Status, f.RetryCount, fmtTime(f.LastAttemptAt), f.LastError)
		}
		return tw.Flush()
	})
}

// printJobs is `riftflow status --jobs`: the job log as a table or JSON.
func printJobs(ctx context.Context, st *store.Store, out io.Writer, f store.JobFilter, asJSON bool) error {
	jobs, err := st.Jobs(ctx, f)
	if err != nil {
		return err
	}
	rows := make([]api.Job, 0, len(jobs))
	for _, j := range jobs {
		rows = append(rows, api.JobOf(j))
	}
	return printAs(out, asJSON, rows, func() error {
		tw := newTable(out)
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
	})
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
	return printAs(out, asJSON, runs, func() error {
		if scheds == nil {
			fmt.Fprintln(out, "no schedules: SCHEDULE_ENABLE is false")
			return nil
		}
		tw := newTable(out)
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
	})
}
