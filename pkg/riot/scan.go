package riot

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
)

// DocScan is a one-pass, incremental scan of a match-v5 JSON document: it
// enforces the JSON bounds (MaxJSONDepth, MaxJSONContainers,
// MaxJSONElements) and picks out the few fields riftflow needs before the
// document is stored, without decoding the rest. Feed the document in
// chunks of any size with Write; Write fails (wrapping ErrJSONBounds) at
// the first byte past a bound. It is not a JSON validator: syntax errors
// that keep within the bounds pass (Postgres' json input, or a full
// decode, catches them). Memory is constant (a few hundred bytes).
//
// The zero value is ready to use; Reset makes it reusable.
type DocScan struct {
	depth, containers, elements int
	size                        int64 // bytes scanned, set by the body reader
	inString, escaped           bool

	// Path tracking for depths 1..3: object[d] says whether the container
	// at depth d is an object, opener[d] the key (in its parent) that
	// opened it, expectKey[d] whether the next string at depth d is a key.
	object    [4]bool
	opener    [4]string
	expectKey [4]bool
	key       [4]string // the last key read at depth d

	strBuf    []byte // the current string's bytes, when captured
	capturing bool   // strBuf is being filled (a key or a wanted value)
	strIsKey  bool
	valueFor  string // the field whose scalar value comes next ("" = none)
	numBuf    []byte // a wanted number's bytes
	inNumber  bool

	matchID       []byte
	gameCreation  []byte
	frameInterval []byte
	frames        int  // commas seen in info.frames, plus one if non-empty
	inFrames      bool // the container at depth 3 is info.frames
	framesSeen    bool // info.frames had a first element
}

// Reset clears s for a new document, keeping its buffers.
func (s *DocScan) Reset() {
	*s = DocScan{strBuf: s.strBuf[:0], numBuf: s.numBuf[:0],
		matchID: s.matchID[:0], gameCreation: s.gameCreation[:0], frameInterval: s.frameInterval[:0]}
}

// maxCapture bounds a captured key or value; longer ones are not the
// fields we want.
const maxCapture = 64

// structural marks the bytes that Write must act on outside a string:
// quotes, brackets, braces, commas and colons. Every other byte
// (whitespace, digits, letters, ...) needs no action unless a wanted
// number may start or info.frames may get its first element.
var structural = [256]bool{'"': true, '{': true, '}': true, '[': true, ']': true, ',': true, ':': true}

// skipPlain returns the index of the first structural byte in p[i:], or
// len(p), skipping indentation 8 bytes at a time.
func skipPlain(p []byte, i int) int {
	for i+8 <= len(p) && binary.LittleEndian.Uint64(p[i:]) == 0x2020202020202020 {
		i += 8
	}
	for i < len(p) && !structural[p[i]] {
		i++
	}
	return i
}

// Bound errors, the same from Write and scanDeep.
var (
	errTooDeep      = fmt.Errorf("%w: nesting deeper than %d", ErrJSONBounds, MaxJSONDepth)
	errTooMany      = fmt.Errorf("%w: more than %d objects and arrays", ErrJSONBounds, MaxJSONContainers)
	errTooManyElems = fmt.Errorf("%w: more than %d elements", ErrJSONBounds, MaxJSONElements)
)

