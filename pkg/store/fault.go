package store

import (
	"errors"
	"io"
	"net"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/riftflow/riftflow/pkg/fault"
)

// classify is the fault.Classifier of errors from Postgres and pgx.
//
// Only the data's own faults are Invalid: SQLSTATE class 22 (data
// exception: a NUL byte in text, a value out of range), class 23
// (integrity constraint violation) and 54000 (program limit exceeded: a row
// or index entry too large). Retrying the same rows can never succeed.
//
// Everything else Postgres says is about the server, not the data, and is
// Transient: class 08 (connection exception), 25006 (read-only transaction:
// a standby, or default_transaction_read_only during maintenance), 25P03
// (idle-in-transaction timeout), class 40 (serialization failure,
// deadlock), class 53 (insufficient resources: 53100 disk full, 53200 out
// of memory, 53300 too many connections), 55P03 and 55006 (lock not
// available, object in use), class 57 (operator intervention: 57014
// statement timeout or cancel, 57P01–57P05 shutdown and crash recovery),
// class 58 (system or I/O error), class XX (internal error), and class 42
// (a missing table or privilege is an operator's fault that a migration or
// grant fixes, never a reason to drop the data). Network errors, a closed
// pool and pgx's SafeToRetry errors are Transient too.
//
// See https://www.postgresql.org/docs/current/errcodes-appendix.html.
func classify(err error) (fault.Kind, bool) {
	if err == nil {
		return fault.Transient, false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch code := pgErr.Code; {
		case strings.HasPrefix(code, "22"), strings.HasPrefix(code, "23"), code == "54000":
			return fault.Invalid, true
		default:
			return fault.Transient, true
		}
	}
	var netErr net.Error
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) || errors.As(err, &netErr) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		strings.Contains(err.Error(), "closed pool") || strings.Contains(err.Error(), "conn closed") {
		return fault.Transient, true
	}
	return fault.Transient, false
}

// classified gives *err its fault.Kind at the store's boundary: every
// exported Store method that returns an error defers it, so its callers
// read the kind with fault.KindOf alone. An error with a *fault.Error in
// its chain already (a document the store itself refused as Invalid) is
// left as it is; any other becomes a *fault.Error of kind
// fault.KindOf(*err, classify) wrapping it unchanged: the same message
// (with its SQLSTATE), and errors.Is and errors.As still reach the pgx and
// pgconn errors and the store's own (ErrNotFound, ErrNoAnswer, …).
func classified(err *error) {
	if *err == nil {
		return
	}
	var fe *fault.Error
	if errors.As(*err, &fe) {
		return
	}
	*err = fault.Wrap(fault.KindOf(*err, classify), *err)
}

// StripNUL removes NUL bytes (U+0000) from every text value of b and
// replaces byte sequences that are not UTF-8 with U+FFFD, both of which
// Postgres cannot store in text (SQLSTATE 22021), and returns how many
// values it changed. The raw documents are not touched: the persister
// stores a document with a NUL byte as gzip bytes (MatchRow.RawGzip).
func (b *Batch) StripNUL() int {
	n := 0
	fix := func(s *string) {
		if t := CleanText(*s); t != *s {
			*s = t
			n++
		}
	}
	for i := range b.Matches {
		m := &b.Matches[i]
		for _, s := range []*string{&m.MatchID, &m.Platform, &m.Region, &m.GameMode, &m.GameType,
			&m.GameVersion, &m.Patch, &m.EndOfGameResult} {
			fix(s)
		}
	}
	for i := range b.Participants {
		p := &b.Participants[i]
		for _, s := range []*string{&p.MatchID, &p.PUUID, &p.RiotIDGameName, &p.RiotIDTagline,
			&p.ChampionName, &p.TeamPosition, &p.IndividualPosition, &p.Role, &p.Lane} {
			fix(s)
		}
	}
	for i := range b.Timelines {
		fix(&b.Timelines[i].MatchID)
	}
	for i := range b.Ledger {
		l := &b.Ledger[i]
		for _, s := range []*string{&l.MatchID, &l.Kind, &l.Status, &l.Error} {
			fix(s)
		}
	}
	return n
}

// CleanText is s without NUL bytes and with every byte sequence that is
// not UTF-8 replaced by U+FFFD: text Postgres can store.
func CleanText(s string) string {
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "")
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return s
}
