package ratelimit

import (
	"reflect"
	"testing"
	"time"
)

func TestParseLimits(t *testing.T) {
	s := time.Second
	tests := []struct {
		in   string
		want []Limit
	}{
		{"500:10,30000:600", []Limit{{500, 10 * s}, {30000, 600 * s}}},
		{"30000:600,500:10", []Limit{{500, 10 * s}, {30000, 600 * s}}}, // reversed
		{" 100:120 , 20:1 ", []Limit{{20, s}, {100, 120 * s}}},
		{"1:1,1:120", []Limit{{1, s}, {1, 120 * s}}},
		{"2000:10", []Limit{{2000, 10 * s}}},
		{"0:10", []Limit{{0, 10 * s}}}, // a count header may say 0
		{"", nil},
		{"garbage", nil},
		{"5:x,a:10,7:0,-1:10,3:-5,:,,9:99999999", nil},
		{"20:1,junk,100:120", []Limit{{20, s}, {100, 120 * s}}},
		{"20:1,10:1", []Limit{{10, s}}}, // duplicate window: smallest wins
		{"20:1:5", nil},
		{"0:9227000000", nil}, // seconds that overflow time.Duration (found by fuzzing)
	}
	for _, tt := range tests {
		got := ParseLimits(tt.in)
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseLimits(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
	if got := FormatLimits(ParseLimits("30000:600, 500:10")); got != "500:10,30000:600" {
		t.Errorf("FormatLimits round trip = %q", got)
	}
}

func TestParseRetryAfter(t *testing.T) {
	for in, want := range map[string]time.Duration{"3": 3 * time.Second, " 0 ": 0} {
		if d, ok := parseRetryAfter(in); !ok || d != want {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v", in, d, ok, want)
		}
	}
	for _, in := range []string{"", "soon", "-1", "1.5", "Wed, 21 Oct 2015 07:28:00 GMT"} {
		if _, ok := parseRetryAfter(in); ok {
			t.Errorf("parseRetryAfter(%q) ok, want not ok", in)
		}
	}
}

func FuzzParseLimits(f *testing.F) {
	for _, s := range []string{"500:10,30000:600", "100:120,20:1", " 1:1 , 1:120", "", ":", "1:1:1,,", "99999999999999999999:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ls := ParseLimits(s)
		for i, l := range ls {
			if l.N < 0 || l.Window <= 0 || l.Window > maxWindow {
				t.Fatalf("ParseLimits(%q)[%d] = %v out of range", s, i, l)
			}
			if i > 0 && ls[i-1].Window >= l.Window {
				t.Fatalf("ParseLimits(%q) not sorted by unique window: %v", s, ls)
			}
		}
		if again := ParseLimits(FormatLimits(ls)); len(ls) > 0 && !reflect.DeepEqual(again, ls) {
			t.Fatalf("round trip of %q: %v != %v", s, again, ls)
		}
	})
}
