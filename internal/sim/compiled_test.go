package sim

import (
	"bytes"
	"compress/gzip"
	"io"
	"strings"
	"testing"

	"github.com/riftflow/riftflow/internal/testenv"
)

// TestCompiledTemplateMatchesPatch checks every synthetic payload rendered
// from a compiled template against the slow patch of the same match: the
// plain body byte-equal, the gzip body a valid member (checksum and length
// verified by the reader) that inflates to it.
func TestCompiledTemplateMatchesPatch(t *testing.T) {
	testenv.SkipShort(t, "slow")
	for _, derive := range []bool{false, true} {
		s, _ := newSim(t, Options{DeriveTimelines: derive, Synthetic: Synthetic{Players: 3, MatchesPerPlayer: 12, Platform: "na1", WithTimelines: !derive}})
		n := 0
		for id, m := range s.data.matches {
			if m.tmpl == nil {
				continue
			}
			for _, timeline := range []bool{false, true} {
				if timeline && !m.hasTimeline() {
					continue
				}
				var want []byte
				var err error
				if timeline {
					want, err = synthTimeline(m)
				} else {
					want, err = patchMatch(m.tmpl.raw, m.synthPatch())
				}
				if err != nil {
					t.Fatalf("%s: slow patch: %v", id, err)
				}
				plain, gz, err := s.synthBody(m, timeline)
				if err != nil {
					t.Fatalf("%s: %v", id, err)
				}
				if gz == nil {
					t.Fatalf("%s timeline=%v: template not compiled", id, timeline)
				}
				if !bytes.Equal(plain, want) {
					t.Fatalf("%s timeline=%v derive=%v: compiled body differs from the patch (%d vs %d bytes)", id, timeline, derive, len(plain), len(want))
				}
				zr, err := gzip.NewReader(bytes.NewReader(gz))
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(zr)
				if err != nil {
					t.Fatalf("%s: gzip body: %v", id, err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%s: gzip body inflates to other bytes", id)
				}
				if !strings.Contains(string(plain), `"matchId":"`+id+`"`) {
					t.Fatalf("%s: match ID not in the body", id)
				}
				n++
			}
		}
		if n < 36 {
			t.Fatalf("derive=%v: only %d payloads checked", derive, n)
		}
	}
}

func TestCompileRefusesSentinelInTemplate(t *testing.T) {
	var c compiledTemplate
	if err := c.compile([]byte(`{"metadata":{"matchId":"@@x@@"},"info":{}}`), patch{shift: 1, matchID: "NA1_1", slot: -1}, patchMatch); err == nil {
		t.Fatal("a template holding @@ compiled")
	}
}

// BenchmarkSyntheticTimeline is the simulator's cost per synthetic
// timeline served gzipped: compiled (the server's path) and patched.
func BenchmarkSyntheticTimeline(b *testing.B) {
	s, _ := newSim(b, Options{Synthetic: Synthetic{Players: 1, MatchesPerPlayer: 40, Platform: "na1", WithTimelines: true}})
	var ms []*match
	for _, m := range s.data.matches {
		if m.tmpl != nil {
			ms = append(ms, m)
		}
	}
	b.Run("compiled", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, gz, err := s.synthBody(ms[i%len(ms)], true); err != nil || gz == nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("patched", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			plain, err := synthTimeline(ms[i%len(ms)])
			if err != nil {
				b.Fatal(err)
			}
			gzipBytes(plain)
		}
	})
}

// synthTimeline is synthetic match m's timeline patched the slow way: the
// reference the compiled templates of Sim.synthBody are checked against.
func synthTimeline(m *match) ([]byte, error) {
	src, p, err := synthSource(m, true)
	if err != nil {
		return nil, err
	}
	return patchTimeline(src, p)
}
