package riot

// This file keeps the DocScan of commit d41beef verbatim (renamed to
// refDocScan, refInternKey, refMaxCapture) as the reference the optimised
// DocScan is checked against in scan_equiv_test.go. Do not edit it.

import "fmt"

// refDocScan is a one-pass, incremental scan of a match-v5 JSON document: it
// enforces the JSON bounds (MaxJSONDepth, MaxJSONContainers,
// MaxJSONElements) and picks out the few fields riftflow needs before the
// document is stored, without decoding the rest. Feed the document in
// chunks of any size with Write; Write fails (wrapping ErrJSONBounds) at
// the first byte past a bound. It is not a JSON validator: syntax errors
// that keep within the bounds pass (Postgres' json input, or a full
// decode, catches them). Memory is constant (a few hundred bytes).
//
// The zero value is ready to use; Reset makes it reusable.
type refDocScan struct {
	depth, containers, elements int
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
func (s *refDocScan) Reset() {
	*s = refDocScan{strBuf: s.strBuf[:0], numBuf: s.numBuf[:0],
		matchID: s.matchID[:0], gameCreation: s.gameCreation[:0], frameInterval: s.frameInterval[:0]}
}

// refMaxCapture bounds a captured key or value; longer ones are not the
// fields we want.
const refMaxCapture = 64

// Write scans the next chunk of the document. It never keeps p.
func (s *refDocScan) Write(p []byte) (int, error) {
	for i, c := range p {
		if s.inString {
			switch {
			case s.escaped:
				s.escaped = false
				s.capture(c)
			case c == '\\':
				s.escaped = true
				s.capture(c)
			case c == '"':
				s.inString = false
				s.endString()
			default:
				s.capture(c)
			}
			continue
		}
		if s.inNumber {
			if (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
				if len(s.numBuf) < refMaxCapture {
					s.numBuf = append(s.numBuf, c)
				}
				continue
			}
			s.inNumber = false
			s.endNumber()
		}
		if s.inFrames && s.depth == 3 && !s.framesSeen && c != ' ' && c != '\n' && c != '\t' && c != '\r' && c != ']' {
			s.framesSeen = true
			s.frames = 1
		}
		switch c {
		case '"':
			s.inString = true
			s.startString()
		case '{', '[':
			s.depth++
			s.containers++
			s.elements++
			if s.depth > MaxJSONDepth {
				return i, fmt.Errorf("%w: nesting deeper than %d", ErrJSONBounds, MaxJSONDepth)
			}
			if s.containers > MaxJSONContainers {
				return i, fmt.Errorf("%w: more than %d objects and arrays", ErrJSONBounds, MaxJSONContainers)
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
		case '}', ']':
			if s.depth == 0 {
				// More closed than opened: not JSON, and the depth
				// bookkeeping below must never go negative.
				return i, fmt.Errorf("%w: %q closes nothing (not JSON)", ErrJSONBounds, c)
			}
			if s.depth == 3 {
				s.inFrames = false
			}
			s.depth--
			s.valueFor = ""
		case ',':
			s.elements++
			if s.elements > MaxJSONElements {
				return i, fmt.Errorf("%w: more than %d elements", ErrJSONBounds, MaxJSONElements)
			}
			if d := s.depth; d < len(s.object) && s.object[d] {
				s.expectKey[d] = true
			}
			if s.inFrames && s.depth == 3 {
				s.frames++
			}
			s.valueFor = ""
		case ':':
			s.valueFor = s.wanted()
		case ' ', '\n', '\t', '\r':
		default:
			if s.valueFor != "" && ((c >= '0' && c <= '9') || c == '-') {
				s.inNumber = true
				s.numBuf = append(s.numBuf[:0], c)
			}
		}
	}
	return len(p), nil
}

// wanted names the field whose value follows the ':' just read, or "".
func (s *refDocScan) wanted() string {
	switch d := s.depth; {
	case d == 2 && s.object[2] && s.opener[2] == "metadata" && s.key[2] == "matchId":
		return "matchId"
	case d == 2 && s.object[2] && s.opener[2] == "info" && (s.key[2] == "gameCreation" || s.key[2] == "frameInterval"):
		return s.key[2]
	}
	return ""
}

func (s *refDocScan) startString() {
	d := s.depth
	s.strIsKey = d < len(s.object) && d > 0 && s.object[d] && s.expectKey[d]
	s.capturing = s.strIsKey || s.valueFor != ""
	s.strBuf = s.strBuf[:0]
}

func (s *refDocScan) capture(c byte) {
	if s.capturing {
		if len(s.strBuf) >= refMaxCapture {
			s.capturing = false
			s.strBuf = s.strBuf[:0]
			if s.strIsKey {
				s.strBuf = append(s.strBuf, 0) // a long key: matches no field
			}
			return
		}
		s.strBuf = append(s.strBuf, c)
	}
}

func (s *refDocScan) endString() {
	if s.strIsKey {
		d := s.depth
		s.expectKey[d] = false
		if len(s.strBuf) > 0 && s.strBuf[0] == 0 {
			s.key[d] = "\x00"
		} else {
			s.key[d] = refInternKey(s.strBuf)
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

func (s *refDocScan) endNumber() {
	s.setValue(s.numBuf)
	s.valueFor = ""
}

func (s *refDocScan) setValue(v []byte) {
	switch s.valueFor {
	case "matchId":
		s.matchID = append(s.matchID[:0], v...)
	case "gameCreation":
		s.gameCreation = append(s.gameCreation[:0], v...)
	case "frameInterval":
		s.frameInterval = append(s.frameInterval[:0], v...)
	}
}

// refInternKey returns the keys the scan looks for without allocating; any
// other key becomes "?" (it matches no field).
func refInternKey(b []byte) string {
	for _, k := range [...]string{"info", "metadata", "matchId", "gameCreation", "frameInterval", "frames"} {
		if string(b) == k {
			return k
		}
	}
	return "?"
}

// Close ends the document: a number at its very end is taken.
func (s *refDocScan) Close() {
	if s.inNumber {
		s.inNumber = false
		s.endNumber()
	}
}
