package riot

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// seedFiles adds recorded bodies from testdata as fuzz seeds.
func seedFiles(f *testing.F, names ...string) {
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join("testdata", n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

func FuzzDecodeMatch(f *testing.F) {
	f.Add([]byte(`{"metadata":{"matchId":"NA1_1"},"info":{"gameDuration":12.0,"participants":[{"kills":null}]}}`))
	f.Add([]byte(`{"metadata":{"matchId":"NA1_1"},"info":{"gameId":"12","gameVersion":"1."}}`))
	seedFiles(f, "match_EUW1_6834713231.json", "match_JP1_456819992.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeMatch(data)
		if err != nil {
			if m != nil {
				t.Fatal("match returned with error")
			}
			return
		}
		if m.Metadata.MatchID == "" {
			t.Fatal("decoded a match without matchId")
		}
		m.Info.DurationSeconds()
		if p := m.Info.Patch(); p != "" && strings.Count(p, ".") != 1 {
			t.Fatalf("Patch() = %q", p)
		}
		for i := range m.Info.Participants {
			m.Info.Participants[i].Items()
		}
	})
}

func FuzzDecodeTimeline(f *testing.F) {
	f.Add([]byte(`{"metadata":{"matchId":"NA1_1"},"info":{"frames":[{"participantFrames":{"1":{"position":{"x":1.5}}},"events":[{"type":"X","position":null}]}]}}`))
	seedFiles(f, "timeline_EUW1_6834713231.json", "timeline_JP1_456819992.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		tl, err := DecodeTimeline(data)
		if err != nil {
			if tl != nil {
				t.Fatal("timeline returned with error")
			}
			return
		}
		if tl.Metadata.MatchID == "" {
			t.Fatal("decoded a timeline without matchId")
		}
	})
}

func FuzzParseRiotID(f *testing.F) {
	for _, s := range []string{"SSG Xayah#NA1", "Hide on bush#KR1", "a#b#c", "#", "名前#JP1", " x # y ", "\x00#1", "\xff#NA1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseRiotID(s)
		if err != nil {
			return
		}
		if id.GameName == "" || id.TagLine == "" {
			t.Fatalf("ParseRiotID(%q) = %+v with an empty part", s, id)
		}
		if !utf8.ValidString(id.GameName) || !utf8.ValidString(id.TagLine) {
			t.Fatalf("ParseRiotID(%q) returned invalid UTF-8", s)
		}
		if utf8.RuneCountInString(id.GameName) > MaxGameNameRunes || utf8.RuneCountInString(id.TagLine) > MaxTagLineRunes {
			t.Fatalf("ParseRiotID(%q) = %+v exceeds the length limits", s, id)
		}
		// A parsed ID survives its own String form.
		again, err := ParseRiotID(id.String())
		if err != nil || again != id {
			t.Fatalf("round trip of %q: %+v, %v (first %+v)", s, again, err, id)
		}
	})
}
