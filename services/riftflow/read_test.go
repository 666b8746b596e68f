package riftflow

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/riftflow/riftflow/pkg/riot"
	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/services/riftflow/api"
	"github.com/riftflow/riftflow/services/riftflow/stack/stacktest"
)

// TestReadAPI: after a sync, every stored match and timeline is served
// JSON-equal (and byte-equal) to the simulator's answer, with an ETag
// (304 on If-None-Match) and design 002's one-day Cache-Control; answers
// come from the in-process cache once read; a player's matches page
// newest first through an opaque cursor; errors are problem+json.
func TestReadAPI(t *testing.T) {
	h, p := stacktest.Synced(t, 5)
	srv := stacktest.APIServer(t, h.St.Infra, api.ScopeAdmin)
	get := func(path string, hdr ...string) (*http.Response, []byte) {
		t.Helper()
		return getFrom(t, srv.URL+path, hdr...)
	}
	jsonEqual := func(a, b []byte) bool {
		var x, y any
		return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
	}
	rows, _ := h.DB.Query(h.Ctx, `SELECT match_id, EXISTS (SELECT 1 FROM match_timelines t WHERE t.match_id = m.match_id) FROM matches m`)
	type stored struct {
		id       string
		timeline bool
	}
	var all []stored
	for rows.Next() {
		var s stored
		rows.Scan(&s.id, &s.timeline)
		all = append(all, s)
	}
	if len(all) != 5 {
		t.Fatalf("%d stored matches, want 5", len(all))
	}
	for _, s := range all {
		_, want, err := h.St.Infra.Riot.Match(h.Ctx, riot.Americas, s.id)
		if err != nil {
			t.Fatal(err)
		}
		resp, got := get("/v1/matches/" + s.id)
		if resp.StatusCode != 200 || !jsonEqual(got, want) || !bytes.Equal(got, want) {
			t.Errorf("match %s: %d, JSON-equal %v, byte-equal %v", s.id, resp.StatusCode, jsonEqual(got, want), bytes.Equal(got, want))
		}
		if cc := resp.Header.Get("Cache-Control"); cc != "public, max-age=86400" || resp.Header.Get("ETag") == "" {
			t.Errorf("match %s: Cache-Control %q, ETag %q", s.id, cc, resp.Header.Get("ETag"))
		}
		if r2, _ := get("/v1/matches/"+s.id, "If-None-Match", resp.Header.Get("ETag")); r2.StatusCode != http.StatusNotModified {
			t.Errorf("match %s with If-None-Match: %d, want 304", s.id, r2.StatusCode)
		}
		if !s.timeline {
			continue
		}
		_, wantTL, err := h.St.Infra.Riot.Timeline(h.Ctx, riot.Americas, s.id)
		if err != nil {
			t.Fatal(err)
		}
		if resp, got := get("/v1/matches/" + s.id + "/timeline"); resp.StatusCode != 200 || !jsonEqual(got, wantTL) {
			t.Errorf("timeline %s: %d, JSON-equal %v", s.id, resp.StatusCode, jsonEqual(got, wantTL))
		}
	}
	// Read once, served from the cache even when the row is gone.
	if _, err := h.DB.Exec(h.Ctx, `DELETE FROM matches WHERE match_id = $1`, all[0].id); err != nil {
		t.Fatal(err)
	}
	if resp, _ := get("/v1/matches/" + all[0].id); resp.StatusCode != 200 {
		t.Errorf("a match read before was not served from the cache: %d", resp.StatusCode)
	}
	// Pages of 2, newest first.
	var ids []string
	cursor := ""
	for page := 0; page < 5; page++ {
		resp, body := get("/v1/players/" + p.PUUID + "/matches?limit=2&cursor=" + cursor)
		var mp api.MatchesPage
		if resp.StatusCode != 200 || json.Unmarshal(body, &mp) != nil {
			t.Fatalf("page %d: %d %s", page, resp.StatusCode, body)
		}
		for _, m := range mp.Matches {
			ids = append(ids, m.MatchID)
		}
		if cursor = mp.Next; cursor == "" {
			break
		}
	}
	var want []string
	for _, m := range p.Matches[:5] {
		if m.ID != all[0].id {
			want = append(want, m.ID)
		}
	}
	if !reflect.DeepEqual(ids, want) {
		t.Errorf("paged matches %v, want newest first %v", ids, want)
	}
	// riftflow show reads the same.
	t.Setenv("DATABASE_URL", h.St.Infra.Env.Postgres.URL.Reveal())
	var out, errOut bytes.Buffer
	if rc := Main([]string{"show", "--match", all[1].id}, &out, &errOut); rc != 0 {
		t.Fatalf("riftflow show: %d %s", rc, errOut.String())
	}
	if _, want, _ := h.St.Infra.Riot.Match(h.Ctx, riot.Americas, all[1].id); !jsonEqual(out.Bytes(), want) {
		t.Error("riftflow show --match differs from Riot's MatchDto")
	}
	out.Reset()
	if rc := Main([]string{"show", "--puuid", p.PUUID, "--limit", "10"}, &out, &errOut); rc != 0 ||
		strings.Count(out.String(), `"match_id"`) != 4 {
		t.Errorf("riftflow show --puuid: %d %s", rc, out.String())
	}
	for path, code := range map[string]int{"/v1/matches/NA1_1": 404, "/v1/players/x/matches?cursor=bm9wZQ": 400,
		"/v1/players/x/matches?limit=0": 400, "/v1/players/nobody": 404} {
		if resp, _ := get(path); resp.StatusCode != code || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("GET %s: %d %s, want %d problem+json", path, resp.StatusCode, resp.Header.Get("Content-Type"), code)
		}
	}
}

