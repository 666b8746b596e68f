package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/riftflow/riftflow/pkg/fault"
)

// copyTimelines copies rows into table (match_timelines, or the staging
// table with seq) as a binary COPY stream written here rather than by
// pgx.CopyFrom: pgx builds each row in one buffer, which for a timeline
// (0.3–1.7 MB of JSON) means growing a fresh multi-megabyte buffer for
// every batch and copying the document into it. This stream hands Postgres
// the document straight from the buffer it was inflated into (doc, one
// row at a time), so a batch holds one timeline decompressed and nothing
// else. With seq, each row starts with its index (the staging tables'
// seq column). A document that cannot be inflated (TimelineRow.Compressed)
// ends the copy with that error, kind Invalid.
func copyTimelines(ctx context.Context, tx pgx.Tx, table string, seq bool, rows []TimelineRow, doc *bytes.Buffer, maxDoc int64) error {
	if len(rows) == 0 {
		return nil
	}
	cols := timelineCols
	if seq {
		cols = append([]string{"seq"}, cols...)
	}
	r := &timelineStream{rows: rows, seq: seq, doc: doc, maxDoc: maxDoc}
	r.head = append(r.head, "PGCOPY\n\xff\r\n\x00"...)
	r.head = binary.BigEndian.AppendUint32(r.head, 0) // flags
	r.head = binary.BigEndian.AppendUint32(r.head, 0) // header extension length
	sql := fmt.Sprintf("COPY %s (%s) FROM STDIN BINARY", pgx.Identifier{table}.Sanitize(), strings.Join(cols, ", "))
	_, err := tx.Conn().PgConn().CopyFrom(ctx, r, sql)
	if r.err != nil {
		return fmt.Errorf("copy %s: %w", table, r.err)
	}
	if err != nil {
		return fmt.Errorf("copy %s: %w", table, err)
	}
	return nil
}

// pgEpoch is the zero of Postgres' binary timestamps (microseconds since).
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// timelineStream is an io.Reader of a binary COPY stream of timeline rows:
// the header, per row a field count and each field as a 4-byte length
// (-1 for NULL) and its bytes, then the trailer.
type timelineStream struct {
	rows   []TimelineRow
	seq    bool
	doc    *bytes.Buffer
	maxDoc int64

	next int    // the next row to encode
	head []byte // encoded bytes not yet read, before body
	body []byte // the current document (raw or raw_gzip), not yet read
	tail []byte // encoded bytes after body, not yet read
	done bool   // the trailer is encoded
	err  error  // a row that could not be encoded
	buf  []byte // scratch for tail
}

func (r *timelineStream) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		switch {
		case len(r.head) > 0:
			c := copy(p[n:], r.head)
			r.head, n = r.head[c:], n+c
		case len(r.body) > 0:
			c := copy(p[n:], r.body)
			r.body, n = r.body[c:], n+c
		case len(r.tail) > 0:
			c := copy(p[n:], r.tail)
			r.tail, n = r.tail[c:], n+c
		case r.next < len(r.rows):
			if err := r.encode(&r.rows[r.next]); err != nil {
				r.err = err
				return n, err
			}
			r.next++
		case !r.done:
			r.head = binary.BigEndian.AppendUint16(r.head[:0], 0xffff) // trailer: -1
			r.done = true
		default:
			if n > 0 {
				return n, nil
			}
			return 0, io.EOF
		}
	}
	return n, nil
}

// encode lays out row t: head is every field before the document, body the
// document, tail raw_gzip and fetched_at. A NULL raw is written as -1 and
// the gzip goes in tail.
func (r *timelineStream) encode(t *TimelineRow) error {
	raw, rawGz := t.Raw, t.RawGzip
	if t.Compressed != nil {
		var err error
		if raw, rawGz, err = inflateDoc(r.doc, t.Compressed, r.maxDoc); err != nil {
			return fault.Wrap(fault.Invalid, fmt.Errorf("timeline %s: %w", t.MatchID, err))
		}
	}
	h := r.head[:0]
	nf := len(timelineCols)
	if r.seq {
		nf++
	}
	h = binary.BigEndian.AppendUint16(h, uint16(nf))
	if r.seq {
		h = appendInt4(h, r.next)
	}
	h = binary.BigEndian.AppendUint32(h, uint32(len(t.MatchID)))
	h = append(h, t.MatchID...)
	h = appendInt4(h, t.FrameIntervalMs)
	h = appendInt4(h, t.FrameCount)
	h = appendLen(h, raw)
	r.head, r.body = h, raw

	tl := appendLen(r.buf[:0], rawGz)
	tl = append(tl, rawGz...)
	if t.FetchedAt.IsZero() {
		tl = binary.BigEndian.AppendUint32(tl, 0xffffffff) // NULL
	} else {
		tl = binary.BigEndian.AppendUint32(tl, 8)
		tl = binary.BigEndian.AppendUint64(tl, uint64(t.FetchedAt.Sub(pgEpoch).Microseconds()))
	}
	r.buf, r.tail = tl, tl
	return nil
}

// appendInt4 appends an int4 field: its length (4) and value.
func appendInt4(b []byte, v int) []byte {
	b = binary.BigEndian.AppendUint32(b, 4)
	return binary.BigEndian.AppendUint32(b, uint32(int32(v)))
}

// appendLen appends a field's length, or -1 for a nil (NULL) value.
func appendLen(b, v []byte) []byte {
	if v == nil {
		return binary.BigEndian.AppendUint32(b, 0xffffffff)
	}
	return binary.BigEndian.AppendUint32(b, uint32(len(v)))
}
