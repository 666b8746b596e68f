package riftflow

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/internal/natsembed"
	"github.com/riftflow/riftflow/internal/natstest"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/fault"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/ratelimit"
	"github.com/riftflow/riftflow/services/riftflow/stack"
	"github.com/riftflow/riftflow/streams"
)

// TestRetryDeadRefusesForgedLetters is issue 27 finding 1: services with
// their generated NATS users write dead letters, and `riftflow retry
// --dead`, which republishes them as admin, refuses the forged ones with a
// reason and replays the honest ones. The persister forges a letter whose
// target is the JetStream API call deleting FETCHED, and the resolver one
// that puts a fetch result into FETCHED through its own dead-letter
// subject: both stay in DEAD and FETCHED still exists. The persister's
// forged fetch result on lol.match.fetched is never republished as a
// fetch result: like the honest one, it becomes a fetch of its match from
// Riot, so no payload a dead-letter writer chose reaches the persister.
// The fetcher's honest dead fetch command goes back to lol.match.fetch.
func TestRetryDeadRefusesForgedLetters(t *testing.T) {
	set, as := serverWithUsers(t)
	ctx := t.Context()
	admin := as(streams.UserAdmin)
	subj := bus.Subjects{Prefix: set.Prefix}

	// Forgeries, each published with the forger's own permissions.
	forge := func(js jetstream.JetStream, stream, target string, header map[string]string, data []byte) {
		t.Helper()
		m := nats.NewMsg(subj.Dead() + "." + stream)
		for k, v := range header {
			m.Header.Set(k, v)
		}
		m.Header.Set(natsx.DeadSubjectHeader, target)
		m.Header.Set(natsx.DeadStreamHeader, stream)
		m.Data = data
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("forge on %s: %v", m.Subject, err)
		}
	}
	persister, resolver, fetcher := as(streams.UserPersister), as(streams.UserResolver), as(streams.UserMatchFetcher)
	forge(persister, streams.StreamFetched, "$JS.API.STREAM.DELETE."+streams.StreamFetched, nil, []byte("{}"))
	forgedResult, hdr, _ := bus.EncodeFetchResult(bus.FetchResult{MatchID: "EUW1_666", Kind: bus.KindMatch, Region: "europe",
		Outcome: bus.Success, Payload: []byte("forged match")})
	forge(persister, streams.StreamFetched, subj.Fetched("europe"), hdr, forgedResult)
	forge(resolver, streams.StreamIngest, subj.Fetched("europe"), hdr, forgedResult)

	// Honest letters, through the services' own dead-letter publisher.
	honestResult, hdr2, _ := bus.EncodeFetchResult(bus.FetchResult{MatchID: "NA1_42", Kind: bus.KindTimeline, Region: "americas",
		Outcome: bus.Success, Payload: []byte("honest timeline"), PUUID: "p1", GameCreationMs: 1700000000000})
	h := nats.Header{}
	for k, v := range hdr2 {
		h.Set(k, v)
	}
	if err := (&natsx.DeadLetter{JS: persister, Prefix: subj.Dead()}).Publish(ctx, natsx.DeadInfo{Subject: subj.Fetched("americas"),
		Header: h, Data: honestResult, Stream: streams.StreamFetched, Consumer: streams.ConsumerPersister, Sequence: 7,
		Kind: fault.Invalid, Reason: "unstorable"}); err != nil {
		t.Fatal(err)
	}
	cmd, _ := json.Marshal(bus.FetchCommand{MatchID: "KR_9", Kind: bus.KindMatch, Region: "asia", Attempt: 10})
	if err := (&natsx.DeadLetter{JS: fetcher, Prefix: subj.Dead()}).Publish(ctx, natsx.DeadInfo{Subject: subj.Fetch("asia"),
		Data: cmd, Stream: streams.StreamFetch, Sequence: 3, Kind: fault.Transient, Reason: "gave up"}); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	code := Main([]string{"retry", "--dead"}, &out, &out)
	t.Logf("riftflow retry --dead: exit %d\n%s", code, out.String())
	if code == 0 {
		t.Error("retry --dead exited 0 with forged dead letters refused")
	}
	for _, want := range []string{"replayed 3 dead letters", "refused 2 dead letters",
		"$JS.API.STREAM.DELETE.FETCHED", "not a subject of stream INGEST"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}

	fetched, err := admin.Stream(ctx, streams.StreamFetched)
	if err != nil {
		t.Fatalf("FETCHED after the replay: %v", err)
	}
	if info, _ := fetched.Info(ctx); info.State.Msgs != 0 {
		t.Errorf("FETCHED holds %d messages: a dead letter was replayed as a fetch result", info.State.Msgs)
	}
	fetch, _ := admin.Stream(ctx, streams.StreamFetch)
	got := map[string]bus.FetchCommand{}
	for _, s := range []string{subj.Fetch("asia"), subj.Fetch("americas"), subj.Fetch("europe")} {
		m, err := fetch.GetLastMsgForSubject(ctx, s)
		if err != nil {
			t.Errorf("no fetch command on %s: %v", s, err)
			continue
		}
		var c bus.FetchCommand
		json.Unmarshal(m.Data, &c)
		got[s] = c
	}
	if c := got[subj.Fetch("americas")]; c.MatchID != "NA1_42" || c.Kind != bus.KindTimeline || !c.Force || c.PUUID != "p1" || c.GameCreationMs != 1700000000000 {
		t.Errorf("the honest fetch result was replayed as %+v, want a forced fetch of NA1_42's timeline", c)
	}
	if c := got[subj.Fetch("asia")]; c.MatchID != "KR_9" || c.Attempt != 10 {
		t.Errorf("the fetcher's dead command was replayed as %+v", c)
	}
	if c := got[subj.Fetch("europe")]; c.MatchID != "EUW1_666" || !c.Force {
		t.Errorf("the forged fetch result was replayed as %+v, want only a fetch of its match", c)
	}
	dead, _ := admin.Stream(ctx, streams.StreamDead)
	if info, _ := dead.Info(ctx); info.State.Msgs != 2 {
		t.Errorf("%d dead letters left, want the 2 refused", info.State.Msgs)
	}
}

