package bus

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestFetchResultWireForms(t *testing.T) {
	at := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	gz := []byte{0x1f, 0x8b, 8, 0, '\n', '"', 0, 0xff}
	ok := FetchResult{MatchID: "NA1_1", Kind: KindTimeline, Region: "americas", Outcome: Success, Attempt: 2,
		Status: 200, Payload: gz, AttemptedAt: at, RequestID: "r1", Timeline: &TimelineMeta{FrameIntervalMs: 60000, FrameCount: 31}}
	data, h, err := EncodeFetchResult(ok)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, gz) {
		t.Fatalf("data is not the payload: %q", data)
	}
	if v := h[FetchResultHeader]; strings.ContainsAny(v, "\r\n") || strings.Contains(v, "payload\"") {
		t.Fatalf("header %q", v)
	}
	got, err := DecodeFetchResult(map[string][]string{FetchResultHeader: {h[FetchResultHeader]}}, data)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Payload, gz) || got.MatchID != "NA1_1" || got.Attempt != 2 || !got.AttemptedAt.Equal(at) ||
		got.Timeline == nil || got.Timeline.FrameCount != 31 || got.Timeline.FrameIntervalMs != 60000 {
		t.Fatalf("round trip: %+v", got)
	}

	fail := FetchResult{MatchID: "NA1_2", Kind: KindMatch, Outcome: TemporaryFailure, Error: "503\nbody", AttemptedAt: at}
	data, h, err = EncodeFetchResult(fail)
	if err != nil || h != nil {
		t.Fatalf("failure: %v %v", h, err)
	}
	got, err = DecodeFetchResult(nil, data)
	if err != nil || got.MatchID != "NA1_2" || got.Error != "503\nbody" || got.Payload != nil {
		t.Fatalf("failure round trip: %+v %v", got, err)
	}

	// The JSON form: payload base64 in the JSON data, no header.
	legacy := []byte(`{"match_id":"NA1_3","kind":"match","outcome":"success","attempt":1,"payload":"H4sIAA=="}`)
	got, err = DecodeFetchResult(map[string][]string{"Other": {"x"}}, legacy)
	if err != nil || got.MatchID != "NA1_3" || !bytes.Equal(got.Payload, []byte{0x1f, 0x8b, 8, 0}) {
		t.Fatalf("legacy: %+v %v", got, err)
	}
}

func TestDecodeFetchResultErrors(t *testing.T) {
	for name, c := range map[string]struct {
		h    map[string][]string
		data string
	}{
		"data not JSON":        {nil, "\x1f\x8b garbage"},
		"header not JSON":      {map[string][]string{FetchResultHeader: {"{"}}, "gz"},
		"payload in header":    {map[string][]string{FetchResultHeader: {`{"match_id":"NA1_1","payload":"AAAA"}`}}, "gz"},
		"header not an object": {map[string][]string{FetchResultHeader: {`[1]`}}, "gz"},
	} {
		if _, err := DecodeFetchResult(c.h, []byte(c.data)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
