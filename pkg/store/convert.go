package store

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// JSONStorable reports whether doc can be stored byte-equal in a json
// column: valid UTF-8 without a NUL byte (Postgres text cannot hold
// either). Syntax is checked by Postgres on insert.
func JSONStorable(doc []byte) bool {
	return bytes.IndexByte(doc, 0) < 0 && utf8.Valid(doc)
}

// gunzipAll decompresses a document kept in raw_gzip (one that
// JSONStorable refuses, or one stored before schema version 004).
func gunzipAll(gz []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}

// convertRawDocuments moves documents stored by schema versions before 004
// (gzip bytes, now raw_gzip) into the json column raw, in batches of 100
// rows per transaction, each row once: a row whose document a json column
// cannot hold byte-equal keeps raw_gzip. It is idempotent and resumable
// (it picks rows with raw NULL and raw_gzip set, past the last one seen).
func convertRawDocuments(ctx context.Context, conn *pgx.Conn, logger *slog.Logger) error {
	for _, table := range []string{"matches", "match_timelines"} {
		after, moved, kept := "", 0, 0
		for {
			rows, err := conn.Query(ctx, `SELECT match_id, raw_gzip FROM `+table+`
WHERE raw IS NULL AND raw_gzip IS NOT NULL AND match_id > $1 ORDER BY match_id LIMIT 100`, after)
			if err != nil {
				return fmt.Errorf("store: convert %s: %w", table, err)
			}
			type doc struct {
				id  string
				raw []byte
			}
			var docs []doc
			var ids []string
			for rows.Next() {
				var id string
				var gz []byte
				if err := rows.Scan(&id, &gz); err != nil {
					rows.Close()
					return fmt.Errorf("store: convert %s: %w", table, err)
				}
				ids = append(ids, id)
				if raw, err := gunzipAll(gz); err == nil && JSONStorable(raw) && json.Valid(raw) {
					docs = append(docs, doc{id, raw})
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return fmt.Errorf("store: convert %s: %w", table, err)
			}
			if len(ids) == 0 {
				break
			}
			after = ids[len(ids)-1]
			err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				for _, d := range docs {
					if _, err := tx.Exec(ctx, `UPDATE `+table+` SET raw = $2::text::json, raw_gzip = NULL WHERE match_id = $1`,
						d.id, string(d.raw)); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("store: convert %s: %w", table, err)
			}
			moved += len(docs)
			kept += len(ids) - len(docs)
		}
		if moved+kept > 0 {
			logger.Info("raw documents moved to json", "table", table, "moved", moved, "kept_gzip", kept)
		}
	}
	return nil
}
