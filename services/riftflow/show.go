package riftflow

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/services/riftflow/api"
)

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
	return printIndented(stdout, out)
}
