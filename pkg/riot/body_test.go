package riot

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// MatchBody returns Riot's gzip bytes unchanged, with the scanned fields.
func TestMatchBodyPassesGzipThrough(t *testing.T) {
	want, raw := decodeFile(t, filepath.Join("testdata", "match_EUW1_6834713231.json"), DecodeMatch)
	z := gzipBytes(t, raw)
	var gotAE string
	f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) {
		gotAE = r.Header.Get("Accept-Encoding")
		w.Header().Set("Content-Encoding", "gzip")
		w.Write(z)
	})
	c, _, _ := newTestClient(t, f, nil)
	b, err := c.MatchBody(context.Background(), Europe, "EUW1_6834713231")
	if err != nil {
		t.Fatal(err)
	}
	if gotAE != "gzip" {
		t.Errorf("Accept-Encoding %q, want gzip", gotAE)
	}
	if !bytes.Equal(b.Gzip, z) {
		t.Errorf("body is not Riot's gzip bytes (%d vs %d bytes)", len(b.Gzip), len(z))
	}
	if b.Size != int64(len(raw)) || b.MatchID != want.Metadata.MatchID || b.GameCreationMs != int64(want.Info.GameCreation) {
		t.Errorf("got size %d id %q creation %d; want %d %q %d", b.Size, b.MatchID, b.GameCreationMs,
			len(raw), want.Metadata.MatchID, want.Info.GameCreation)
	}
}

// A server that ignores Accept-Encoding: the plain body is compressed here,
// and decompresses to the same bytes.
func TestMatchBodyPlainServer(t *testing.T) {
	raw := testdataFile(t, "timeline_JP1_456819992.json")
	f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) { w.Write(raw) })
	c, _, _ := newTestClient(t, f, nil)
	b, err := c.TimelineBody(context.Background(), Asia, "JP1_456819992")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Gunzip(&out, b.Gzip, 1<<30); err != nil || !bytes.Equal(out.Bytes(), raw) {
		t.Fatalf("round trip differs (err %v)", err)
	}
}

// The bounds of the pass-through path: a gzip bomb (a few KiB inflating
// past MaxBodyBytes), a crafted deep document, a truncated gzip, a
// document without metadata.matchId.
func TestMatchBodyBounds(t *testing.T) {
	bomb := gzipBytes(t, append([]byte(`{"metadata":{"matchId":"NA1_1"},"x":"`), bytes.Repeat([]byte("a"), 8<<20)...))
	if len(bomb) > 64<<10 {
		t.Fatalf("bomb is %d bytes", len(bomb))
	}
	deep := gzipBytes(t, []byte(`{"metadata":{"matchId":"NA1_1"},"x":`+strings.Repeat("[", MaxJSONDepth+1)+strings.Repeat("]", MaxJSONDepth+1)+`}`))
	ok := gzipBytes(t, []byte(`{"metadata":{"matchId":"NA1_1"}}`))
	noID := gzipBytes(t, []byte(`{"metadata":{},"info":{}}`))
	for _, tc := range []struct {
		name string
		body []byte
		want Kind
	}{
		{"bomb", bomb, KindDecode},
		{"deep", deep, KindDecode},
		{"truncated", ok[:len(ok)-6], KindTransport},
		{"no match id", noID, KindDecode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeRiot(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Encoding", "gzip")
				w.Write(tc.body)
			})
			c, _, _ := newTestClient(t, f, func(c *Config) { c.MaxBodyBytes = 1 << 20 })
			_, err := c.MatchBody(context.Background(), Americas, "NA1_1")
			if e := kindOf(t, err); e.Kind != tc.want {
				t.Errorf("got %+v, want %v", e, tc.want)
			}
		})
	}
}

// The scan reads the same fields whatever the chunking, and agrees with
// the full decoders on the recorded documents.
func TestDocScanChunked(t *testing.T) {
	for _, f := range recordedDocs {
		raw := testdataFile(t, f)
		var wantID string
		var wantCreation, wantInterval int64
		var wantFrames int
		if strings.HasPrefix(f, "match") {
			m, err := DecodeMatch(raw)
			if err != nil {
				t.Fatal(err)
			}
			wantID, wantCreation = m.Metadata.MatchID, int64(m.Info.GameCreation)
		} else {
			tl, err := DecodeTimeline(raw)
			if err != nil {
				t.Fatal(err)
			}
			wantID, wantInterval, wantFrames = tl.Metadata.MatchID, int64(tl.Info.FrameInterval), len(tl.Info.Frames)
		}
		for _, chunk := range []int{1, 7, 4096, len(raw)} {
			var s DocScan
			for i := 0; i < len(raw); i += chunk {
				if _, err := s.Write(raw[i:min(i+chunk, len(raw))]); err != nil {
					t.Fatal(err)
				}
			}
			s.Close()
			if s.MatchID() != wantID || s.GameCreationMs() != wantCreation || s.FrameIntervalMs() != wantInterval || s.FrameCount() != wantFrames {
				t.Errorf("%s chunk %d: id %q creation %d interval %d frames %d; want %q %d %d %d", f, chunk,
					s.MatchID(), s.GameCreationMs(), s.FrameIntervalMs(), s.FrameCount(), wantID, wantCreation, wantInterval, wantFrames)
			}
		}
	}
	// Look-alike keys elsewhere do not count; a string value is read as Riot's tolerant Int.
	var s DocScan
	s.Write([]byte(`{"x":{"info":{"gameCreation":1}},"info":{"p":[{"gameCreation":2}],"gameCreation":"33","frames":[],"frameInterval":6e4},"metadata":{"matchId":"NA1_9"}}`))
	s.Close()
	if s.GameCreationMs() != 33 || s.FrameCount() != 0 || s.FrameIntervalMs() != 60000 || s.MatchID() != "NA1_9" {
		t.Errorf("got creation %d frames %d interval %d id %q", s.GameCreationMs(), s.FrameCount(), s.FrameIntervalMs(), s.MatchID())
	}
}

// A close with nothing open is refused (ErrJSONBounds), whatever follows:
// the scanner's depth never goes below zero (fuzzing found `},` indexing
// its per-depth state at -1).
func TestDocScanRefusesUnbalancedClose(t *testing.T) {
	for _, doc := range []string{`},`, `]`, `{}}`, `[]],{"a":1}`} {
		var s DocScan
		if _, err := s.Write([]byte(doc)); !errors.Is(err, ErrJSONBounds) {
			t.Errorf("%s: %v, want ErrJSONBounds", doc, err)
		}
		if _, err := DecodeMatch([]byte(doc)); err == nil {
			t.Errorf("%s: DecodeMatch accepted it", doc)
		}
	}
}
