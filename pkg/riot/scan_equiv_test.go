package riot

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// scanResult is everything DocScan reports on a document: the captured
// fields (as read and as raw bytes) and the first error, with the offset
// in the document of the byte it names.
type scanResult struct {
	MatchID                         string
	GameCreationMs, FrameIntervalMs int64
	FrameCount                      int
	RawCreation, RawInterval        string
	Err                             string // "" when none
	ErrAt                           int64  // offset in the document of the offending byte, -1 when none
}

// feed writes doc to w in the pieces chunks returns (sizes ≥ 1, the last
// one cut to what is left) and stops at the first error.
func feed(doc []byte, w func([]byte) (int, error), chunks func() int) (errText string, errAt int64) {
	for off := 0; off < len(doc); {
		n := min(chunks(), len(doc)-off)
		got, err := w(doc[off : off+n])
		if err != nil {
			return err.Error(), int64(off + got)
		}
		if got != n {
			return fmt.Sprintf("Write took %d of %d bytes without error", got, n), int64(off + got)
		}
		off += n
	}
	return "", -1
}

// scanWith resets s, feeds doc to write (the Write of s, or of a scan
// built on it) in the pieces chunks returns, and reports what s read.
func scanWith(s *DocScan, write func([]byte) (int, error), doc []byte, chunks func() int) scanResult {
	s.Reset()
	errText, errAt := feed(doc, write, chunks)
	if errText == "" {
		s.Close()
	}
	return scanResult{s.MatchID(), s.GameCreationMs(), s.FrameIntervalMs(), s.FrameCount(),
		string(s.gameCreation), string(s.frameInterval), errText, errAt}
}

// scanNew is what DocScan reads of doc.
func scanNew(doc []byte, chunks func() int) scanResult {
	var s DocScan
	return scanWith(&s, s.Write, doc, chunks)
}

// scanRef is what the reference, refDocScan, reads of doc.
func scanRef(doc []byte, chunks func() int) scanResult {
	var r refDocScan
	return scanWith(&r.DocScan, r.Write, doc, chunks)
}

// fixed returns chunk sizes of n (the whole document when n ≤ 0).
func fixed(n int) func() int {
	if n <= 0 {
		n = 1 << 62
	}
	return func() int { return n }
}

// replay returns the chunk sizes of sizes in turn.
func replay(sizes []int) func() int {
	k := 0
	return func() int { k++; return sizes[k-1] }
}

// randomChunks returns chunk sizes drawn from 1..max.
func randomChunks(r *rand.Rand, max int) func() int {
	return func() int { return 1 + r.IntN(max) }
}

// checkEquivalent fails t unless DocScan and refDocScan agree on doc fed
// whole, in 1-byte chunks (unless skipBytewise) and in random chunks of
// up to 64 KB and of up to 16 bytes, and unless DocScan's results do not
// depend on the chunking.
func checkEquivalent(t *testing.T, name string, doc []byte, r *rand.Rand, skipBytewise bool) {
	t.Helper()
	want := scanRef(doc, fixed(0))
	type chunking struct {
		name   string
		chunks func() int
	}
	cs := []chunking{{"whole", fixed(0)}, {"32K", fixed(32 << 10)}}
	if !skipBytewise {
		cs = append(cs, chunking{"1-byte", fixed(1)})
	}
	seed := r.Uint64()
	cs = append(cs,
		chunking{fmt.Sprintf("random-64K(seed %d)", seed), randomChunks(rand.New(rand.NewPCG(seed, 1)), 64<<10)},
		chunking{fmt.Sprintf("random-16(seed %d)", seed), randomChunks(rand.New(rand.NewPCG(seed, 2)), 16)})
	for _, c := range cs {
		// Both scans are fed the same pieces.
		var sizes []int
		for n := 0; n < len(doc); {
			c := min(c.chunks(), len(doc)-n)
			sizes = append(sizes, c)
			n += c
		}
		got, ref := scanNew(doc, replay(sizes)), scanRef(doc, replay(sizes))
		if got != ref {
			t.Errorf("%s, %s chunks: DocScan %+v, refDocScan %+v", name, c.name, got, ref)
		}
		if got != want {
			t.Errorf("%s, %s chunks: %+v, whole document %+v", name, c.name, got, want)
		}
	}
}

