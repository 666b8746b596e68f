package riftflow

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/store"
	"github.com/riftflow/riftflow/services/resolver"
	"github.com/riftflow/riftflow/services/riftflow/api"
	"github.com/riftflow/riftflow/services/riftflow/stack/stacktest"
	"github.com/riftflow/riftflow/streams"
)

// inflateAll returns data and, for every gzip member that starts anywhere
// in it (a gzip payload, a read-cache value after its ETag line), the
// member inflated.
func inflateAll(data []byte) [][]byte {
	out := [][]byte{data}
	for i := 0; ; {
		j := bytes.Index(data[i:], []byte{0x1f, 0x8b, 0x08})
		if j < 0 {
			return out
		}
		i += j
		if zr, err := gzip.NewReader(bytes.NewReader(data[i:])); err == nil {
			zr.Multistream(false)
			if b, err := io.ReadAll(io.LimitReader(zr, 256<<20)); err == nil || len(b) > 0 {
				out = append(out, b)
			}
		}
		i++
	}
}

// streamsMentioning reads every message of every stream of js (KV buckets
// and object stores included) and returns where one of needles appears in
// a subject, a header value or a payload (gzip inflated).
func streamsMentioning(t *testing.T, ctx context.Context, js jetstream.JetStream, needles ...string) []string {
	t.Helper()
	var hits []string
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		if info.State.Msgs == 0 {
			continue
		}
		s, err := js.Stream(ctx, info.Config.Name)
		if err != nil {
			t.Fatal(err)
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				t.Fatalf("%s #%d: %v", info.Config.Name, seq, err)
			}
			hay := append(inflateAll(m.Data), []byte(m.Subject))
			for _, vs := range m.Header {
				for _, v := range vs {
					hay = append(hay, []byte(v))
				}
			}
			for _, h := range hay {
				for _, n := range needles {
					if bytes.Contains(h, []byte(n)) {
						hits = append(hits, fmt.Sprintf("%s #%d %s: %q", info.Config.Name, seq, m.Subject, n))
					}
				}
			}
		}
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	return hits
}

