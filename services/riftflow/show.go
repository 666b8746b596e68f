package riftflow

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/riftflow/riftflow/pkg/config"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/services/riftflow/api"
)

// cmdShow is `riftflow show`: the read API's answers from the CLI, read
// from Postgres (DATABASE_URL): --match ID [--timeline] prints the stored
// MatchDto (or TimelineDto) as Riot sent it; --puuid P prints the player
// and a page of their matches, or with --ranks their league snapshots, or
// with --reports their weekly reports (--limit, --cursor as the API's).
func cmdShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("show", stderr)
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
		return showMatch(ctx, st, *match, *timeline, stdout)
	}
	what := "matches"
	if *ranks {
		what = "ranks"
	} else if *reports {
		what = "reports"
	}
	out, err := playerPage(ctx, st, *puuid, what, *cursor, *limit)
	if err != nil {
		return err
	}
	return printIndented(stdout, out)
}

// showMatch writes the stored MatchDto of matchID (with timeline, its
// TimelineDto) to w as Riot sent it.
func showMatch(ctx context.Context, st *store.Store, matchID string, timeline bool, w io.Writer) error {
	load := st.MatchRaw
	if timeline {
		load = st.TimelineRaw
	}
	body, _, err := load(ctx, matchID)
	if err != nil {
		return err
	}
	_, err = w.Write(append(body, '\n'))
	return err
}

// playerPage is the player of puuid and a page of what ("matches",
// "ranks" or "reports") from cursor, as the read API pages it (its
// MatchesPage, RanksPage and ReportsPage): "player", what, and "next"
// when a further page may exist.
func playerPage(ctx context.Context, st *store.Store, puuid, what, cursor string, limit int) (map[string]any, error) {
	acct, err := st.AccountStatus(ctx, puuid)
	if err != nil {
		return nil, err
	}
	out := map[string]any{"player": acct}
	var next string
	switch what {
	case "matches":
		page, err := api.DecodeCursor(cursor)
		if err != nil {
			return nil, err
		}
		ms, err := st.PlayerMatches(ctx, puuid, page, limit)
		if err != nil {
			return nil, err
		}
		p := api.NewMatchesPage(ms, limit)
		out[what], next = p.Matches, p.Next
	case "ranks":
		page, err := api.DecodeDayCursor(cursor)
		if err != nil {
			return nil, err
		}
		rs, err := st.RankSnapshots(ctx, puuid, page, limit)
		if err != nil {
			return nil, err
		}
		p := api.NewRanksPage(rs, limit)
		out[what], next = p.Ranks, p.Next
	default: // "reports"
		page, err := api.DecodeDayCursor(cursor)
		if err != nil {
			return nil, err
		}
		rs, err := st.WeeklyReports(ctx, puuid, page, limit)
		if err != nil {
			return nil, err
		}
		p := api.NewReportsPage(rs, limit)
		out[what], next = p.Reports, p.Next
	}
	if next != "" {
		out["next"] = next
	}
	return out, nil
}