// recordedFixtures returns every recorded match and timeline document:
// testdata/riot-fixtures (when present) and pkg/riot/testdata.
func recordedFixtures(t *testing.T) map[string][]byte {
	docs := map[string][]byte{}
	for _, sub := range []string{"match", "timeline"} {
		for _, f := range fixtureFiles(t, sub) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			docs[sub+"/"+filepath.Base(f)] = b
		}
	}
	for _, f := range recordedDocs {
		docs[f] = testdataFile(t, f)
	}
	return docs
}

// DocScan reads every recorded document exactly as the reference scan
// does, whatever the chunking, as recorded (indented) and compacted.
func TestDocScanEquivalentOnFixtures(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	docs := recordedFixtures(t)
	ids := 0
	for name, doc := range docs {
		var compact bytes.Buffer
		if err := json.Compact(&compact, doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// 1-byte chunks are slow on the reference: every document of
		// pkg/riot/testdata, and a few large ones, get them.
		bytewise := !strings.Contains(name, "/") || r.IntN(8) == 0
		if testing.Short() {
			bytewise = !strings.Contains(name, "/")
		}
		checkEquivalent(t, name, doc, r, !bytewise)
		checkEquivalent(t, name+" compacted", compact.Bytes(), r, !bytewise)
		if res := scanNew(doc, fixed(0)); res.MatchID != "" && res.Err == "" {
			ids++
		}
	}
	if ids != len(docs) {
		t.Errorf("%d of %d documents scanned with a matchId and no error", ids, len(docs))
	}
}

// hostileDocs are documents that probe the scan's edges: bounds, escapes
// around the wanted keys and values, captures near maxCapture, numbers in
// odd places and closes with nothing open.
func hostileDocs() map[string]string {
	long := func(n int, unit string) string { return strings.Repeat(unit, n) }
	docs := map[string]string{
		"deep arrays":        long(MaxJSONDepth+1, "[") + long(MaxJSONDepth+1, "]"),
		"deep at the bound":  long(MaxJSONDepth, "[") + long(MaxJSONDepth, "]"),
		"deep objects":       long(MaxJSONDepth+1, `{"a":`) + "1" + long(MaxJSONDepth+1, "}"),
		"deep in a string":   `{"a":"` + long(MaxJSONDepth+1, "[") + `"}`,
		"many containers":    "[" + long(MaxJSONContainers, "[],") + "[]]",
		"containers ok":      "[" + long(MaxJSONContainers-2, "{},") + "{}]",
		"many elements":      "[" + long(MaxJSONElements, "0,") + "0]",
		"elements at bound":  "[" + long(MaxJSONElements-1, "0,") + "0]",
		"commas in strings":  `["` + long(MaxJSONElements+1, ",") + `"]`,
		"closes nothing":     `}`,
		"closes nothing 2":   `{}}`,
		"closes nothing 3":   `[]],{"a":1}`,
		"closes nothing 4":   ` ] `,
		"close in string":    `"}"}`,
		"escaped quote key":  `{"metadata":{"match\"Id":"x","matchId":"a\"b\\","matchId\\":"c"}}`,
		"escaped key quote":  `{"metadata":{"matchId\\\"":"x"},"metadata":{"matchId":"y\\\\"}}`,
		"backslash run":      `{"metadata":{"matchId":"\\\\\\\"}\\\\","x":"\\"}}`,
		"odd backslashes":    `{"metadata":{"x":"\\\\\\\"","matchId":"NA1_\\\"1"}}`,
		"escape before end":  `{"info":{"frames":["\\",[]],"frameInterval":"\"6\""}}`,
		"unicode escape":     `{"metadata":{"matchId":"\u0022NA1\u005c"}}`,
		"wanted numbers":     `{"info":{"gameCreation":-12e3,"frameInterval":60000.5,"frames":[1,2,3]}}`,
		"number ends doc":    `{"info":{"gameCreation":1234567890123`,
		"number then junk":   `{"info":{"gameCreation":12x34,"frameInterval": true 77 }}`,
		"number with signs":  `{"info":{"gameCreation":1-+.eE5,"frameInterval":--1}}`,
		"long number":        `{"info":{"gameCreation":` + long(100, "9") + `}}`,
		"numbers everywhere": `{"info":{"gameCreation"  :  ` + "\n\t\r" + `  42  ,"x":7,"frameInterval":[8],"frameInterval":9}}`,
		"string value num":   `{"info":{"gameCreation":"1627178588839","frameInterval":"6e4"}}`,
		"key 64":             `{"metadata":{"` + long(64, "k") + `":1,"matchId":"` + long(64, "v") + `"}}`,
		"key 65":             `{"metadata":{"` + long(65, "k") + `":"x","matchId":"` + long(65, "v") + `"}}`,
		"value 65 keeps old": `{"metadata":{"matchId":"old","matchId":"` + long(65, "v") + `"}}`,
		"value 64 escapes":   `{"metadata":{"matchId":"` + long(31, `\"`) + `\\"}}`,
		"value 65 escapes":   `{"metadata":{"matchId":"` + long(32, `\"`) + `\\"}}`,
		"long key escapes":   `{"metadata":{"` + long(40, `\\`) + `":"a","matchId":"b"}}`,
		"frames empty":       `{"info":{"frames":[ ] }}`,
		"frames ws":          `{"info":{"frames":[` + " \n\t\r" + `1 , 2 ]}}`,
		"frames ws one":      `{"info":{"frames":[ 7 ]}}`,
		"frames ws true":     `{"info":{"frames":[` + "\n  " + `true]}}`,
		"frames nested":      `{"info":{"frames":[[],{},[[1,2]],"a,b",-1,true]}}`,
		"frames twice":       `{"info":{"frames":[1,2],"frames":[{}]}}`,
		"frames deeper":      `{"x":{"info":{"frames":[1,2,3]}},"info":{"y":{"frames":[1]}}}`,
		"frames in array":    `[{"info":{"frames":[1]}}]`,
		"frames backslash":   `{"info":{"frames":[\ 1]}}`,
		"frames string":      `{"info":{"frames":["]"]}}`,
		"info in array":      `{"info":[{"gameCreation":5}],"metadata":[{"matchId":"x"}]}`,
		"colon chain":        `{"info":{"gameCreation"::7}}`,
		"unterminated":       `{"metadata":{"matchId":"NA1_1`,
		"unterminated esc":   `{"metadata":{"matchId":"NA1_1\`,
		"no document":        ``,
		"whitespace":         " \n\t\r ",
		"junk":               `tru3 -5 "x" \" : , 12`,
		"top-level number":   `-1234`,
		"nul key":            "{\"metadata\":{\"\x00\":1,\"matchId\":\"a\x00b\"}}",
		"utf8":               `{"metadata":{"matchId":"名前_1"},"info":{"ключ":"ö","gameCreation":3}}`,
	}
	return docs
}

// DocScan agrees with the reference on the hostile documents, and on
// mutations of a recorded timeline and match, whatever the chunking.
func TestDocScanEquivalentOnHostile(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for name, doc := range hostileDocs() {
		big := len(doc) > 1<<20
		checkEquivalent(t, name, []byte(doc), r, big && testing.Short())
		// Again below the depths the scan tracks (where it only counts).
		checkEquivalent(t, name+" deep", []byte(`[[{"a":[`+doc+`]}]]`), r, big && testing.Short())
	}
	// The bounds cases above do fail, at the byte past the bound.
	for name, wantAt := range map[string]int64{
		"deep arrays": MaxJSONDepth, "many containers": 1 + 3*(MaxJSONContainers-1), "closes nothing 2": 2,
		"many elements": 1 + 2*MaxJSONElements - 1,
	} {
		res := scanNew([]byte(hostileDocs()[name]), fixed(0))
		if res.ErrAt != wantAt {
			t.Errorf("%s: error %q at %d, want at %d", name, res.Err, res.ErrAt, wantAt)
		}
		if name == "closes nothing 2" {
			continue
		}
		// Below depth 4 the bounds are the same, the offsets shifted.
		deep := `[[{"a":[` + hostileDocs()[name] + `]}]]`
		shift := int64(len(`[[{"a":[`))
		switch name {
		case "deep arrays":
			shift = int64(len(`[[{"a":[`)) - 4 // 4 of the 32 levels are the wrapper's
		case "many containers":
			shift -= 3 * 4 // ... and so are 4 containers (of 3 bytes each in the array)
		case "many elements":
			shift -= 2 * 4 // ... and 4 elements (containers)
		}
		if res := scanNew([]byte(deep), fixed(0)); res.ErrAt != wantAt+shift {
			t.Errorf("%s deep: error %q at %d, want at %d", name, res.Err, res.ErrAt, wantAt+shift)
		}
	}
	// Mutations: bytes that matter to the scan, dropped into or
	// substituted in recorded documents.
	alphabet := []byte(`"\{}[],:0123456789-+.eE 	` + "\n")
	for _, base := range []string{"timeline_JP1_456819992.json", "match_JP1_456819992.json"} {
		raw := testdataFile(t, base)
		n := 300
		if testing.Short() {
			n = 50
		}
		for m := range n {
			doc := bytes.Clone(raw)
			for range 1 + r.IntN(8) {
				at := r.IntN(len(doc))
				c := alphabet[r.IntN(len(alphabet))]
				if r.IntN(2) == 0 {
					doc[at] = c
				} else {
					doc = append(doc[:at], append([]byte{c}, doc[at:]...)...)
				}
			}
			// Mutate mostly near the wanted fields, which sit at the top.
			if m%2 == 0 {
				at := bytes.Index(doc, []byte(`"matchId"`))
				if at < 0 {
					at = 0
				}
				at += r.IntN(40)
				if at < len(doc) {
					doc = append(doc[:at], append([]byte{alphabet[r.IntN(len(alphabet))]}, doc[at:]...)...)
				}
			}
			checkEquivalent(t, fmt.Sprintf("%s mutation %d", base, m), doc, r, false)
		}
	}
}

// FuzzDocScanEquivalent checks DocScan against the reference scan on
// arbitrary bytes, written in two pieces cut anywhere, the second one in
// chunks of chunk bytes (whole when 0).
func FuzzDocScanEquivalent(f *testing.F) {
	for _, doc := range hostileDocs() {
		if len(doc) < 4096 {
			f.Add([]byte(doc), uint16(len(doc)/2), uint8(0))
		}
	}
	for _, name := range recordedDocs {
		doc := testdataFile(f, name)
		f.Add(doc, uint16(700), uint8(3))
	}
	f.Add([]byte(`{"metadata":{"matchId":"a\\\"b"},"info":{"gameCreation":12,"frames":[1,2]}}`), uint16(27), uint8(1))
	f.Fuzz(func(t *testing.T, doc []byte, cut uint16, chunk uint8) {
		at := int(cut) % (len(doc) + 1)
		pieces := func() func() int {
			first := true
			return func() int {
				if first {
					first = false
					if at > 0 {
						return at
					}
				}
				if chunk == 0 {
					return 1 << 62
				}
				return int(chunk)
			}
		}
		got, ref, whole := scanNew(doc, pieces()), scanRef(doc, pieces()), scanRef(doc, fixed(0))
		if got != ref {
			t.Fatalf("cut %d chunk %d: DocScan %+v, refDocScan %+v", at, chunk, got, ref)
		}
		if got != whole {
			t.Fatalf("cut %d chunk %d: %+v, whole document %+v", at, chunk, got, whole)
		}
	})
}