// TestForgetLeavesNoTrace (issue 26 point 7): after DELETE
// /v1/admin/accounts/{puuid}, neither a pg_dump of the database nor any
// message of any stream (KV buckets, the read cache, EVENTS, DEAD; gzip
// payloads inflated) contains the player's PUUID or Riot ID. The match
// another stored account played in is kept, without the player's
// participant row and with their PUUID, Riot ID and summoner fields
// rewritten out of its MatchDto and TimelineDto; a dead letter about
// someone else stays; the answer says what was removed.
func TestForgetLeavesNoTrace(t *testing.T) {
	h, p := stacktest.Synced(t, 3)
	ctx, inf := h.Ctx, h.St.Infra
	kept := p.Matches[0].ID
	var other string
	if err := h.DB.QueryRow(ctx, `SELECT puuid FROM match_participants WHERE match_id = $1 AND puuid <> $2 AND puuid <> 'BOT' LIMIT 1`,
		kept, p.PUUID).Scan(&other); err != nil {
		t.Fatal(err)
	}
	if err := inf.Store.UpsertAccount(ctx, store.Account{PUUID: other, Platform: "na1", Region: "americas", Active: true}); err != nil {
		t.Fatal(err)
	}
	if h.Count(`SELECT count(*) FROM match_timelines WHERE match_id = $1`, kept) == 0 {
		// The synthetic players' timelines are not stored: give the kept
		// match one shaped as Riot's, naming both players.
		tl := fmt.Sprintf(`{"metadata":{"matchId":%q,"participants":[%q,%q]},"info":{"frameInterval":60000,"participants":[{"participantId":1,"puuid":%q},{"participantId":2,"puuid":%q}]}}`,
			kept, p.PUUID, other, p.PUUID, other)
		if _, err := h.DB.Exec(ctx, `INSERT INTO match_timelines (match_id, raw) VALUES ($1, $2::text::json)`, kept, tl); err != nil {
			t.Fatal(err)
		}
	}
	if err := inf.Store.UpsertLeagueEntries(ctx, []store.LeagueEntry{{PUUID: p.PUUID, QueueType: "RANKED_SOLO_5x5", SnapshotDate: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	srv := stacktest.APIServer(t, inf, api.ScopeAdmin)
	for _, path := range []string{"/v1/matches/" + kept, "/v1/matches/" + kept + "/timeline", "/v1/players/" + p.PUUID + "/matches",
		"/v1/players/" + p.PUUID + "/ranks", "/v1/players/" + p.PUUID + "/reports"} {
		if resp, body := getFrom(t, srv.URL+path); resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
	}
	// Dead letters: two about the player (one gzip, as a dead FetchResult
	// carries Riot's body), one about someone else.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	fmt.Fprintf(zw, `{"metadata":{"participants":[%q]}}`, p.PUUID)
	zw.Close()
	dead := inf.Subjects.Prefix + ".dead." + streams.StreamFetched
	for _, payload := range [][]byte{[]byte(`{"puuid":"` + p.PUUID + `"}`), gz.Bytes(), []byte(`{"puuid":"someone-else"}`)} {
		if _, err := inf.JS.Publish(ctx, dead, payload); err != nil {
			t.Fatal(err)
		}
	}
	// The player's active platform, as the resolver caches it for a
	// request that names none.
	riotIDs, err := inf.KV(ctx, streams.BucketRiotIDs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := riotIDs.Put(ctx, resolver.PlatformCacheKey(p.PUUID), []byte("na1")); err != nil {
		t.Fatal(err)
	}
	dump := func() []byte {
		t.Helper()
		out, err := exec.CommandContext(ctx, "pg_dump", "--no-owner", inf.Env.Postgres.URL.Reveal()).Output()
		if err != nil {
			t.Fatalf("pg_dump: %v", err)
		}
		return out
	}
	riotID := `"` + "Synth0001" + `"` // the player's riotIdGameName in the raw documents
	if d := dump(); !bytes.Contains(d, []byte(p.PUUID)) || !bytes.Contains(d, []byte(riotID)) {
		t.Fatal("the dump does not hold the player before forget: the check below would prove nothing")
	}
	if len(streamsMentioning(t, ctx, inf.JS, p.PUUID)) == 0 {
		t.Fatal("no stream holds the player before forget: the check below would prove nothing")
	}

	participants := h.Count(`SELECT count(*) FROM match_participants WHERE match_id = $1`, kept)
	var res api.ForgetResult
	if code, body := jsonCall(t, srv.URL, "DELETE", "/v1/admin/accounts/"+p.PUUID, "", &res); code != http.StatusOK {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	t.Logf("removed: %+v", res)
	if res.Removed.Participants != 1 || res.Removed.Rewritten != 2 || res.CacheKeys < 5 || res.Events < 1 || res.DeadLetters != 2 {
		t.Errorf("removed %+v: want 1 participant row, the kept MatchDto and TimelineDto rewritten, >= 5 cache keys, the events, 2 dead letters", res)
	}

	d := dump()
	for _, needle := range []string{p.PUUID, riotID} {
		if i := bytes.Index(d, []byte(needle)); i >= 0 {
			t.Errorf("pg_dump still holds %s: …%s…", needle, d[max(0, i-200):min(len(d), i+100)])
		}
	}
	if hits := streamsMentioning(t, ctx, inf.JS, p.PUUID, riotID); len(hits) > 0 {
		t.Errorf("streams still name the player: %v", hits)
	}
	if hits := streamsMentioning(t, ctx, inf.JS, "someone-else"); len(hits) != 1 {
		t.Errorf("the dead letter about someone else: %v, want it kept", hits)
	}
	// The kept match is still served, as valid JSON naming the other player.
	resp, body := getFrom(t, srv.URL+"/v1/matches/"+kept)
	if resp.StatusCode != 200 || !json.Valid(body) || bytes.Contains(body, []byte(p.PUUID)) || !bytes.Contains(body, []byte(other)) {
		t.Errorf("kept match after forget: %d, valid %v, names the player %v, names the other %v", resp.StatusCode,
			json.Valid(body), bytes.Contains(body, []byte(p.PUUID)), bytes.Contains(body, []byte(other)))
	}
	resp, body = getFrom(t, srv.URL+"/v1/matches/"+kept+"/timeline")
	if resp.StatusCode != 200 || !json.Valid(body) || bytes.Contains(body, []byte(p.PUUID)) || !bytes.Contains(body, []byte(other)) {
		t.Errorf("kept timeline after forget: %d %s", resp.StatusCode, body)
	}
	if n := h.Count(`SELECT count(*) FROM match_participants WHERE match_id = $1`, kept); n != participants-1 {
		t.Errorf("kept match: %d participant rows, want %d (the player's gone)", n, participants-1)
	}
}
