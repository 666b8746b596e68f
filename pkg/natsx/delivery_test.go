package natsx

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// deliveredMsg is a jetstream.Msg with a subject, headers, data, its n-th
// delivery at stream sequence seq stored at stored (no metadata when n is
// 0), counting its InProgress calls.
type deliveredMsg struct {
	jetstream.Msg
	n, seq   uint64
	stored   time.Time
	progress *int
}

func (m deliveredMsg) Subject() string      { return "w.1" }
func (m deliveredMsg) Headers() nats.Header { return nats.Header{"K": {"v"}} }
func (m deliveredMsg) Data() []byte         { return []byte("data") }
func (m deliveredMsg) InProgress() error    { *m.progress++; return nil }

func (m deliveredMsg) Metadata() (*jetstream.MsgMetadata, error) {
	if m.n == 0 {
		return nil, errors.New("no metadata")
	}
	return &jetstream.MsgMetadata{NumDelivered: m.n, Sequence: jetstream.SequencePair{Stream: m.seq}, Timestamp: m.stored}, nil
}

func TestNewDelivery(t *testing.T) {
	stored := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	var calls int
	d := NewDelivery(deliveredMsg{n: 3, seq: 42, stored: stored, progress: &calls}, 5)
	if d.Subject != "w.1" || d.Header.Get("K") != "v" || string(d.Data) != "data" || d.Num != 3 || d.Last ||
		d.Sequence != 42 || !d.Stored.Equal(stored) {
		t.Errorf("delivery %+v", d)
	}
	if err := d.InProgress(); err != nil || calls != 1 {
		t.Errorf("InProgress: %v, %d calls, want the message's", err, calls)
	}
	if err := (Delivery{}).InProgress(); err != nil {
		t.Errorf("InProgress without a message: %v", err)
	}
	none := NewDelivery(deliveredMsg{progress: &calls}, 5)
	if none.Num != 1 || none.Sequence != 0 || !none.Stored.IsZero() || none.Last {
		t.Errorf("without metadata: %+v, want delivery 1 of 5, no sequence, no time", none)
	}
}

func TestDeliveryLast(t *testing.T) {
	var calls int
	for _, tc := range []struct {
		n          uint64
		maxDeliver int
		want       bool
	}{{1, 5, false}, {4, 5, false}, {5, 5, true}, {6, 5, true}, {1, 1, true}, {9, 0, false}, {9, -1, false}, {0, 1, true}} {
		if got := NewDelivery(deliveredMsg{n: tc.n, progress: &calls}, tc.maxDeliver).Last; got != tc.want {
			t.Errorf("delivery %d of max %d: last %v, want %v", tc.n, tc.maxDeliver, got, tc.want)
		}
	}
}
