package sim

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// A synthetic match's payload is its template's recorded payload with a
// handful of values changed: the match ID, game ID, platform, the synthetic
// player's PUUID and Riot ID, and the epoch-ms times moved by the match's
// shift (a TimelineDto of 0.3–1.7 MB has two realTimestamps). Patching
// decodes and re-encodes the whole document, and the server then gzips it:
// tens of milliseconds of CPU per timeline, which made the simulator, not
// the system under test, the bottleneck of a 20,000-match benchmark.
//
// So each template is compiled once: rendered with the patch in mark mode
// (patch.mark), which writes @@name@@ sentinels where the values go, and
// split into literal runs and holes. Each run is deflated once, ending in a
// sync flush (byte aligned, not final), so a request's gzip body is the
// runs' compressed bytes with each hole's few bytes in a stored block
// between them, a final empty block and the CRC-32 of the plain body. The
// plain body is the same runs and holes, byte-equal to what patchMatch or
// patchTimeline returns for the same patch (TestCompiledTemplateMatchesPatch).

// tmplKey names a compiled template: the template match, which payload,
// and the participant slot of the synthetic player.
type tmplKey struct {
	tmpl     *match
	timeline bool
	slot     int
}

// compiledTemplate is a rendered template split into literal runs and holes.
type compiledTemplate struct {
	once  sync.Once
	items []tmplItem
	size  int // plain bytes of the literal runs
	err   error
}

type holeKind uint8

const (
	holeNone holeKind = iota
	holeShift
	holeGameID
	holeMatchID
	holePlatformID
	holePUUID
	holeGameName
	holeTagLine
	holeSummonerID
)

// stringHoles are the sentinels of string values; the hole is the string's
// content, the quotes stay in the literal runs.
var stringHoles = map[string]holeKind{
	"matchId": holeMatchID, "platformId": holePlatformID, "puuid": holePUUID,
	"gameName": holeGameName, "tagLine": holeTagLine, "summonerId": holeSummonerID,
}

type tmplItem struct {
	lit  []byte // literal run (kind holeNone)
	z    []byte // lit deflated, ending in a sync flush
	kind holeKind
	v    int64 // holeShift: the recorded epoch-ms value
}

// markPatch is p in mark mode: every value a synthetic match changes
// becomes a sentinel.
func markPatch(p patch) patch {
	m := p
	m.mark = true
	m.matchID, m.platformID = "@@matchId@@", "@@platformId@@"
	m.puuid, m.gameName, m.tagLine = "@@puuid@@", "@@gameName@@", "@@tagLine@@"
	if p.puuids != nil {
		m.puuids = slices.Clone(p.puuids)
		for i, id := range m.puuids {
			if id == p.puuid {
				m.puuids[i] = m.puuid
			}
		}
	}
	return m
}

// compile renders src with p in mark mode through render and splits it.
func (c *compiledTemplate) compile(src []byte, p patch, render func([]byte, patch) ([]byte, error)) error {
	if bytes.Contains(src, []byte("@@")) {
		return errors.New("template contains the sentinel marker @@")
	}
	out, err := render(src, markPatch(p))
	if err != nil {
		return err
	}
	var items []tmplItem
	lit := func(b []byte) {
		if len(b) == 0 {
			return
		}
		var buf bytes.Buffer
		zw, _ := flate.NewWriter(&buf, flate.DefaultCompression)
		zw.Write(b)
		zw.Flush() // sync flush: byte aligned, no final block
		items = append(items, tmplItem{lit: b, z: buf.Bytes()})
		c.size += len(b)
	}
	for {
		i := bytes.Index(out, []byte("@@"))
		if i < 0 {
			lit(out)
			break
		}
		j := bytes.Index(out[i+2:], []byte("@@"))
		if j < 0 {
			return errors.New("unterminated sentinel")
		}
		name := string(out[i+2 : i+2+j])
		end := i + 2 + j + 2
		if k, ok := stringHoles[name]; ok {
			lit(out[:i])
			items = append(items, tmplItem{kind: k})
			out = out[end:]
			continue
		}
		// numeric holes replace a whole JSON string "@@...@@"
		if i == 0 || out[i-1] != '"' || end >= len(out) || out[end] != '"' {
			return fmt.Errorf("numeric sentinel %q not a whole string", name)
		}
		it := tmplItem{kind: holeGameID}
		if v, ok := strings.CutPrefix(name, "shift:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("sentinel %q: %w", name, err)
			}
			it = tmplItem{kind: holeShift, v: n}
		} else if name != "gameId" {
			return fmt.Errorf("unknown sentinel %q", name)
		}
		lit(out[:i-1])
		items = append(items, it)
		out = out[end+1:]
	}
	c.items = items
	return nil
}

