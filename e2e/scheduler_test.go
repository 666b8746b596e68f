package e2e

// The retry-sweeper's scheduled jobs on the whole pipeline (design 002's
// daily ranks and weekly report); the scheduler itself is tested in
// services/retry-sweeper.

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/riftflow/riftflow/internal/stagetest"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/store"
	retrysweeper "github.com/riftflow/riftflow/services/retry-sweeper"
	"github.com/riftflow/riftflow/services/riftflow/stack/stacktest"
)

// TestRanksAndWeeklyReportOnRecordedData syncs the richest recorded player,
// takes a rank snapshot through league-v4 and builds the weekly report of
// the week of its newest game; the expected numbers are computed from the
// stored raw MatchDto payloads and the simulator's league answer.
func TestRanksAndWeeklyReportOnRecordedData(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{Env: map[string]string{"SCHEDULE_ENABLE": "false"}})
	p, _ := richestPlayer(t, h, 730)
	ev, err := h.Ingest(bus.IngestRequest{PUUID: p.PUUID, Platform: p.Platform, Mode: bus.ModeFull, LookbackDays: 730, Count: 1000}, 3*time.Minute)
	if err != nil || ev.Status != "completed" {
		t.Fatalf("sync: %+v %v", ev, err)
	}
	h.WaitIdle(20 * time.Second)
	var newest time.Time
	if err := h.DB.QueryRow(h.Ctx, `SELECT max(coalesce(m.game_start, m.game_creation)) FROM matches m
JOIN match_participants p USING (match_id) WHERE p.puuid = $1`, p.PUUID).Scan(&newest); err != nil {
		t.Fatal(err)
	}
	// The weekly run whose week holds the newest game.
	at := stagetest.NextMonday(newest.AddDate(0, 0, -7)).Add(4 * time.Hour)
	if !newest.Before(at.Truncate(24 * time.Hour)) {
		at = at.AddDate(0, 0, 7)
	}
	from, to := retrysweeper.WeekOf(at)

	// Expected, from the raw payloads.
	var games, wins, kills, deaths, assists int
	champs := map[string]int{}
	rows, err := h.DB.Query(h.Ctx, `SELECT raw FROM matches WHERE raw IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var body []byte
		rows.Scan(&body)
		var m struct {
			Info struct {
				GameCreation int64 `json:"gameCreation"`
				GameStart    int64 `json:"gameStartTimestamp"`
				Participants []struct {
					PUUID        string `json:"puuid"`
					ChampionName string `json:"championName"`
					Win          bool   `json:"win"`
					Kills        int    `json:"kills"`
					Deaths       int    `json:"deaths"`
					Assists      int    `json:"assists"`
				} `json:"participants"`
			} `json:"info"`
		}
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatal(err)
		}
		start := m.Info.GameStart
		if start == 0 {
			start = m.Info.GameCreation
		}
		if st := time.UnixMilli(start); st.Before(from) || !st.Before(to) {
			continue
		}
		for _, pa := range m.Info.Participants {
			if pa.PUUID != p.PUUID {
				continue
			}
			games++
			if pa.Win {
				wins++
			}
			kills, deaths, assists = kills+pa.Kills, deaths+pa.Deaths, assists+pa.Assists
			champs[pa.ChampionName]++
		}
	}
	if games == 0 {
		t.Fatal("test premise: no game in the report week")
	}

	// An older snapshot at the start of the week, so the LP change is known.
	platform, _ := riot.ParsePlatform(p.Platform)
	entries, err := h.St.Infra.Riot.LeagueEntriesByPUUID(h.Ctx, platform, p.PUUID)
	if err != nil || len(entries) == 0 {
		t.Fatalf("test premise: league entries %v %v", entries, err)
	}
	e0 := entries[0]
	for _, e := range entries {
		if e.QueueType == "RANKED_SOLO_5x5" {
			e0 = e
		}
	}
	if err := h.St.Infra.Store.UpsertLeagueEntries(h.Ctx, []store.LeagueEntry{{PUUID: p.PUUID, QueueType: e0.QueueType,
		SnapshotDate: from, Platform: string(platform), Tier: "SILVER", Rank: "II", LeaguePoints: 10}}); err != nil {
		t.Fatal(err)
	}
	if err := h.St.Infra.Store.LinkAccount(h.Ctx, store.Account{PUUID: p.PUUID, Platform: string(platform), Region: string(platform.Region())}); err != nil {
		t.Fatal(err)
	}
	proc := *h.St.Infra.Process
	proc.Now = func() time.Time { return at }
	sc, err := retrysweeper.OpenScheduler(h.Ctx, &proc, h.St.Infra.Store, h.St.Infra.Riot)
	if err != nil {
		t.Fatal(err)
	}
	if ran, err := sc.RunJob(h.Ctx, retrysweeper.JobRankDaily, at.Add(-time.Hour)); !ran || err != nil {
		t.Fatalf("rank run: %v %v", ran, err)
	}
	if n := h.Count(`SELECT count(*) FROM league_entries WHERE puuid = $1 AND snapshot_date = $2::date AND tier = $3 AND rank = $4 AND league_points = $5`,
		p.PUUID, at, e0.Tier, e0.Rank, int(e0.LeaguePoints)); n != 1 {
		t.Errorf("no daily snapshot matching league-v4's %s %s %d LP", e0.Tier, e0.Rank, e0.LeaguePoints)
	}
	// The standalone retry-sweeper (its main's retrysweeper.Connect) opens its
	// own Riot client from RIOT_API_KEY on the shared limiter for the
	// scheduler, so the rank job runs there too; without one it would
	// fail with "no Riot client".
	standalone, err := retrysweeper.Connect(h.Ctx, &proc)
	if err != nil {
		t.Fatal(err)
	}
	sc2 := standalone.Scheduler
	if ran, err := sc2.RunJob(h.Ctx, retrysweeper.JobRankDaily, at.Add(-2*time.Hour)); !ran || err != nil {
		t.Fatalf("rank run in a standalone retry-sweeper: ran %v, err %v", ran, err)
	}
	got, stop := capture(h, h.St.Infra.Subjects.WeeklyReport())
	defer stop()
	if ran, err := sc.RunJob(h.Ctx, retrysweeper.JobWeeklyReport, at); !ran || err != nil {
		t.Fatalf("weekly run: %v %v", ran, err)
	}
	var r struct {
		Games, Wins, Kills, Deaths, Assists int
		LP                                  *int
		Top                                 []store.ChampionStat
	}
	var top []byte
	if err := h.DB.QueryRow(h.Ctx, `SELECT games, wins, kills, deaths, assists, lp_change, top_champions
FROM weekly_reports WHERE puuid = $1 AND week_start = $2::date`, p.PUUID, from).Scan(&r.Games, &r.Wins, &r.Kills, &r.Deaths,
		&r.Assists, &r.LP, &top); err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(top, &r.Top)
	if r.Games != games || r.Wins != wins || r.Kills != kills || r.Deaths != deaths || r.Assists != assists {
		t.Errorf("report %+v, want games %d wins %d k/d/a %d/%d/%d", r, games, wins, kills, deaths, assists)
	}
	wantLP := store.LadderPoints(e0.Tier, e0.Rank, int(e0.LeaguePoints)) - store.LadderPoints("SILVER", "II", 10)
	if r.LP == nil || *r.LP != wantLP {
		t.Errorf("lp_change %v, want %d", r.LP, wantLP)
	}
	if len(r.Top) == 0 || champs[r.Top[0].ChampionName] != r.Top[0].Games {
		t.Errorf("top champions %+v vs %v", r.Top, champs)
	}
	for _, c := range r.Top[1:] {
		if c.Games > r.Top[0].Games {
			t.Errorf("top champions not ordered: %+v", r.Top)
		}
	}
	h.St.Infra.NC.Flush()
	var notice retrysweeper.WeeklyNotice
	stacktest.WaitFor(t, "the weekly notice", 10*time.Second, func() bool {
		for _, m := range got() {
			if json.Unmarshal(m.Data, &notice) == nil && notice.PUUID == p.PUUID {
				return true
			}
		}
		return false
	})
	if notice.Games != games || notice.WeekStart != from.Format(time.DateOnly) || notice.LPChange == nil || *notice.LPChange != wantLP {
		t.Errorf("notice %+v", notice)
	}
}
