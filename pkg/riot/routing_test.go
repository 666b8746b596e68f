package riot

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestParseMatchID(t *testing.T) {
	for _, tc := range []struct {
		id       string
		platform Platform
		region   Region
	}{
		{"NA1_4223689858", "na1", Americas},
		{"EUW1_6834713231", "euw1", Europe},
		{"KR_6604607115", "kr", Asia},
		{"JP1_391732436", "jp1", Asia},
		{"TH2_24825892", "th2", SEA}, // merged into sg2, prefix kept
		{"PH2_1", "ph2", SEA},
		{"OC1_1", "oc1", SEA},
		{"ME1_1", "me1", Europe},
	} {
		p, r, err := ParseMatchID(tc.id)
		if err != nil || p != tc.platform || r != tc.region {
			t.Errorf("ParseMatchID(%q) = %q, %q, %v; want %q, %q", tc.id, p, r, err, tc.platform, tc.region)
		}
	}
	for _, bad := range []string{"", "NA1", "NA1_", "_1", "NA1_12a", "XX9_1", "NA1_" + strings.Repeat("1", 40)} {
		if _, _, err := ParseMatchID(bad); err == nil {
			t.Errorf("ParseMatchID(%q) succeeded", bad)
		}
	}
}

func TestPlatformRouting(t *testing.T) {
	for in, want := range map[string]Platform{"NA1": "na1", " jp1 ": "jp1", "Kr": "kr"} {
		if p, err := ParsePlatform(in); err != nil || p != want {
			t.Errorf("ParsePlatform(%q) = %q, %v", in, p, err)
		}
	}
	if _, err := ParsePlatform("americas"); err == nil {
		t.Error("ParsePlatform(americas) succeeded")
	}
	for p, want := range map[Platform]Region{"oc1": Asia, "vn2": Asia, "euw1": Europe, "br1": Americas, "kr": Asia} {
		if got := p.AccountRegion(); got != want {
			t.Errorf("%s.AccountRegion() = %s, want %s", p, got, want)
		}
	}
	for _, p := range Platforms() {
		if !p.Region().Valid() {
			t.Errorf("platform %s has no valid region", p)
		}
	}
}

func TestErrorText(t *testing.T) {
	e := &Error{Kind: KindRateLimited, Op: MethodMatch, Route: "asia", Status: 429, Msg: "slow down",
		RetryAt: time.Unix(1, 0), Err: errors.New("inner")}
	if got, want := e.Error(), "riot match-v5.getMatch (asia): Too Many Requests 429: slow down: inner"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(e, e.Err) {
		t.Error("Unwrap broken")
	}
	retryable := map[Kind]bool{KindRateLimited: true, KindServer: true, KindTransport: true, KindBreakerOpen: true}
	for k := KindUnknown; k <= KindBreakerOpen; k++ {
		if got := (&Error{Kind: k}).Retryable(); got != retryable[k] {
			t.Errorf("%v.Retryable() = %v", k, got)
		}
		if k != KindUnknown && k.String() == "unknown" {
			t.Errorf("Kind %d has no name", int(k))
		}
	}
	if s := fmt.Sprint(KindNotFound); s != "not_found" {
		t.Errorf("KindNotFound prints %q", s)
	}
}
