package config

import (
	"slices"
	"testing"
	"time"
)

func TestFill(t *testing.T) {
	type cfg struct {
		N       int
		Wait    time.Duration
		Ratio   float64
		Name    string
		List    []string
		NoDef   int
		private int
	}
	def := cfg{N: 8, Wait: time.Second, Ratio: 0.5, Name: "x", List: []string{"a"}, private: 3}
	got := cfg{N: -1, Wait: 0, Ratio: 0.25, Name: "", List: nil, NoDef: -7}
	Fill(&got, def)
	want := cfg{N: 8, Wait: time.Second, Ratio: 0.25, Name: "x", List: []string{"a"}, NoDef: -7}
	if got.N != want.N || got.Wait != want.Wait || got.Ratio != want.Ratio || got.Name != want.Name ||
		!slices.Equal(got.List, want.List) || got.NoDef != want.NoDef || got.private != 0 {
		t.Errorf("Fill = %+v, want %+v", got, want)
	}
	set := cfg{N: 2, Wait: time.Minute, Name: "y"}
	Fill(&set, def)
	if set.N != 2 || set.Wait != time.Minute || set.Name != "y" {
		t.Errorf("Fill changed set fields: %+v", set)
	}
}
