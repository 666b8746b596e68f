package natsx

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/riftflow/riftflow/pkg/fault"
)

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Base: time.Second, Max: time.Minute, Jitter: 0}
	for n, want := range map[uint64]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 7: time.Minute, 100: time.Minute} {
		if got := b.Delay(n); got != want {
			t.Errorf("Delay(%d) = %s, want %s", n, got, want)
		}
	}
	b.Jitter = 0.2
	for range 1000 {
		if d := b.Delay(3); d < 3200*time.Millisecond || d > 4800*time.Millisecond {
			t.Fatalf("Delay(3) with 20%% jitter = %s, outside [3.2s, 4.8s]", d)
		}
	}
}

func TestDecide(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	b := Backoff{Base: time.Second, Max: time.Minute, Jitter: 0}
	boom := errors.New("boom")
	cases := []struct {
		name       string
		res        Result
		delivered  uint64
		maxDeliver int
		want       settlement
	}{
		{"ack", Ack(), 1, 5, settlement{action: kindAck}},
		{"unclassified is transient", Fail(boom), 1, 5, settlement{action: kindNak, delay: time.Second, reason: "boom", pause: true}},
		{"transient backs off", Retry(boom), 4, 10, settlement{action: kindNak, delay: 8 * time.Second, reason: "boom", pause: true}},
		{"rate limited waits as told", RetryAt(boom, now.Add(42*time.Second)), 1, 10, settlement{action: kindNak, delay: 42 * time.Second, reason: "boom"}},
		{"rate limited never shorter than backoff", RetryAt(boom, now.Add(time.Second)), 5, 10, settlement{action: kindNak, delay: 16 * time.Second, reason: "boom"}},
		{"invalid is dead-lettered", Reject(boom), 1, 10, settlement{action: kindTerm, reason: "boom", dead: true}},
		{"gone is terminated", Fail(fault.Wrap(fault.Gone, boom)), 1, 10, settlement{action: kindTerm, reason: "boom"}},
		{"last delivery is dead-lettered", Retry(boom), 10, 10, settlement{action: kindTerm, reason: "gave up after 10 deliveries: boom", dead: true}},
		{"unlimited deliveries never give up", Retry(boom), 1000, -1, settlement{action: kindNak, delay: time.Minute, reason: "boom", pause: true}},
	}
	for _, c := range cases {
		if got := decide(c.res, c.delivered, c.maxDeliver, b, now); got != c.want {
			t.Errorf("%s: decide = %+v, want %+v", c.name, got, c.want)
		}
	}
}

// deadStream creates the dead-letter stream on dead.> and returns it.
func deadStream(t *testing.T, js jetstream.JetStream) (jetstream.Stream, *DeadLetter) {
	t.Helper()
	st, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"dead.>"}})
	if err != nil {
		t.Fatal(err)
	}
	return st, &DeadLetter{JS: js, Prefix: "dead"}
}

