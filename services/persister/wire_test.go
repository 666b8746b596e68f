package persister_test

import (
	"bytes"
	"compress/gzip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/services/persister"
)

func gzipped(s string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(s))
	zw.Close()
	return b.Bytes()
}

// publishResult publishes r as the match-fetcher does (bus.EncodeFetchResult).
func (e *env) publishResult(r bus.FetchResult) {
	e.t.Helper()
	data, hdr, err := bus.EncodeFetchResult(r)
	if err != nil {
		e.t.Fatal(err)
	}
	m := nats.NewMsg(e.subj.Fetched("asia"))
	m.Data = data
	for k, v := range hdr {
		m.Header[k] = []string{v}
	}
	if _, err := e.js.PublishMsg(e.t.Context(), m, jetstream.WithMsgID(r.MatchID+"/"+string(r.Kind))); err != nil {
		e.t.Fatal(err)
	}
}

// TestTimelinesInBothWireForms: a timeline result with its payload as the
// message data and the fetcher's scan (FetchResult.Timeline) is stored
// byte-equal with the frame columns the fetcher read, never scanned again;
// one in the JSON form (payload base64, no scan) is scanned here; one
// whose gzip is corrupt is recorded permanently_unfetchable and
// dead-lettered with its headers, while the others land.
func TestTimelinesInBothWireForms(t *testing.T) {
	e := newEnv(t, "")
	e.run()
	doc := func(id string) string {
		return `{"metadata":{"matchId":"` + id + `"},"info":{"frameInterval":60000,"frames":[{},{},{}]}}`
	}
	// The fetcher's count (9) differs from the document's (3): stored as sent.
	e.publishResult(bus.FetchResult{MatchID: "JP1_1", Kind: bus.KindTimeline, Region: "asia", Outcome: bus.Success,
		Attempt: 1, Status: 200, Payload: gzipped(doc("JP1_1")), AttemptedAt: time.Now(),
		Timeline: &bus.TimelineMeta{FrameIntervalMs: 30000, FrameCount: 9}})
	legacy := bus.FetchResult{MatchID: "JP1_2", Kind: bus.KindTimeline, Region: "asia", Outcome: bus.Success,
		Attempt: 1, Status: 200, Payload: gzipped(doc("JP1_2")), AttemptedAt: time.Now()}
	if _, err := natsx.Publish(t.Context(), e.js, e.subj.Fetched("asia"), legacy, jetstream.WithMsgID("JP1_2/timeline")); err != nil {
		t.Fatal(err)
	}
	bad := gzipped(doc("JP1_3"))
	bad[len(bad)-6] ^= 0xff // CRC-32
	e.publishResult(bus.FetchResult{MatchID: "JP1_3", Kind: bus.KindTimeline, Region: "asia", Outcome: bus.Success,
		Attempt: 1, Status: 200, Payload: bad, AttemptedAt: time.Now(), PUUID: "p-3",
		Timeline: &bus.TimelineMeta{FrameIntervalMs: 60000, FrameCount: 3}})

	e.waitFor("two timelines stored", func() bool { return e.count(`SELECT count(*) FROM match_timelines`) == 2 })
	e.waitFor("the corrupt one recorded", func() bool {
		return e.count(`SELECT count(*) FROM match_fetches WHERE match_id = 'JP1_3' AND kind = 'timeline' AND status = 'permanently_unfetchable'`) == 1
	})
	for id, want := range map[string][2]int{"JP1_1": {30000, 9}, "JP1_2": {60000, 3}} {
		var raw string
		var interval, frames int
		if err := e.admin.QueryRow(t.Context(), `SELECT raw::text, frame_interval_ms, frame_count FROM match_timelines
WHERE match_id = $1`, id).Scan(&raw, &interval, &frames); err != nil {
			t.Fatal(err)
		}
		if raw != doc(id) || interval != want[0] || frames != want[1] {
			t.Errorf("%s: %q %d %d; want the document as sent, %v", id, raw, interval, frames, want)
		}
	}
	m := e.firstDeadLetter("the corrupt one dead-lettered")
	r, err := bus.DecodeFetchResult(m.Header, m.Data)
	if err != nil || r.MatchID != "JP1_3" || !bytes.Equal(r.Payload, bad) || r.PUUID != "p-3" {
		t.Errorf("dead letter does not decode to the result: %+v %v", r, err)
	}
	if !strings.Contains(m.Header.Get(natsx.DeadReasonHeader), "gzip") {
		t.Errorf("dead-letter reason %q does not name the gzip", m.Header.Get(natsx.DeadReasonHeader))
	}
}

// Issue 27 finding 8: a panic while one message is decoded (a decode
// worker goroutine, where no handler's recover reaches) is that message's
// failure only: the process lives, the other messages of the batch are
// stored, and the panicking one is redelivered (a Transient failure, as a
// handler panic is) instead of killing the persister.
func TestDecodePanicFailsOneMessage(t *testing.T) {
	var panics atomic.Int32
	persister.SetDecodeHook(func(r bus.FetchResult) {
		if r.MatchID == "JP1_66" {
			panics.Add(1)
			panic("decoder bug on " + r.MatchID)
		}
	})
	t.Cleanup(func() { persister.SetDecodeHook(nil) })
	e := newEnv(t, "")
	doc := func(id string) string {
		return `{"metadata":{"matchId":"` + id + `"},"info":{"frameInterval":60000,"frames":[{},{}]}}`
	}
	// Published before the persister starts, so they arrive as one batch
	// decoded on several worker goroutines (DecodeWorkers = GOMAXPROCS).
	for _, id := range []string{"JP1_65", "JP1_66", "JP1_67", "JP1_68"} {
		e.publishResult(bus.FetchResult{MatchID: id, Kind: bus.KindTimeline, Region: "asia", Outcome: bus.Success,
			Attempt: 1, Status: 200, Payload: gzipped(doc(id)), AttemptedAt: time.Now(),
			Timeline: &bus.TimelineMeta{FrameIntervalMs: 60000, FrameCount: 2}})
	}
	e.run()
	e.waitFor("the three others stored", func() bool {
		return e.count(`SELECT count(*) FROM match_timelines WHERE match_id IN ('JP1_65','JP1_67','JP1_68')`) == 3
	})
	e.waitFor("the panicking message redelivered", func() bool { return panics.Load() >= 2 })
	if n := e.count(`SELECT count(*) FROM match_timelines WHERE match_id = 'JP1_66'`); n != 0 {
		t.Errorf("the panicking message was stored (%d rows)", n)
	}
}
