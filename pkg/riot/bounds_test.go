package riot

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
)

// A crafted TimelineDto of five million empty frames compresses to a few
// KiB and would take over a gigabyte of heap to decode. It is refused by
// the shape check before any allocation.
func TestDecodeRefusesCraftedDocuments(t *testing.T) {
	var doc bytes.Buffer
	doc.WriteString(`{"metadata":{"matchId":"EUW1_1"},"info":{"frameInterval":60000,"frames":[{}`)
	doc.WriteString(strings.Repeat(`,{}`, 5_000_000))
	doc.WriteString(`]}}`)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(doc.Bytes())
	zw.Close()
	if gz.Len() > 64<<10 {
		t.Fatalf("crafted gzip is %d bytes; the premise is a small body", gz.Len())
	}
	zr, _ := gzip.NewReader(&gz)
	raw, _ := io.ReadAll(zr)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := DecodeTimeline(raw)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrJSONBounds) {
		t.Fatalf("DecodeTimeline(crafted) = %v, want ErrJSONBounds", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("refusing the crafted document allocated %d bytes", alloc)
	}

	deep := strings.Repeat(`[`, MaxJSONDepth+1) + strings.Repeat(`]`, MaxJSONDepth+1)
	if _, err := DecodeMatch([]byte(`{"metadata":{"matchId":"EUW1_1"},"x":` + deep + `}`)); !errors.Is(err, ErrJSONBounds) {
		t.Errorf("DecodeMatch(deep) = %v, want ErrJSONBounds", err)
	}
	many := `{"metadata":{"matchId":"EUW1_1"},"x":[0` + strings.Repeat(`,0`, MaxJSONElements) + `]}`
	if _, err := DecodeMatch([]byte(many)); !errors.Is(err, ErrJSONBounds) {
		t.Errorf("DecodeMatch(many elements) = %v, want ErrJSONBounds", err)
	}
	// Brackets and commas inside strings do not count.
	quoted := `{"metadata":{"matchId":"EUW1_1"},"x":"` + strings.Repeat(`[,{\"`, 100_000) + `"}`
	if _, err := DecodeMatch([]byte(quoted)); err != nil {
		t.Errorf("DecodeMatch(brackets in a string) = %v, want nil", err)
	}
}

// The recorded documents are well inside the bounds.
func TestRecordedDocumentsWithinBounds(t *testing.T) {
	for _, f := range recordedDocs {
		if err := checkShape(testdataFile(t, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