// serverWithUsers starts an embedded NATS server with the users and
// permissions `riftflow up` gives it (streams.Grants), applies the
// declarations as admin and points the CLI's environment (NATS_URL,
// NATS_USER, NATS_PASSWORD) at it as admin. as connects as a user.
func serverWithUsers(t *testing.T) (set *streams.Set, as func(user string) jetstream.JetStream) {
	t.Helper()
	set, err := streams.Load(streams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	users, err := stack.NewUsers(set)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := natsembed.StartServer(natsembed.Options{StoreDir: t.TempDir(), NoLog: true,
		Configure: func(o *server.Options) { o.Users = users.Server }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	as = func(user string) jetstream.JetStream {
		t.Helper()
		nc, _, err := connectAs(t, srv.ClientURL(), user, users.Password[user])
		if err != nil {
			t.Fatal(err)
		}
		return natstest.Handle(t, nc)
	}
	if err := streams.Apply(t.Context(), as(streams.UserAdmin), set, nil); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NATS_URL", srv.ClientURL())
	t.Setenv("NATS_USER", streams.UserAdmin)
	t.Setenv("NATS_PASSWORD", users.Password[streams.UserAdmin])
	t.Setenv("RIOT_API_KEY", "")
	return set, as
}

// `riftflow clear-key-rejection` (issue 27 finding 6): a fetcher's shared
// limiter rejected the key; `status --ratelimit` shows it with its probes,
// the command clears it, and the fetcher's limiter (a Shared on its own
// connection, as in a fetcher process) resumes at once.
func TestClearKeyRejectionCommand(t *testing.T) {
	_, as := serverWithUsers(t)
	ctx := t.Context()
	var cleared atomic.Int32
	lim, err := ratelimit.NewShared(ctx, as(streams.UserMatchFetcher), ratelimit.SharedOptions{KeyID: "kfetcher",
		OnKeyCleared: func() { cleared.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lim.Close)
	if err := lim.RejectKey(403); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := PrintRateLimit(ctx, as(streams.UserCLI), "kfetcher", &out, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "KEY REJECTED") || !strings.Contains(out.String(), "clear-key-rejection") {
		t.Fatalf("status --ratelimit:\n%s", out.String())
	}
	out.Reset()
	if code := Main([]string{"clear-key-rejection"}, &out, &out); code != 0 || !strings.Contains(out.String(), "cleared the rejection of key kfetcher") {
		t.Fatalf("clear-key-rejection: exit %d\n%s", code, out.String())
	}
	for deadline := time.Now().Add(5 * time.Second); cleared.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the fetcher's limiter did not see the rejection cleared")
		}
	}
	if rej, _ := lim.KeyRejected(); rej {
		t.Error("the fetcher's limiter still refuses the key")
	}
	out.Reset()
	if code := Main([]string{"clear-key-rejection"}, &out, &out); code != 0 || !strings.Contains(out.String(), "no key is rejected") {
		t.Errorf("clear-key-rejection again: exit %d\n%s", code, out.String())
	}
}