// A message that keeps failing is dead-lettered with its payload and reason
// on its last delivery, never left to a MAX_DELIVERIES advisory; its
// handler is told each delivery's count and, on the consumer's MaxDeliver-th,
// that it is the last.
func TestSettleDeadLettersOnLastDelivery(t *testing.T) {
	_, _, js := startJS(t)
	st, cons := wqConsumer(t, js, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 3})
	dst, dead := deadStream(t, js)
	maxed, _ := js.Conn().SubscribeSync("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.W.c")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if _, err := Publish(ctx, js, "w.bad", map[string]string{"match_id": "NA1_1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := Publish(ctx, js, "w.invalid", "x"); err != nil {
		t.Fatal(err)
	}
	var deliveries, wrongLast atomic.Int32
	h := func(ctx context.Context, d Delivery) Result {
		if d.Subject == "w.invalid" {
			return Rejectf("undecodable")
		}
		if n := deliveries.Add(1); d.Num != uint64(n) || d.Last != (n == 3) {
			wrongLast.Add(1)
		}
		return Retry(errors.New("postgres: connection refused"))
	}
	done := make(chan error, 1)
	go func() {
		done <- Consume(ctx, cons, h, ConsumeOptions{FetchWait: 200 * time.Millisecond, Logger: quiet,
			Settle: SettleOptions{Backoff: Backoff{Base: 10 * time.Millisecond}, Dead: dead}})
	}()
	waitEmpty(t, st)
	cancel()
	if err := await(t, done, "Consume"); err != nil {
		t.Fatal(err)
	}
	if n := deliveries.Load(); n != 3 {
		t.Errorf("failing message handled %d times, want MaxDeliver = 3", n)
	}
	if n := wrongLast.Load(); n != 0 {
		t.Errorf("%d deliveries told a wrong delivery count or last, want Num 1, 2, 3 and Last on the 3rd", n)
	}
	bySubject := map[string]*jetstream.RawStreamMsg{}
	for seq := uint64(1); seq <= 2; seq++ {
		m, err := dst.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatalf("dead letter %d: %v", seq, err)
		}
		bySubject[m.Header.Get(DeadSubjectHeader)] = m
	}
	bad := bySubject["w.bad"]
	if bad == nil || string(bad.Data) != `{"match_id":"NA1_1"}` || bad.Header.Get(DeadKindHeader) != "transient" ||
		bad.Header.Get(DeadDeliveriesHeader) != "3" || bad.Header.Get(DeadReasonHeader) != "gave up after 3 deliveries: postgres: connection refused" ||
		bad.Header.Get(DeadStreamHeader) != "W" || bad.Header.Get(DeadConsumerHeader) != "c" {
		t.Fatalf("dead letter of w.bad = %+v", bad)
	}
	if inv := bySubject["w.invalid"]; inv == nil || inv.Header.Get(DeadKindHeader) != "invalid" || inv.Header.Get(DeadDeliveriesHeader) != "1" {
		t.Fatalf("dead letter of w.invalid = %+v", inv)
	}
	if m, err := maxed.NextMsg(300 * time.Millisecond); err == nil {
		t.Fatalf("a MAX_DELIVERIES advisory was sent: %s", m.Data)
	}
}

// While the probe fails, the consumer pulls nothing: a long outage costs a
// message one failed delivery, not MaxDeliver of them.
func TestSettleProbePausesConsumer(t *testing.T) {
	_, _, js := startJS(t)
	st, cons := wqConsumer(t, js, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 3})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	const n = 5
	for i := range n {
		if _, err := Publish(ctx, js, "w."+strconv.Itoa(i), i); err != nil {
			t.Fatal(err)
		}
	}
	var down atomic.Bool
	down.Store(true)
	var probes, handled atomic.Int32
	probe := func(context.Context) error {
		// The outage lasts 8 probes: far more than MaxDeliver deliveries
		// would survive without the pause.
		if probes.Add(1) >= 8 {
			down.Store(false)
			return nil
		}
		return errors.New("database down")
	}
	h := func(ctx context.Context, ds []Delivery) []Result {
		handled.Add(int32(len(ds)))
		res := make([]Result, len(ds))
		for i := range res {
			if down.Load() {
				res[i] = Retry(errors.New("database down"))
			}
		}
		return res
	}
	done := make(chan error, 1)
	go func() {
		done <- ConsumeBatch(ctx, cons, h, BatchOptions{MaxBatch: n, MaxWait: 200 * time.Millisecond, Logger: quiet,
			Settle: SettleOptions{Backoff: Backoff{Base: time.Millisecond, Max: time.Millisecond}, Probe: probe, ProbeEvery: time.Millisecond}})
	}()
	defer func() { t.Logf("probes %d handled %d", probes.Load(), handled.Load()) }()
	waitEmpty(t, st)
	cancel()
	if err := await(t, done, "ConsumeBatch"); err != nil {
		t.Fatal(err)
	}
	if p := probes.Load(); p < 8 {
		t.Fatalf("probe called %d times, want the outage's 8", p)
	}
	if h := handled.Load(); h != 2*n {
		t.Fatalf("handled %d messages, want %d (one failed delivery each, then success)", h, 2*n)
	}
}