// jsonStringContent appends s JSON-escaped, without quotes, as encode does.
func jsonStringContent(dst []byte, s string) []byte {
	b := mustEncode(s)
	return append(dst, b[1:len(b)-1]...)
}

// fill appends hole it's value for p.
func (it tmplItem) fill(dst []byte, p patch) []byte {
	switch it.kind {
	case holeShift:
		return strconv.AppendInt(dst, it.v+p.shift, 10)
	case holeGameID:
		return strconv.AppendInt(dst, p.gameID, 10)
	case holeMatchID:
		return jsonStringContent(dst, p.matchID)
	case holePlatformID:
		return jsonStringContent(dst, p.platformID)
	case holePUUID:
		return jsonStringContent(dst, p.puuid)
	case holeGameName:
		return jsonStringContent(dst, p.gameName)
	case holeTagLine:
		return jsonStringContent(dst, p.tagLine)
	case holeSummonerID:
		return jsonStringContent(dst, p.summonerID())
	}
	return dst
}

// render is the template's body for p, plain and gzipped (RFC 1952; one
// member, its deflate stream the runs' pre-compressed blocks and a stored
// block per hole).
func (c *compiledTemplate) render(p patch) (plain, gz []byte) {
	plain = make([]byte, 0, c.size+64*len(c.items))
	zsize := 18 + 5
	for _, it := range c.items {
		zsize += len(it.z) + 5 + 64
	}
	gz = make([]byte, 0, zsize)
	gz = append(gz, 0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff)
	for _, it := range c.items {
		if it.kind == holeNone {
			plain = append(plain, it.lit...)
			gz = append(gz, it.z...)
			continue
		}
		n := len(plain)
		plain = it.fill(plain, p)
		v := plain[n:]
		// stored block, not final: header bits 000 then pad to a byte
		gz = append(gz, 0)
		gz = binary.LittleEndian.AppendUint16(gz, uint16(len(v)))
		gz = binary.LittleEndian.AppendUint16(gz, ^uint16(len(v)))
		gz = append(gz, v...)
	}
	gz = append(gz, 1, 0, 0, 0xff, 0xff) // final empty stored block
	gz = binary.LittleEndian.AppendUint32(gz, crc32.ChecksumIEEE(plain))
	gz = binary.LittleEndian.AppendUint32(gz, uint32(len(plain)))
	return plain, gz
}

// synthBody is synthetic match m's payload (timeline or MatchDto), plain
// and gzipped, from its template compiled on first use. A template that
// cannot be compiled, or a zero shift (patching then keeps the frames as
// recorded), is patched the slow way and gzipped by the server.
func (s *Sim) synthBody(m *match, timeline bool) ([]byte, []byte, error) {
	src, p, err := synthSource(m, timeline)
	if err != nil {
		return nil, nil, err
	}
	render := patchMatch
	if timeline {
		render = patchTimeline
	}
	if p.shift == 0 {
		b, err := render(src, p)
		return b, nil, err
	}
	v, _ := s.tmpls.LoadOrStore(tmplKey{m.tmpl, timeline, m.slot}, &compiledTemplate{})
	c := v.(*compiledTemplate)
	c.once.Do(func() {
		if c.err = c.compile(src, p, render); c.err != nil {
			s.log.Warn("synthetic template not compiled; patching per request", "template", m.tmpl.id, "timeline", timeline, "err", c.err)
		}
	})
	if c.err != nil {
		b, err := render(src, p)
		return b, nil, err
	}
	b, gz := c.render(p)
	return b, gz, nil
}
