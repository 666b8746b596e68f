package natsx

import (
	"context"
	"testing"
)

// TestWithHoldComposes: a hold added under another applies with it; the
// runner waits while either is on.
func TestWithHoldComposes(t *testing.T) {
	var pause, pressure bool
	ctx := WithHold(WithHold(context.Background(), func() bool { return pause }), func() bool { return pressure })
	held, _ := ctx.Value(holdKey{}).(func() bool)
	if held == nil {
		t.Fatal("no hold on the context")
	}
	for _, c := range []struct{ pause, pressure, want bool }{
		{false, false, false}, {true, false, true}, {false, true, true}, {true, true, true},
	} {
		pause, pressure = c.pause, c.pressure
		if got := held(); got != c.want {
			t.Errorf("pause=%v pressure=%v: held %v, want %v", c.pause, c.pressure, got, c.want)
		}
	}
	if WithHold(ctx, nil) != ctx {
		t.Error("a nil hold changed the context")
	}
}