// A panic in a batch handler fails only the message that causes it.
func TestSettleBatchPanicIsolated(t *testing.T) {
	_, _, js := startJS(t)
	st, cons := wqConsumer(t, js, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 2})
	dst, dead := deadStream(t, js)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for i := range 5 {
		if _, err := Publish(ctx, js, fmt.Sprintf("w.%d", i), i); err != nil {
			t.Fatal(err)
		}
	}
	var stored sync32
	h := func(ctx context.Context, ds []Delivery) []Result {
		for _, d := range ds {
			if d.Subject == "w.2" {
				panic("nil map in w.2")
			}
		}
		for _, d := range ds {
			stored.add(d.Subject)
		}
		return make([]Result, len(ds))
	}
	done := make(chan error, 1)
	go func() {
		done <- ConsumeBatch(ctx, cons, h, BatchOptions{MaxBatch: 10, MaxWait: 300 * time.Millisecond, Logger: quiet,
			Settle: SettleOptions{Backoff: Backoff{Base: 10 * time.Millisecond}, Dead: dead}})
	}()
	waitEmpty(t, st)
	cancel()
	if err := await(t, done, "ConsumeBatch"); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"w.0", "w.1", "w.3", "w.4"} {
		if stored.count(s) != 1 {
			t.Errorf("%s stored %d times, want once", s, stored.count(s))
		}
	}
	m, err := dst.GetMsg(t.Context(), 1)
	if err != nil || m.Header.Get(DeadSubjectHeader) != "w.2" {
		t.Fatalf("dead letter 1 = %+v, %v; want w.2", m, err)
	}
	if info, _ := dst.Info(t.Context()); info.State.Msgs != 1 {
		t.Fatalf("%d dead letters, want 1", info.State.Msgs)
	}
}

// sync32 counts strings under a lock-free map substitute (test helper).
type sync32 struct {
	m atomic.Pointer[map[string]int]
}

func (s *sync32) add(k string) {
	for {
		old := s.m.Load()
		n := map[string]int{}
		if old != nil {
			for kk, v := range *old {
				n[kk] = v
			}
		}
		n[k]++
		if s.m.CompareAndSwap(old, &n) {
			return
		}
	}
}

func (s *sync32) count(k string) int {
	if m := s.m.Load(); m != nil {
		return (*m)[k]
	}
	return 0
}