// Write scans the next chunk of the document. It never keeps p. On a bound
// exceeded it returns the index in p of the offending byte and an error
// wrapping ErrJSONBounds.
func (s *DocScan) Write(p []byte) (int, error) {
	i := 0
	if s.inString {
		i = s.scanString(p, 0)
	}
	for i < len(p) {
		if s.depth >= len(s.object) && !s.inNumber && s.valueFor == "" {
			var err error
			if i, err = s.scanDeep(p, i); err != nil || i == len(p) {
				return i, err
			}
		}
		c := p[i]
		if s.inNumber && s.takeNumberByte(c) {
			i++
			continue
		}
		s.noteFirstFrame(c)
		switch c {
		case '"':
			if j := quoteAt(p, i+1); j < len(p) && p[j-1] != '\\' {
				// The whole string is in p: the first quote after
				// the opening one, not escaped, ends it.
				s.wholeString(p[i+1 : j])
				i = j + 1
				continue
			}
			s.inString = true
			s.startString()
			i = s.scanString(p, i+1)
			continue
		case '{', '[':
			if err := s.open(c); err != nil {
				return i, err
			}
		case '}', ']':
			if err := s.close(c); err != nil {
				return i, err
			}
		case ',':
			if err := s.comma(); err != nil {
				return i, err
			}
		case ':':
			s.valueFor = s.wanted()
		default:
			if s.valueFor == "" && (!s.inFrames || s.framesSeen) {
				// Nothing to capture and no first frame to see: skip
				// the run of bytes that need no action.
				i = skipPlain(p, i+1)
				continue
			}
			if s.valueFor != "" && ((c >= '0' && c <= '9') || c == '-') {
				s.inNumber = true
				s.numBuf = append(s.numBuf[:0], c)
			}
		}
		i++
	}
	return len(p), nil
}

// takeNumberByte reads c in the wanted number being read (s.inNumber):
// a byte that can be part of a JSON number is kept (up to maxCapture
// bytes) and it returns true; any other byte ends the number (endNumber)
// and it returns false, leaving c to be read as what follows the number.
func (s *DocScan) takeNumberByte(c byte) bool {
	if (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
		if len(s.numBuf) < maxCapture {
			s.numBuf = append(s.numBuf, c)
		}
		return true
	}
	s.inNumber = false
	s.endNumber()
	return false
}

// noteFirstFrame counts the first element of info.frames at its first
// byte (read outside a string) that is neither white space nor the
// array's close.
func (s *DocScan) noteFirstFrame(c byte) {
	if s.inFrames && s.depth == 3 && !s.framesSeen && c != ' ' && c != '\n' && c != '\t' && c != '\r' && c != ']' {
		s.framesSeen = true
		s.frames = 1
	}
}

// open records a '{' or '[': one level deeper, within the bounds, and at a
// tracked depth whether it is an object and which key opened it.
func (s *DocScan) open(c byte) error {
	s.depth++
	s.containers++
	s.elements++
	if s.depth > MaxJSONDepth {
		return errTooDeep
	}
	if s.containers > MaxJSONContainers {
		return errTooMany
	}
	s.valueFor = ""
	if d := s.depth; d < len(s.object) {
		s.object[d] = c == '{'
		s.expectKey[d] = c == '{'
		s.key[d] = ""
		s.opener[d] = ""
		if d > 1 && s.object[d-1] {
			s.opener[d] = s.key[d-1]
		}
		s.inFrames = d == 3 && c == '[' && s.opener[2] == "info" && s.opener[3] == "frames"
		if s.inFrames {
			s.frames, s.framesSeen = 0, false
		}
	}
	return nil
}

// close records a '}' or ']'; more closed than opened is not JSON, and the
// depth bookkeeping must never go negative.
func (s *DocScan) close(c byte) error {
	if s.depth == 0 {
		return fmt.Errorf("%w: %q closes nothing (not JSON)", ErrJSONBounds, c)
	}
	if s.depth == 3 {
		s.inFrames = false
	}
	s.depth--
	s.valueFor = ""
	return nil
}

// comma records a ',': one more element (bounded), a key next in an
// object, one more frame in info.frames.
func (s *DocScan) comma() error {
	s.elements++
	if s.elements > MaxJSONElements {
		return errTooManyElems
	}
	if d := s.depth; d < len(s.object) && s.object[d] {
		s.expectKey[d] = true
	}
	if s.inFrames && s.depth == 3 {
		s.frames++
	}
	s.valueFor = ""
	return nil
}

