package store

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/tidwall/gjson"
)

// TestScrubParticipant: on a recorded MatchDto and TimelineDto, the
// player's PUUID is gone everywhere, their Riot ID and summoner fields are
// blanked, every other participant's fields are untouched, and the result
// is valid JSON of the same shape.
func TestScrubParticipant(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "riot-fixtures")
	match, err := os.ReadFile(filepath.Join(dir, "match", "EUW1_6349186754.json"))
	if err != nil {
		t.Skip("no recorded fixtures:", err)
	}
	timeline, err := os.ReadFile(filepath.Join(dir, "timeline", "EUW1_6349186754.json"))
	if err != nil {
		t.Fatal(err)
	}
	const idx = 3
	p := gjson.GetBytes(match, "info.participants.3")
	puuid, name := p.Get("puuid").String(), p.Get("summonerName").String()
	if puuid == "" || name == "" {
		t.Fatalf("fixture participant %d has no puuid or summoner name", idx)
	}
	out, err := ScrubParticipant(match, puuid)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(out) || bytes.Contains(out, []byte(puuid)) || bytes.Contains(out, []byte(name)) {
		t.Fatalf("scrubbed MatchDto: valid %v, still names the PUUID %v or the summoner %v", json.Valid(out),
			bytes.Contains(out, []byte(puuid)), bytes.Contains(out, []byte(name)))
	}
	for field, zero := range erasedFields {
		got := gjson.GetBytes(out, "info.participants.3."+field)
		if gjson.GetBytes(match, "info.participants.3."+field).Exists() && got.Value() != zero && !(got.Num == 0 && zero == 0) {
			t.Errorf("%s = %v, want %v", field, got.Value(), zero)
		}
	}
	for i := range 10 {
		if i == idx {
			continue
		}
		path := "info.participants." + string(rune('0'+i))
		if gjson.GetBytes(out, path).Raw != gjson.GetBytes(match, path).Raw {
			t.Errorf("participant %d changed", i)
		}
	}
	if gjson.GetBytes(out, "metadata.participants.3").String() != "" ||
		len(gjson.GetBytes(out, "metadata.participants").Array()) != 10 {
		t.Error("metadata.participants: the PUUID not blanked in place")
	}
	tl, err := ScrubParticipant(timeline, puuid)
	if err != nil || !json.Valid(tl) || bytes.Contains(tl, []byte(puuid)) || len(tl) != len(timeline)-len(puuid)*bytes.Count(timeline, []byte(puuid)) {
		t.Errorf("scrubbed TimelineDto: %v, valid %v, names the PUUID %v", err, json.Valid(tl), bytes.Contains(tl, []byte(puuid)))
	}
	if _, err := ScrubParticipant([]byte(`{"info":`), puuid); err == nil {
		t.Error("invalid JSON accepted")
	}
}
