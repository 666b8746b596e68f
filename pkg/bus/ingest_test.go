package bus

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDecodeIngestRequest(t *testing.T) {
	r, err := DecodeIngestRequest([]byte(`{"riot_id":" Hide on bush # KR1 ","platform":"KR","mode":"full","count":50}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.RiotID != "Hide on bush#KR1" || r.Platform != "kr" || r.Mode != ModeFull || r.Count != 50 ||
		r.Priority != Interactive || r.Trigger != "nats" {
		t.Fatalf("normalised wrong: %+v", r)
	}
	r, err = DecodeIngestRequest([]byte(`{"puuid":"abc-DEF_1","platform":"jp1"}`))
	if err != nil || r.Mode != ModeLatest || r.PUUID != "abc-DEF_1" {
		t.Fatalf("puuid request: %+v %v", r, err)
	}
	// Design 002's payload exactly as the design writes it: no platform
	// (the resolver finds it).
	r, err = DecodeIngestRequest([]byte(`{"puuid":"abc","count":20,"lookbackDays":30,"force":false,"requestedBy":"bot"}`))
	if err != nil || r.Platform != "" || r.Count != 20 || r.LookbackDays != 30 || r.RequestedBy != "bot" {
		t.Fatalf("design 002 payload: %+v %v", r, err)
	}
}

func TestDecodeIngestRequestRejects(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"bad json", `{"riot_id":`, "invalid JSON"},
		{"not an object", `[1,2]`, "invalid JSON"},
		{"unknown field", `{"riot_id":"a#b12","platform":"na1","x":1}`, "unknown field"},
		{"trailing", `{"puuid":"p","platform":"na1"} {}`, "trailing"},
		{"no id", `{"platform":"na1"}`, "one of riot_id or puuid"},
		{"both ids", `{"riot_id":"a#b12","puuid":"p","platform":"na1"}`, "not both"},
		{"no hash", `{"riot_id":"Faker","platform":"kr"}`, "no '#'"},
		{"empty tag", `{"riot_id":"Faker#","platform":"kr"}`, "empty tag line"},
		{"long name", `{"riot_id":"` + strings.Repeat("a", 17) + `#KR1","platform":"kr"}`, "longer than 16"},
		{"long tag", `{"riot_id":"Faker#KR1234","platform":"kr"}`, "longer than 5"},
		{"bad platform", `{"puuid":"p","platform":"mars1"}`, "unknown platform"},
		{"bad mode", `{"puuid":"p","platform":"na1","mode":"all"}`, "want latest or full"},
		{"count", `{"puuid":"p","platform":"na1","count":1001}`, "count"},
		{"negative lookback", `{"puuid":"p","platform":"na1","lookback_days":-1}`, "lookback_days"},
		{"type", `{"puuid":"p","platform":"na1","type":"arena"}`, "type"},
		{"long puuid", `{"puuid":"` + strings.Repeat("p", 101) + `","platform":"na1"}`, "puuid longer"},
		{"puuid chars", `{"puuid":"a b","platform":"na1"}`, "puuid has"},
		{"request id chars", `{"request_id":"a.b","puuid":"p","platform":"na1"}`, "request_id"},
		{"huge", `{"puuid":"` + strings.Repeat("p", 5000) + `","platform":"na1"}`, "max 4096"},
		{"recovery trigger", `{"puuid":"p","platform":"na1","trigger":"Recovery"}`, "reserved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeIngestRequest([]byte(tc.body))
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrBadRequest) {
				t.Errorf("error %v does not wrap ErrBadRequest", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func TestRejectionTruncatesRaw(t *testing.T) {
	r := NewRejection("r1", "lol.ingest.request", 400, errors.New("bad"), []byte(strings.Repeat("é", 300)), time.Time{})
	if len(r.Raw) > 260 || !strings.HasSuffix(r.Raw, "…") {
		t.Fatalf("raw not truncated: %d bytes", len(r.Raw))
	}
}

func TestSubjects(t *testing.T) {
	s := Subjects{}
	if got := s.Fetch("asia"); got != "lol.match.fetch.asia" {
		t.Fatal(got)
	}
	s = Subjects{Prefix: "test"}
	if got := s.Progress("P"); got != "test.progress.P" {
		t.Fatal(got)
	}
	if !Success.Final() || TemporaryFailure.Final() || Unfetched.Final() || !OutsideRetentionWindow.Final() {
		t.Fatal("Final wrong")
	}
}

func FuzzDecodeIngestRequest(f *testing.F) {
	for _, s := range []string{
		`{"riot_id":"Hide on bush#KR1","platform":"kr"}`, `{"puuid":"x","platform":"na1","mode":"full","count":5}`,
		`{"riot_id":"#","platform":""}`, `null`, `{"queue":-1}`, "{\"riot_id\":\"\xff#a\",\"platform\":\"na1\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeIngestRequest(b)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("error does not wrap ErrBadRequest: %v", err)
			}
			return
		}
		// An accepted request is normalised and re-validates.
		if err := r.Normalize(); err != nil {
			t.Fatalf("accepted request fails re-validation: %v", err)
		}
		// The platform is optional (the resolver finds it through
		// account-v1).
		if (r.RiotID == "") == (r.PUUID == "") || r.Mode == "" {
			t.Fatalf("accepted an incomplete request: %+v", r)
		}
	})
}

// TestDecodeDesign002Payload: design 002's job payload, camelCase names
// and all, decodes as is; conflicting spellings are refused.
func TestDecodeDesign002Payload(t *testing.T) {
	r, err := DecodeIngestRequest([]byte(`{"puuid":"p-1","count":20,"lookbackDays":14,"force":true,"requestedBy":"bot-7","platform":"euw1"}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.PUUID != "p-1" || r.Count != 20 || r.LookbackDays != 14 || !r.Force || r.RequestedBy != "bot-7" ||
		r.Platform != "euw1" || r.Mode != ModeLatest || r.LookbackDaysAlias != 0 || r.RequestedByAlias != "" {
		t.Fatalf("design-002 payload decoded as %+v", r)
	}
	for _, body := range []string{
		`{"puuid":"p","platform":"na1","lookbackDays":3,"lookback_days":4}`,
		`{"puuid":"p","platform":"na1","requestedBy":"a","requested_by":"b"}`,
		`{"puuid":"p","platform":"na1","lookbackDays":9999}`,
	} {
		if _, err := DecodeIngestRequest([]byte(body)); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: err %v, want ErrBadRequest", body, err)
		}
	}
}