// TestPlayerRanksAndReports: GET /v1/players/{puuid}/ranks and /reports
// answer the stored league snapshots and weekly reports of that player
// only, newest first, in pages joined by an opaque cursor, with an ETag
// (304 on If-None-Match) and design 002's 5-minute Cache-Control; bad
// paging is 400; `riftflow show --ranks` and `--reports` print the same.
func TestPlayerRanksAndReports(t *testing.T) {
	h := stacktest.Start(t, stacktest.Options{NoRun: true})
	st := h.St.Infra.Store
	const p, other = "puuid-ranks-player", "puuid-someone-else"
	day0 := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	var entries []store.LeagueEntry
	for d := 0; d < 3; d++ {
		for _, q := range []string{"RANKED_FLEX_SR", "RANKED_SOLO_5x5"} {
			entries = append(entries, store.LeagueEntry{PUUID: p, QueueType: q, SnapshotDate: day0.AddDate(0, 0, d),
				Platform: "na1", Tier: "GOLD", Rank: "II", LeaguePoints: 10*d + len(q)})
		}
	}
	entries = append(entries, store.LeagueEntry{PUUID: other, QueueType: "RANKED_SOLO_5x5", SnapshotDate: day0.AddDate(0, 0, 9), Tier: "IRON"})
	if err := st.UpsertLeagueEntries(h.Ctx, entries); err != nil {
		t.Fatal(err)
	}
	lp := 17
	for w := 0; w < 3; w++ {
		if err := st.SaveWeeklyReport(h.Ctx, store.WeeklyReport{PUUID: p, WeekStart: day0.AddDate(0, 0, -7*w),
			WeeklyStats: store.WeeklyStats{Games: w + 1, Wins: w, TopChampions: []store.ChampionStat{{ChampionName: "Ahri", Games: w + 1}}},
			LPChange:    &lp}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SaveWeeklyReport(h.Ctx, store.WeeklyReport{PUUID: other, WeekStart: day0.AddDate(0, 0, 7)}); err != nil {
		t.Fatal(err)
	}
	srv := stacktest.APIServer(t, h.St.Infra, api.ScopeRead)
	// The pages as the API answers them.
	type ranksPage struct {
		Ranks []store.RankSnapshot `json:"ranks"`
		Next  string               `json:"next"`
	}
	type reportsPage struct {
		Reports []store.StoredReport `json:"reports"`
		Next    string               `json:"next"`
	}

	var ranks []string
	cursor := ""
	for page := 0; ; page++ {
		resp, body := getFrom(t, srv.URL+"/v1/players/"+p+"/ranks?limit=4&cursor="+cursor)
		var rp ranksPage
		if resp.StatusCode != 200 || json.Unmarshal(body, &rp) != nil || page > 2 {
			t.Fatalf("ranks page %d: %d %s", page, resp.StatusCode, body)
		}
		if cc := resp.Header.Get("Cache-Control"); cc != "public, max-age=300" || resp.Header.Get("ETag") == "" {
			t.Errorf("ranks: Cache-Control %q, ETag %q", cc, resp.Header.Get("ETag"))
		}
		if r2, _ := getFrom(t, srv.URL+"/v1/players/"+p+"/ranks?limit=4&cursor="+cursor, "If-None-Match", resp.Header.Get("ETag")); r2.StatusCode != http.StatusNotModified {
			t.Errorf("ranks with If-None-Match: %d, want 304", r2.StatusCode)
		}
		for _, r := range rp.Ranks {
			ranks = append(ranks, r.SnapshotDate+" "+r.QueueType)
		}
		if cursor = rp.Next; cursor == "" {
			break
		}
	}
	want := []string{"2026-11-22 RANKED_SOLO_5x5", "2026-11-22 RANKED_FLEX_SR", "2026-11-21 RANKED_SOLO_5x5",
		"2026-11-21 RANKED_FLEX_SR", "2026-11-20 RANKED_SOLO_5x5", "2026-11-20 RANKED_FLEX_SR"}
	if !reflect.DeepEqual(ranks, want) {
		t.Errorf("ranks %v, want %v", ranks, want)
	}

	resp, body := getFrom(t, srv.URL+"/v1/players/"+p+"/reports?limit=2")
	var rp reportsPage
	if resp.StatusCode != 200 || json.Unmarshal(body, &rp) != nil || len(rp.Reports) != 2 || rp.Next == "" ||
		rp.Reports[0].WeekStart != "2026-11-20" || rp.Reports[1].WeekStart != "2026-11-13" || rp.Reports[0].Games != 1 ||
		rp.Reports[0].LPChange == nil || *rp.Reports[0].LPChange != 17 || !strings.Contains(string(rp.Reports[0].TopChampions), "Ahri") {
		t.Fatalf("reports page 1: %d %s", resp.StatusCode, body)
	}
	resp, body = getFrom(t, srv.URL+"/v1/players/"+p+"/reports?limit=2&cursor="+rp.Next)
	rp = reportsPage{}
	if err := json.Unmarshal(body, &rp); resp.StatusCode != 200 || err != nil || len(rp.Reports) != 1 ||
		rp.Reports[0].WeekStart != "2026-11-06" || rp.Next != "" {
		t.Errorf("reports page 2: %d %s", resp.StatusCode, body)
	}
	for path, code := range map[string]int{"/ranks?limit=0": 400, "/ranks?cursor=bm9wZQ": 400, "/reports?limit=101": 400, "/reports?cursor=%21": 400} {
		if resp, _ := getFrom(t, srv.URL+"/v1/players/"+p+path); resp.StatusCode != code || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("GET %s: %d %s, want %d problem+json", path, resp.StatusCode, resp.Header.Get("Content-Type"), code)
		}
	}

	// riftflow show reads the same (the player must have an account row).
	if err := st.UpsertAccount(h.Ctx, store.Account{PUUID: p, Platform: "na1"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", h.St.Infra.Env.Postgres.URL.Reveal())
	for flag, n := range map[string]int{"--ranks": 6, "--reports": 3} {
		var out, errOut bytes.Buffer
		if rc := Main([]string{"show", "--puuid", p, flag}, &out, &errOut); rc != 0 {
			t.Fatalf("riftflow show %s: %d %s", flag, rc, errOut.String())
		}
		if got := strings.Count(out.String(), `"snapshot_date"`) + strings.Count(out.String(), `"week_start"`); got != n {
			t.Errorf("riftflow show %s: %d rows, want %d:\n%s", flag, got, n, out.String())
		}
	}
}
