// Package control is riftflow's pause switch (design 001's switch that
// stops all syncing): one key, "pause", in the "control" KV bucket. Every
// service watches it (Watch); while it is on, their consumers pull nothing
// (natsx.WithHold) and the HTTP API answers 503. Messages stay in their
// streams and are processed when the switch goes off.
package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Bucket is the KV bucket of the switch (declared in streams/ as
// streams.BucketControl).
const Bucket = "control"

// Key is the pause switch's key in the control bucket.
const Key = "pause"

// State is the JSON value of the pause key.
type State struct {
	Paused bool      `json:"paused"`
	Reason string    `json:"reason,omitempty"`
	By     string    `json:"by,omitempty"`
	At     time.Time `json:"at"`
}

// Switch is a live view of the pause key. The zero value (and nil) is
// "not paused".
type Switch struct {
	paused atomic.Bool
	state  atomic.Pointer[State]
}

// Paused reports whether syncing is paused now.
func (s *Switch) Paused() bool { return s != nil && s.paused.Load() }

// State returns the last value seen (zero when none).
func (s *Switch) State() State {
	if s == nil {
		return State{}
	}
	if p := s.state.Load(); p != nil {
		return *p
	}
	return State{}
}

func (s *Switch) apply(v []byte, log *slog.Logger) {
	var st State
	if len(v) > 0 {
		if err := json.Unmarshal(v, &st); err != nil {
			log.Warn("unreadable pause switch ignored", "err", err)
			return
		}
	}
	s.state.Store(&st)
	if s.paused.Swap(st.Paused) != st.Paused {
		log.Info("pause switch changed", "paused", st.Paused, "reason", st.Reason, "by", st.By)
	}
}

// Watch follows the pause key of kv until ctx ends and returns the switch,
// already holding the current value. A deleted or purged key is "not
// paused".
func Watch(ctx context.Context, kv jetstream.KeyValue, log *slog.Logger) (*Switch, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w, err := kv.Watch(ctx, Key)
	if err != nil {
		return nil, fmt.Errorf("control: watch %s: %w", Key, err)
	}
	s := &Switch{}
	// The watcher sends the current value, then nil, then every update.
	for e := range w.Updates() {
		if e == nil {
			break
		}
		s.apply(e.Value(), log)
	}
	go func() {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e != nil {
					if e.Operation() != jetstream.KeyValuePut {
						s.apply(nil, log)
					} else {
						s.apply(e.Value(), log)
					}
				}
			}
		}
	}()
	return s, nil
}

// Set turns the switch on or off for every service watching kv.
func Set(ctx context.Context, kv jetstream.KeyValue, st State) error {
	if st.At.IsZero() {
		st.At = time.Now().UTC()
	}
	b, _ := json.Marshal(st)
	if _, err := kv.Put(ctx, Key, b); err != nil {
		return fmt.Errorf("control: set pause: %w", err)
	}
	return nil
}

// Get reads the switch once; no key is "not paused".
func Get(ctx context.Context, kv jetstream.KeyValue) (State, error) {
	e, err := kv.Get(ctx, Key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return State{}, nil
	}
	if err != nil {
		return State{}, fmt.Errorf("control: get pause: %w", err)
	}
	var st State
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return State{}, fmt.Errorf("control: pause value: %w", err)
	}
	return st, nil
}