// scanDeep scans p[i:] below the tracked depths (s.depth ≥ len(s.object)),
// with no value wanted and no number open: there only the bounds need
// counting and strings skipping. It returns the index of the first byte
// it has not scanned (the one after the close that brings the depth back
// to len(s.object)-1, or len(p)), or an error as Write does.
func (s *DocScan) scanDeep(p []byte, i int) (int, error) {
	depth, containers, elements := s.depth, s.containers, s.elements
	for i < len(p) {
		switch p[i] {
		case '"':
			if j := quoteAt(p, i+1); j < len(p) && p[j-1] != '\\' {
				i = j + 1 // the string ends at the first quote after the opening one
				continue
			}
			s.depth, s.containers, s.elements = depth, containers, elements
			s.inString = true
			s.startString()
			i = s.scanString(p, i+1)
			continue
		case '{', '[':
			depth++
			containers++
			elements++
			if depth > MaxJSONDepth {
				s.depth, s.containers, s.elements = depth, containers, elements
				return i, errTooDeep
			}
			if containers > MaxJSONContainers {
				s.depth, s.containers, s.elements = depth, containers, elements
				return i, errTooMany
			}
		case '}', ']':
			depth--
			if depth < len(s.object) {
				s.depth, s.containers, s.elements = depth, containers, elements
				return i + 1, nil
			}
		case ',':
			elements++
			if elements > MaxJSONElements {
				s.depth, s.containers, s.elements = depth, containers, elements
				return i, errTooManyElems
			}
		default:
			i = skipPlain(p, i+1)
			continue
		}
		i++
	}
	s.depth, s.containers, s.elements = depth, containers, elements
	return i, nil
}

// scanString scans p[i:], the inside of the current string (s.inString),
// up to its closing quote: it captures the bytes if wanted, ends the
// string and returns the index after the quote, or len(p) when the string
// goes on past p (s.escaped then says whether p ended inside an escape).
func (s *DocScan) scanString(p []byte, i int) int {
	start := i // the first byte not yet captured
	esc := s.escaped
	for {
		j := bytes.IndexByte(p[i:], '"')
		if j < 0 {
			s.escaped = oddEscape(p, i, len(p), esc)
			s.captureRun(p[start:])
			return len(p)
		}
		j += i
		if oddEscape(p, i, j, esc) {
			// An escaped quote: part of the string; no escape is
			// pending after it.
			esc = false
			i = j + 1
			continue
		}
		s.captureRun(p[start:j])
		s.escaped, s.inString = false, false
		s.endString()
		return j + 1
	}
}

// quoteAt returns the index of the first quote in p[i:], or len(p),
// reading 16 bytes at a time (most keys and values are shorter, which
// keeps the loop's branch predictable).
func quoteAt(p []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; i+16 <= len(p); i += 16 {
		// A byte of q is zero where p holds a quote; the lowest zero
		// byte is flagged (0x80) exactly, as the borrows run upwards.
		q1, q2 := binary.LittleEndian.Uint64(p[i:])^('"'*ones), binary.LittleEndian.Uint64(p[i+8:])^('"'*ones)
		m1, m2 := (q1-ones)&^q1&highs, (q2-ones)&^q2&highs
		if m1|m2 != 0 {
			n := bits.TrailingZeros64(m1) // 64 when m1 is 0
			if m1 == 0 {
				n += bits.TrailingZeros64(m2)
			}
			return i + n/8
		}
	}
	for ; i < len(p); i++ {
		if p[i] == '"' {
			return i
		}
	}
	return len(p)
}

// wholeString does what startString, capture and endString do for a
// string whose bytes b (as in the document, escapes included) are all in
// one chunk.
func (s *DocScan) wholeString(b []byte) {
	if d := s.depth; d < len(s.object) && d > 0 && s.object[d] && s.expectKey[d] {
		s.expectKey[d] = false
		switch {
		case len(b) > maxCapture || len(b) > 0 && b[0] == 0:
			s.key[d] = "\x00"
		default:
			s.key[d] = internKey(b)
		}
		return
	}
	if s.valueFor != "" && len(b) <= maxCapture {
		s.setValue(b)
	}
	s.valueFor = ""
}

