package subject

import "testing"

func TestMatches(t *testing.T) {
	for _, tt := range []struct {
		filter, subject string
		want            bool
	}{
		{"lol.match.fetch.>", "lol.match.fetch.americas", true},
		{"lol.match.fetch.>", "lol.match.fetch", false},
		{"lol.match.fetch.>", "lol.match.fetch.americas.x", true},
		{"lol.*.fetch", "lol.match.fetch", true},
		{"lol.*.fetch", "lol.match.fetched", false},
		{"lol.*", "lol.match.fetch", false},
		{"lol.>.x", "lol.a.x", false},
		{"$JS.API.>", "$JS.API.STREAM.DELETE.FETCHED", true},
		{"lol.match", "lol.match", true},
		{"lol.match", "lol.matc", false},
	} {
		if got := Matches(tt.filter, tt.subject); got != tt.want {
			t.Errorf("Matches(%q, %q) = %v, want %v", tt.filter, tt.subject, got, tt.want)
		}
	}
}
