package riot

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
)

// Body is a match-v5 document as Riot served it, kept compressed: riftflow
// passes these bytes through to storage without decoding and re-encoding
// them.
type Body struct {
	// Gzip is the JSON body gzip-compressed: Riot's own bytes when it
	// answered with Content-Encoding: gzip (the client asks for it),
	// otherwise the plain body compressed here.
	Gzip []byte
	// Size is the decompressed length in bytes.
	Size int64
	// MatchID is metadata.matchId, GameCreationMs info.gameCreation (epoch
	// ms, MatchDto only; 0 when absent), as read by the bounded scan.
	MatchID        string
	GameCreationMs int64
	// FrameIntervalMs (info.frameInterval, ms) and FrameCount
	// (len(info.frames)) are a TimelineDto's, read by the same scan; 0 for
	// a MatchDto. Scanned is true when the scan read the whole body, so
	// they are known (a zero FrameCount is then a timeline without frames).
	FrameIntervalMs int64
	FrameCount      int
	Scanned         bool
}

// MatchBody is Match without the decoding: it checks the body (the size
// caps of MaxBodyBytes on the compressed and the decompressed bytes, that
// the gzip is whole and its checksum right, the JSON bounds, and that
// metadata.matchId is present) and returns it compressed. A body past a
// bound or without a match id is KindDecode; a corrupt or truncated gzip
// is KindTransport, as a cut connection is.
func (c *Client) MatchBody(ctx context.Context, region Region, matchID string) (Body, error) {
	return c.body(ctx, matchDoc, region, matchID)
}

// TimelineBody is MatchBody for getTimeline.
func (c *Client) TimelineBody(ctx context.Context, region Region, matchID string) (Body, error) {
	return c.body(ctx, timelineDoc, region, matchID)
}

func (c *Client) body(ctx context.Context, ep docEndpoint, region Region, matchID string) (Body, error) {
	req, rerr := ep.request(region, matchID)
	if rerr != nil {
		return Body{}, rerr
	}
	scan := scanPool.Get().(*DocScan)
	defer scanPool.Put(scan)
	req.scan = scan
	gz, err := c.get(ctx, req)
	if err != nil {
		return Body{}, err
	}
	b := Body{Gzip: gz, Size: scan.size, MatchID: scan.MatchID(), GameCreationMs: scan.GameCreationMs(),
		FrameIntervalMs: scan.FrameIntervalMs(), FrameCount: scan.FrameCount(), Scanned: true}
	if b.MatchID == "" {
		return Body{}, &Error{Kind: KindDecode, Op: req.method, Route: req.route, Status: 200,
			Err: fmt.Errorf("decode %s: %w", strings.TrimPrefix(ep.op, "match-v5.get"), errNoMatchID)}
	}
	return b, nil
}

var (
	scanPool     = sync.Pool{New: func() any { return new(DocScan) }}
	gzReaderPool sync.Pool // *gzip.Reader
	gzWriterPool = sync.Pool{New: func() any { w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed); return w }}
)

// readKeptBody reads a 2xx body as sent, at most limit bytes, and checks
// it through scan (reset first): decompressed (when gzip) to at most limit
// bytes, the gzip checksum verified, the JSON bounds enforced. It returns
// the gzip bytes; a plain body is compressed here.
func readKeptBody(resp *http.Response, limit int64, scan *DocScan) ([]byte, error) {
	scan.Reset()
	var buf bytes.Buffer
	if n := resp.ContentLength; n > 0 && n <= limit {
		buf.Grow(int(n) + bytes.MinRead)
	}
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, limit+1)); err != nil {
		return nil, err
	}
	if int64(buf.Len()) > limit {
		return nil, fmt.Errorf("%w (%d bytes)", errBodyTooLarge, limit)
	}
	w := &cappedScan{scan: scan, limit: limit}
	if !strings.EqualFold(strings.TrimSpace(resp.Header.Get("Content-Encoding")), "gzip") {
		if _, err := w.Write(buf.Bytes()); err != nil {
			return nil, err
		}
		scan.Close()
		return Gzip(buf.Bytes())
	}
	if err := gunzipTo(w, buf.Bytes()); err != nil {
		return nil, err
	}
	scan.Close()
	return buf.Bytes(), nil
}

// gunzipTo decompresses gz into w with a pooled reader.
func gunzipTo(w io.Writer, gz []byte) error {
	zr, _ := gzReaderPool.Get().(*gzip.Reader)
	var err error
	if zr == nil {
		zr, err = gzip.NewReader(bytes.NewReader(gz))
	} else {
		err = zr.Reset(bytes.NewReader(gz))
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("gzip: %w", err)
	}
	defer gzReaderPool.Put(zr)
	if _, err := io.Copy(w, zr); err != nil {
		if errors.Is(err, errBodyTooLarge) || errors.Is(err, ErrJSONBounds) {
			return err
		}
		return fmt.Errorf("gzip: %w", err)
	}
	return nil
}

// Gunzip decompresses a gzip document into dst (reset first, reused),
// failing when it would exceed limit bytes. The reader is pooled.
func Gunzip(dst *bytes.Buffer, gz []byte, limit int64) error {
	dst.Reset()
	if len(gz) == 0 {
		return errors.New("empty payload")
	}
	// The trailer's ISIZE (length mod 2^32): grow once, not by doubling.
	if len(gz) >= 4 {
		if n := int64(binary.LittleEndian.Uint32(gz[len(gz)-4:])); n <= limit {
			dst.Grow(int(n))
		}
	}
	return gunzipTo(&cappedBuffer{buf: dst, limit: limit}, gz)
}

type cappedBuffer struct {
	buf   *bytes.Buffer
	limit int64
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if int64(c.buf.Len()+len(p)) > c.limit {
		return 0, fmt.Errorf("%w (%d bytes decompressed)", errBodyTooLarge, c.limit)
	}
	return c.buf.Write(p)
}

// cappedScan feeds a DocScan and fails past limit decompressed bytes.
type cappedScan struct {
	scan  *DocScan
	limit int64
}

func (c *cappedScan) Write(p []byte) (int, error) {
	c.scan.size += int64(len(p))
	if c.scan.size > c.limit {
		return 0, fmt.Errorf("%w (%d bytes decompressed)", errBodyTooLarge, c.limit)
	}
	return c.scan.Write(p)
}

// Gzip compresses b (BestSpeed, pooled writer): a plain body from a server
// that ignored Accept-Encoding, or a test fixture. The result is a new slice.
func Gzip(b []byte) ([]byte, error) {
	var out bytes.Buffer
	out.Grow(len(b)/5 + 64)
	zw := gzWriterPool.Get().(*gzip.Writer)
	defer gzWriterPool.Put(zw)
	zw.Reset(&out)
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
