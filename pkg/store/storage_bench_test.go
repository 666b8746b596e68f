package store_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BenchmarkRawStorage compares ways of keeping the raw Riot documents (the
// recorded MatchDto and TimelineDto files of testdata/riot-fixtures) in
// one table: json with lz4 TOAST compression (the text as sent, byte-equal,
// queryable), jsonb with lz4 (parsed into a binary form: not byte-equal),
// json with Postgres' default pglz, and gzip bytes in bytea (the old
// layout, not queryable). Each op COPYs every document once in one
// transaction. Metrics: MB/s of JSON in, bytes on disk per document
// (heap + TOAST + index), and ms of one analyst query over the match
// documents (the mean of info.gameDuration by queueId), run 5 times.
func BenchmarkRawStorage(b *testing.B) {
	var matches, timelines [][]byte
	for kind, dst := range map[string]*[][]byte{"match": &matches, "timeline": &timelines} {
		files, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "riot-fixtures", kind, "*.json"))
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				b.Fatal(err)
			}
			*dst = append(*dst, raw)
		}
	}
	if len(matches) == 0 || len(timelines) == 0 {
		b.Skip("testdata/riot-fixtures not found")
	}
	var inBytes int
	for _, d := range append(append([][]byte{}, matches...), timelines...) {
		inBytes += len(d)
	}
	gzipped := func(docs [][]byte) [][]byte {
		out := make([][]byte, len(docs))
		for i, d := range docs {
			var buf bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
			zw.Write(d)
			zw.Close()
			out[i] = buf.Bytes()
		}
		return out
	}
	gzMatches, gzTimelines := gzipped(matches), gzipped(timelines)
	for _, c := range []struct{ name, typ, compression string }{
		{"json_lz4", "json", "lz4"}, {"jsonb_lz4", "jsonb", "lz4"}, {"json_pglz", "json", "pglz"}, {"bytea_gzip", "bytea", ""},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := openStore(b)
			ctx := context.Background()
			col := c.typ
			if c.compression != "" {
				col += " COMPRESSION " + c.compression
			}
			for _, t := range []string{"m", "t"} {
				if _, err := s.db.Exec(ctx, fmt.Sprintf(`CREATE TABLE raw_%s (id text PRIMARY KEY, doc %s)`, t, col)); err != nil {
					b.Fatal(err)
				}
				if c.typ == "bytea" { // gzip already: no second compression
					if _, err := s.db.Exec(ctx, `ALTER TABLE raw_`+t+` ALTER COLUMN doc SET STORAGE EXTERNAL`); err != nil {
						b.Fatal(err)
					}
				}
			}
			ms, ts := matches, timelines
			if c.typ == "bytea" {
				ms, ts = gzMatches, gzTimelines
			}
			n := 0
			for b.Loop() {
				err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
					for t, docs := range map[string][][]byte{"m": ms, "t": ts} {
						if _, err := tx.CopyFrom(ctx, pgx.Identifier{"raw_" + t}, []string{"id", "doc"},
							pgx.CopyFromSlice(len(docs), func(i int) ([]any, error) {
								return []any{fmt.Sprintf("%d_%d", n, i), docs[i]}, nil
							})); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.ReportMetric(float64(inBytes)*float64(n)/b.Elapsed().Seconds()/1e6, "MB/s")
			var size int64
			if err := s.db.QueryRow(ctx, `SELECT pg_total_relation_size('raw_m') + pg_total_relation_size('raw_t')`).Scan(&size); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(size)/float64(n*(len(ms)+len(ts))), "disk-B/doc")
			if c.typ == "bytea" {
				return
			}
			b.StopTimer()
			start := time.Now()
			for range 5 {
				rows, err := s.db.Query(ctx, `SELECT doc->'info'->>'queueId', avg((doc->'info'->>'gameDuration')::numeric)
FROM raw_m GROUP BY 1`)
				if err != nil {
					b.Fatal(err)
				}
				rows.Close()
			}
			b.ReportMetric(float64(time.Since(start).Milliseconds())/5/float64(n), "query-ms/copy")
		})
	}
}
