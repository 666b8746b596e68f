package matchfetcher

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/app"
	"github.com/riftflow/riftflow/pkg/bus"
	"github.com/riftflow/riftflow/pkg/natsx"
	"github.com/riftflow/riftflow/pkg/riot"
)

// A timeline Riot does not have (the chaos suite's synthetic clones) under
// Riot faults: its 404s come with 5xx, service 429s and timeouts between
// them. These tests run the fetcher's Handle on each command it gives
// itself (retry and rate-limit schedules) and play the retry-sweeper's part
// when the fetcher leaves the fetch to it: a re-publish with the ledger's
// attempt + 1 and its 404 count (services/retry-sweeper, Sweep), which in
// the pipeline comes StaleAfter·2^k later, up to SWEEP_RETRY_MAX (6 h).

// recordingJS records what the fetcher publishes (results, schedules).
type recordingJS struct {
	jetstream.JetStream // nil: the fetcher only publishes
	msgs                []*nats.Msg
}

func (j *recordingJS) PublishMsg(_ context.Context, m *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	j.msgs = append(j.msgs, m)
	return &jetstream.PubAck{Stream: "TEST"}, nil
}

// riotAnswers is Riot answering getTimeline from next.
type riotAnswers struct {
	next  func() error
	calls int
}

func (r *riotAnswers) MatchBody(context.Context, riot.Region, string) (riot.Body, error) {
	return riot.Body{}, errors.New("getMatch not expected")
}

func (r *riotAnswers) TimelineBody(context.Context, riot.Region, string) (riot.Body, error) {
	r.calls++
	return riot.Body{}, r.next()
}

// script answers the errors in order, then fails the test.
func script(t *testing.T, answers ...error) *riotAnswers {
	i := 0
	return &riotAnswers{next: func() error {
		if i == len(answers) {
			t.Fatalf("Riot asked a %dth time; the script has %d answers", i+1, len(answers))
		}
		i++
		return answers[i-1]
	}}
}

var (
	answer404     = &riot.Error{Kind: riot.KindNotFound, Op: riot.MethodTimeline, Status: 404, Msg: "Data not found - match file not found"}
	answer503     = &riot.Error{Kind: riot.KindServer, Op: riot.MethodTimeline, Status: 503}
	answerTimeout = &riot.Error{Kind: riot.KindTransport, Op: riot.MethodTimeline, Msg: "timeout after 500ms"}
	answer429     = &riot.Error{Kind: riot.KindRateLimited, Op: riot.MethodTimeline, Status: 429} // a service 429: no Retry-After
)

// trail is how one fetch went.
type trail struct {
	outcome  bus.Outcome
	reason   string
	attempt  int // of the final result
	notFound int // results with a 404 (the ledger's not_found)
	handoffs int // times the fetcher left the fetch to the retry-sweeper
}

// drive runs one timeline fetch until a final result, at most steps
// deliveries.
func drive(t *testing.T, r Matches, steps int) trail {
	t.Helper()
	js := &recordingJS{}
	s, err := New(Config{Backoff: []time.Duration{time.Second}}, Deps{JS: js,
		Consumers: map[string]jetstream.Consumer{"americas": nil}, Riot: r,
		Base: app.Base{Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }}})
	if err != nil {
		t.Fatal(err)
	}
	cmd := bus.FetchCommand{MatchID: "NA1_4242", Kind: bus.KindTimeline, Region: "americas", Attempt: 1,
		Priority: bus.Interactive, GameCreationMs: now.Add(-time.Hour).UnixMilli()}
	var tr trail
	ledgerAttempt := 0
	for range steps {
		data, _ := json.Marshal(cmd)
		js.msgs = nil
		// A FETCH message without JetStream metadata.
		if res := s.Handle(t.Context(), natsx.Delivery{Data: data, Num: 1}); res.Err() != nil {
			t.Fatalf("attempt %d: %v", cmd.Attempt, res)
		}
		var next *bus.FetchCommand
		for _, m := range js.msgs {
			if strings.Contains(m.Subject, ".match.retry.") {
				next = &bus.FetchCommand{}
				if err := json.Unmarshal(m.Data, next); err != nil {
					t.Fatal(err)
				}
				continue
			}
			var res bus.FetchResult
			if err := json.Unmarshal(m.Data, &res); err != nil {
				t.Fatal(err)
			}
			if res.Attempt <= ledgerAttempt {
				t.Fatalf("result of attempt %d after attempt %d", res.Attempt, ledgerAttempt)
			}
			ledgerAttempt = res.Attempt
			if res.Status == 404 {
				tr.notFound++
			}
			tr.outcome, tr.reason, tr.attempt = res.Outcome, res.Error, res.Attempt
		}
		switch {
		case tr.outcome == bus.PermanentlyUnfetchable || tr.outcome == bus.OutsideRetentionWindow:
			return tr
		case next != nil:
			cmd = *next
		case tr.outcome == bus.TemporaryFailure && strings.HasPrefix(tr.reason, PendingReason):
			// Left to the retry-sweeper: its re-publish, as Sweep builds it.
			tr.handoffs++
			cmd = bus.FetchCommand{MatchID: cmd.MatchID, Kind: cmd.Kind, Region: cmd.Region, Attempt: ledgerAttempt + 1,
				NotFound: tr.notFound, Priority: bus.Background, GameCreationMs: cmd.GameCreationMs}
		default:
			t.Fatalf("attempt %d: no result and no schedule (published %d)", cmd.Attempt, len(js.msgs))
		}
	}
	t.Fatalf("not final after %d deliveries: %+v", steps, tr)
	return tr
}

