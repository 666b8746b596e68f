package riot

// refDocScan is the reference the optimised DocScan.Write is checked
// against in scan_equiv_test.go: DocScan driven one byte at a time. Its
// steps at each token (open, close, comma, wanted, startString, endString,
// endNumber, takeNumberByte, noteFirstFrame) are DocScan's own, written
// once in scan.go; what it restates, in the plainest form, is what
// DocScan.Write does faster: reading a string byte by byte (escapes,
// capture, its closing quote), where scanString, quoteAt, oddEscape,
// captureRun and wholeString take a string in runs or whole; stepping over
// every plain byte, where skipPlain skips runs of them; and counting the
// bounds below the tracked depths one byte at a time, where scanDeep
// counts them in a loop of its own. The fields a scan picks are checked
// against the full decoders in TestDocScanChunked.
//
// The zero value is ready to use; Reset makes it reusable.
type refDocScan struct{ DocScan }

// Write scans the next chunk of the document, one byte at a time. It never
// keeps p. On a bound exceeded it returns the index in p of the offending
// byte and an error wrapping ErrJSONBounds.
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
		if s.inNumber && s.takeNumberByte(c) {
			continue
		}
		s.noteFirstFrame(c)
		var err error
		switch c {
		case '"':
			s.inString = true
			s.startString()
		case '{', '[':
			err = s.open(c)
		case '}', ']':
			err = s.close(c)
		case ',':
			err = s.comma()
		case ':':
			s.valueFor = s.wanted()
		case ' ', '\n', '\t', '\r':
		default:
			if s.valueFor != "" && ((c >= '0' && c <= '9') || c == '-') {
				s.inNumber = true
				s.numBuf = append(s.numBuf[:0], c)
			}
		}
		if err != nil {
			return i, err
		}
	}
	return len(p), nil
}

// capture captures one byte of the current string, when capturing: a
// string longer than maxCapture is not a field we want (a long key
// matches none).
func (s *refDocScan) capture(c byte) {
	if !s.capturing {
		return
	}
	if len(s.strBuf) >= maxCapture {
		s.capturing = false
		s.strBuf = s.strBuf[:0]
		if s.strIsKey {
			s.strBuf = append(s.strBuf, 0) // a long key: matches no field
		}
		return
	}
	s.strBuf = append(s.strBuf, c)
}