// oddEscape says whether an escape is pending at p[j], given that esc
// says it for p[from] and that p[from:j] holds no quote: every backslash
// toggles the pending escape, and any other byte clears it.
func oddEscape(p []byte, from, j int, esc bool) bool {
	k := j
	for k > from && p[k-1] == '\\' {
		k--
	}
	odd := (j-k)&1 == 1
	if k == from {
		return esc != odd
	}
	return odd
}

// wanted names the field whose value follows the ':' just read, or "".
func (s *DocScan) wanted() string {
	switch d := s.depth; {
	case d == 2 && s.object[2] && s.opener[2] == "metadata" && s.key[2] == "matchId":
		return "matchId"
	case d == 2 && s.object[2] && s.opener[2] == "info" && (s.key[2] == "gameCreation" || s.key[2] == "frameInterval"):
		return s.key[2]
	}
	return ""
}

func (s *DocScan) startString() {
	d := s.depth
	s.strIsKey = d < len(s.object) && d > 0 && s.object[d] && s.expectKey[d]
	s.capturing = s.strIsKey || s.valueFor != ""
	s.strBuf = s.strBuf[:0]
}

// captureRun captures the string bytes b, when capturing: a string
// longer than maxCapture is not a field we want (a long key matches
// none).
func (s *DocScan) captureRun(b []byte) {
	if !s.capturing {
		return
	}
	if len(s.strBuf)+len(b) > maxCapture {
		s.capturing = false
		s.strBuf = s.strBuf[:0]
		if s.strIsKey {
			s.strBuf = append(s.strBuf, 0) // a long key: matches no field
		}
		return
	}
	s.strBuf = append(s.strBuf, b...)
}

func (s *DocScan) endString() {
	if s.strIsKey {
		d := s.depth
		s.expectKey[d] = false
		if len(s.strBuf) > 0 && s.strBuf[0] == 0 {
			s.key[d] = "\x00"
		} else {
			s.key[d] = internKey(s.strBuf)
		}
		s.strIsKey, s.capturing = false, false
		return
	}
	if s.capturing {
		s.setValue(s.strBuf)
	}
	s.capturing = false
	s.valueFor = ""
}

func (s *DocScan) endNumber() {
	s.setValue(s.numBuf)
	s.valueFor = ""
}

func (s *DocScan) setValue(v []byte) {
	switch s.valueFor {
	case "matchId":
		s.matchID = append(s.matchID[:0], v...)
	case "gameCreation":
		s.gameCreation = append(s.gameCreation[:0], v...)
	case "frameInterval":
		s.frameInterval = append(s.frameInterval[:0], v...)
	}
}

// internKey returns the keys the scan looks for without allocating; any
// other key becomes "?" (it matches no field).
func internKey(b []byte) string {
	switch string(b) {
	case "info":
		return "info"
	case "metadata":
		return "metadata"
	case "matchId":
		return "matchId"
	case "gameCreation":
		return "gameCreation"
	case "frameInterval":
		return "frameInterval"
	case "frames":
		return "frames"
	}
	return "?"
}

// Close ends the document: a number at its very end is taken.
func (s *DocScan) Close() {
	if s.inNumber {
		s.inNumber = false
		s.endNumber()
	}
}

// MatchID is metadata.matchId ("" when absent).
func (s *DocScan) MatchID() string { return string(s.matchID) }

// GameCreationMs is info.gameCreation (epoch ms; 0 when absent or not a number).
func (s *DocScan) GameCreationMs() int64 { return scanInt(s.gameCreation) }

// FrameIntervalMs is info.frameInterval of a TimelineDto (0 when absent).
func (s *DocScan) FrameIntervalMs() int64 { return scanInt(s.frameInterval) }

// FrameCount is the number of elements of info.frames of a TimelineDto.
func (s *DocScan) FrameCount() int { return s.frames }

func scanInt(b []byte) int64 {
	if len(b) == 0 {
		return 0
	}
	var n Int
	if err := n.UnmarshalJSON(bytes.Clone(b)); err != nil {
		return 0
	}
	return int64(n)
}