// Five failures other than 404 before the first 404, then 404s with a
// timeout and service 429s among them. A 404 keeps the fetcher's own
// retries going until the fifth: the failures before the first 404 do
// not count toward its limit (counted, from the sixth attempt on each
// answer, even a 404, would leave the fetch to the retry-sweeper: four
// sweeper round trips, hours in production, for the last four 404s).
func TestNotFoundBetweenFaultsEndsInTheFetcher(t *testing.T) {
	r := script(t, answer503, answer503, answerTimeout, answer429, answer503,
		answer404, answerTimeout, answer404, answer404, answer429, answer404, answer404)
	tr := drive(t, r, 50)
	if tr.outcome != bus.PermanentlyUnfetchable || !strings.Contains(tr.reason, "gave up after 10 attempts") {
		t.Fatalf("ended %s at attempt %d: %q, want permanently_unfetchable after 10 attempts", tr.outcome, tr.attempt, tr.reason)
	}
	if tr.handoffs != 0 {
		t.Errorf("left to the retry-sweeper %d times, want 0: Riot answered 404 between the faults", tr.handoffs)
	}
	if tr.notFound != 5 || r.calls != 12 {
		t.Errorf("%d 404s recorded, %d calls; want 5 and 12 (two 429s are not attempts)", tr.notFound, r.calls)
	}
}

// A streak of five failures other than 404 is still never final: the
// fetch is left to the retry-sweeper, whose re-publish is tried once
// while Riot keeps failing; once Riot answers 404 again the fetcher's
// own retries carry the fetch to its fifth 404.
func TestFailureStreakStillLeftToTheSweeper(t *testing.T) {
	r := script(t, answer404, answer503, answer503, answerTimeout, answer503, answer503, // 5 in a row: left
		answer503, // the sweeper's re-publish fails too: left again
		answer404, answer503, answer404, answer404, answer404)
	tr := drive(t, r, 50)
	if tr.outcome != bus.PermanentlyUnfetchable || tr.attempt != 12 || tr.notFound != 5 {
		t.Fatalf("ended %s at attempt %d with %d 404s: %q, want permanently_unfetchable at 12 after five 404s",
			tr.outcome, tr.attempt, tr.notFound, tr.reason)
	}
	if tr.handoffs != 2 {
		t.Errorf("left to the retry-sweeper %d times, want 2 (after the streak, after the failed re-publish)", tr.handoffs)
	}
}

// The chaos suite's Riot faults (20% 5xx, 5% service 429s, 2% timeouts,
// every call; docs/chaos.md) on 2,000 timelines Riot does not have, with a
// fixed seed: every one ends permanently_unfetchable after exactly five
// 404s, and few ever wait for the retry-sweeper: 8 of 2,000, at most
// twice (counting every earlier failure would leave 73 to it, one of
// them 7 times, each a sweep retry up to SWEEP_RETRY_MAX apart).
func TestNotFoundUnderRiotFaults(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 2000))
	r := &riotAnswers{next: func() error {
		switch u := rng.Float64(); {
		case u < 0.20:
			return answer503
		case u < 0.25:
			return answer429
		case u < 0.27:
			return answerTimeout
		}
		return answer404
	}}
	const n = 2000
	handed, most := 0, 0
	for range n {
		tr := drive(t, r, 200)
		if tr.outcome != bus.PermanentlyUnfetchable || tr.notFound != 5 || !strings.Contains(tr.reason, "gave up after") {
			t.Fatalf("ended %s with %d 404s: %q", tr.outcome, tr.notFound, tr.reason)
		}
		if tr.handoffs > 0 {
			handed++
		}
		most = max(most, tr.handoffs)
	}
	t.Logf("%d timelines, %d Riot calls; %d left to the retry-sweeper, at most %d times", n, r.calls, handed, most)
	if handed > n/100 || most > 3 {
		t.Errorf("%d of %d left to the retry-sweeper (want at most 1%%), one %d times (want at most 3)", handed, n, most)
	}
}
