package riot

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkDocScan scans recorded documents in the 32 KB chunks a gzip
// reader hands over: the largest recorded timeline and match of
// testdata/riot-fixtures as recorded (indented) and compacted, and the
// small timeline of pkg/riot/testdata.
func BenchmarkDocScan(b *testing.B) {
	benchDocScan(b, func() docScanner { return new(DocScan) })
}

// BenchmarkRefDocScan is BenchmarkDocScan on the reference scan
// (scan_ref_test.go: DocScan driven one byte at a time), for what
// DocScan.Write's fast paths gain, in one run.
func BenchmarkRefDocScan(b *testing.B) {
	benchDocScan(b, func() docScanner { return new(refDocScan) })
}

// docScanner is what the benchmarks and equivalence tests need of DocScan
// and refDocScan.
type docScanner interface {
	Reset()
	Write(p []byte) (int, error)
	Close()
}

func benchDocScan(b *testing.B, newScan func() docScanner) {
	docs := []struct{ name, file string }{
		{"timeline", filepath.Join(fixtureDir(b, "timeline"), "NA1_3988447001.json")}, // 1.7 MB, the largest
		{"match", filepath.Join(fixtureDir(b, "match"), "JP1_433066634.json")},        // 145 KB, the largest
		{"small-timeline", filepath.Join("testdata", "timeline_EUW1_6834713231.json")},
	}
	for _, d := range docs {
		raw, err := os.ReadFile(d.file)
		if err != nil {
			b.Fatal(err)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, raw); err != nil {
			b.Fatal(err)
		}
		for _, v := range []struct {
			name string
			raw  []byte
		}{{d.name, raw}, {d.name + "-compact", compact.Bytes()}} {
			b.Run(v.name, func(b *testing.B) {
				const chunk = 32 << 10
				s := newScan()
				b.SetBytes(int64(len(v.raw)))
				for b.Loop() {
					s.Reset()
					for i := 0; i < len(v.raw); i += chunk {
						if _, err := s.Write(v.raw[i:min(i+chunk, len(v.raw))]); err != nil {
							b.Fatal(err)
						}
					}
					s.Close()
				}
			})
		}
	}
}
