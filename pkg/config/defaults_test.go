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

func TestDefaults(t *testing.T) {
	type inner struct {
		Max int `env:"T_INNER_MAX" envDefault:"20"`
		Set int `env:"T_INNER_SET" envDefault:"30"`
	}
	type cfg struct {
		N      int           `env:"T_N" envDefault:"8"`
		Wait   time.Duration `env:"T_WAIT" envDefault:"5s"`
		List   []string      `env:"T_LIST" envDefault:"a,b" envSeparator:","`
		Off    int           `env:"T_OFF" envDefault:"4"`
		Given  string        `env:"T_GIVEN" envDefault:"x"`
		NoTag  int
		On     bool `env:"T_ON" envDefault:"true"`
		Kept   int  `env:"T_KEPT" envDefault:"100" zero:"keep"`
		Nested inner
		SyncLock
	}
	t.Setenv("T_N", "99") // the environment plays no part
	got := cfg{Off: -1, Given: "y", Nested: inner{Set: 3}}
	Defaults(&got)
	if got.N != 8 || got.Wait != 5*time.Second || !slices.Equal(got.List, []string{"a", "b"}) || got.Off != -1 ||
		got.Given != "y" || got.NoTag != 0 || got.On || got.Kept != 0 || got.Nested != (inner{Max: 20, Set: 3}) ||
		got.LockTTL != 5*time.Minute {
		t.Errorf("Defaults = %+v", got)
	}
}

// Parse reads the variables of an embedded section (SyncLock) as its own.
func TestParseEmbeddedSection(t *testing.T) {
	var c struct {
		SyncLock
		Retention
	}
	t.Setenv("SYNC_LOCK_TTL", "90s")
	if err := Parse(&c); err != nil {
		t.Fatal(err)
	}
	if c.LockTTL != 90*time.Second || c.MatchRetention.Duration() != 730*24*time.Hour {
		t.Errorf("Parse = %+v", c)
	}
}