// Dead letters go back to their original subject with their headers, and
// leave the dead-letter stream; a filter and a limit select them.
func TestReplayDeadLetters(t *testing.T) {
	_, _, js := startJS(t)
	st, _ := wqConsumer(t, js, jetstream.ConsumerConfig{})
	dst, dead := deadStream(t, js)
	ctx := t.Context()
	for i, subj := range []string{"w.a", "w.b", "w.c"} {
		h := map[string][]string{"Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
		if err := dead.Publish(ctx, DeadInfo{Subject: subj, Header: h, Data: []byte("payload " + subj), Stream: "W",
			Sequence: uint64(i + 1), Deliveries: 3, Kind: fault.Transient, Reason: "gave up"}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := Replay(ctx, js, "DEAD", ReplayFilter{Contains: "w.b"})
	if err != nil || res.Replayed != 1 || res.Skipped != 2 {
		t.Fatalf("Replay(w.b) = %+v, %v; want 1 replayed, 2 skipped", res, err)
	}
	m, err := st.GetLastMsgForSubject(ctx, "w.b")
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != "payload w.b" || m.Header.Get("Traceparent") == "" || m.Header.Get(DeadReasonHeader) != "" {
		t.Fatalf("replayed message %q headers %v", m.Data, m.Header)
	}
	if res, err = Replay(ctx, js, "DEAD", ReplayFilter{Limit: 1}); err != nil || res.Replayed != 1 {
		t.Fatalf("Replay(limit 1) = %+v, %v", res, err)
	}
	if info, _ := dst.Info(ctx); info.State.Msgs != 1 {
		t.Fatalf("%d dead letters left, want 1", info.State.Msgs)
	}
	if info, _ := st.Info(ctx); info.State.Msgs != 2 {
		t.Fatalf("%d messages back in W, want 2", info.State.Msgs)
	}
}

// TestReplayFindsTextInHeaders: a dead letter whose data is binary (a fetch
// result's gzip payload) is found by the match ID its header carries; the
// dead-letter headers themselves are not searched.
func TestReplayFindsTextInHeaders(t *testing.T) {
	_, _, js := startJS(t)
	st, _ := wqConsumer(t, js, jetstream.ConsumerConfig{})
	_, dead := deadStream(t, js)
	ctx := t.Context()
	h := map[string][]string{"Riftflow-Fetch-Result": {`{"match_id":"NA1_77","kind":"timeline"}`}}
	if err := dead.Publish(ctx, DeadInfo{Subject: "w.x", Header: h, Data: []byte{0x1f, 0x8b, 8, 0}, Stream: "W",
		Sequence: 9, Deliveries: 1, Kind: fault.Invalid, Reason: "NA1_99 unstorable"}); err != nil {
		t.Fatal(err)
	}
	if res, err := Replay(ctx, js, "DEAD", ReplayFilter{Contains: "NA1_99"}); err != nil || res.Replayed != 0 || res.Skipped != 1 {
		t.Fatalf("Replay(text only in the dead-letter reason) = %+v, %v; want it skipped", res, err)
	}
	if res, err := Replay(ctx, js, "DEAD", ReplayFilter{Contains: "NA1_77"}); err != nil || res.Replayed != 1 {
		t.Fatalf("Replay(NA1_77) = %+v, %v; want 1 replayed", res, err)
	}
	m, err := st.GetLastMsgForSubject(ctx, "w.x")
	if err != nil || m.Header.Get("Riftflow-Fetch-Result") == "" || len(m.Data) != 4 {
		t.Fatalf("replayed %v %v", m, err)
	}
}

// TestReplayRefusesForgedTargets: a dead letter chooses its own headers, so
// Replay takes its source stream from the letter's subject and refuses a
// target under "$" (a JetStream API call), one outside the source stream's
// subjects, a letter whose header claims another stream, and one Allow
// refuses; each stays in DEAD with its reason, and the honest one is
// replayed.
func TestReplayRefusesForgedTargets(t *testing.T) {
	_, _, js := startJS(t)
	st, _ := wqConsumer(t, js, jetstream.ConsumerConfig{})
	dst, _ := deadStream(t, js)
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "V", Subjects: []string{"v.>"}}); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	forge := func(subject, target, claimed string) {
		t.Helper()
		m := nats.NewMsg(subject)
		m.Data = []byte("forged " + target)
		m.Header.Set(DeadSubjectHeader, target)
		if claimed != "" {
			m.Header.Set(DeadStreamHeader, claimed)
		}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	forge("dead.W", "$JS.API.STREAM.DELETE.W", "W")
	forge("dead.W", "v.x", "W")      // another stream's subject
	forge("dead.V", "w.a", "V")      // claims V, targets W
	forge("dead.W", "w.b", "V")      // its header claims another stream
	forge("dead.W.x", "w.c", "W")    // not <prefix>.<stream>
	forge("dead.W", "w.>", "W")      // a wildcard
	forge("dead.W", "w.denied", "W") // Allow refuses it
	forge("dead.W", "w.honest", "W") // the one honest letter
	allow := func(dead, target string) error {
		if target == "w.denied" {
			return errors.New("not yours")
		}
		return nil
	}
	res, err := Replay(ctx, js, "DEAD", ReplayFilter{Allow: allow})
	if err != nil || res.Replayed != 1 || res.Refused != 7 || len(res.Refusals) != 7 {
		t.Fatalf("Replay = %+v, %v; want 1 replayed, 7 refused", res, err)
	}
	for _, want := range []string{"a system subject", "not a subject of stream W", "not a subject of stream V",
		"claims stream V", "is not <dead-letter prefix>.<stream>", "a wildcard", "not yours"} {
		if !slices.ContainsFunc(res.Refusals, func(r string) bool { return strings.Contains(r, want) }) {
			t.Errorf("no refusal says %q: %q", want, res.Refusals)
		}
	}
	if _, err := js.Stream(ctx, "W"); err != nil {
		t.Fatalf("stream W after the replay: %v", err)
	}
	if info, _ := st.Info(ctx); info.State.Msgs != 1 {
		t.Fatalf("%d messages in W, want the honest one", info.State.Msgs)
	}
	if m, err := st.GetLastMsgForSubject(ctx, "w.honest"); err != nil || string(m.Data) != "forged w.honest" {
		t.Fatalf("honest letter: %v %v", m, err)
	}
	if info, _ := dst.Info(ctx); info.State.Msgs != 7 {
		t.Fatalf("%d dead letters left, want the 7 refused", info.State.Msgs)
	}
}
