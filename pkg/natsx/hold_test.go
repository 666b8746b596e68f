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

// TestWithoutHold: a context without hold drops the holds under it, and a
// hold added on top of it applies alone.
func TestWithoutHold(t *testing.T) {
	ctx := WithoutHold(WithHold(context.Background(), func() bool { return true }))
	if held, _ := ctx.Value(holdKey{}).(func() bool); held != nil {
		t.Error("WithoutHold kept the pause switch's hold")
	}
	var pressure bool
	held, _ := WithHold(ctx, func() bool { return pressure }).Value(holdKey{}).(func() bool)
	if held == nil || held() {
		t.Fatal("a hold added after WithoutHold is missing or held while off")
	}
	pressure = true
	if !held() {
		t.Error("a hold added after WithoutHold does not hold")
	}
}
